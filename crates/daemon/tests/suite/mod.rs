//! One module per behaviour of the daemon; `support` holds what they share.

mod agenda;
mod subagents;
mod supervisor;
mod support;
