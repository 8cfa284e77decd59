//! Integration tests of `intendant-runtime`, one file per area; `support` runs the binary.

mod ask_human;
mod edit;
mod exec;
mod inspect;
mod parent_death;
mod protocol;
mod pty;
mod screen;
mod security_browse;
mod security_env;
mod security_forgery;
mod security_git;
mod security_kernel;
mod security_network;
mod security_paths;
mod security_reads;
mod security_sandbox;
mod security_sandboxed_stdio;
mod support;
