//! Integration tests of `intendant-runtime`, one file per area; `support` runs the binary.

mod ask_human;
mod edit;
mod exec;
mod inspect;
mod protocol;
mod pty;
mod screen;
mod support;
