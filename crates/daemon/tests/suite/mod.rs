//! One module per behaviour of the daemon; `support` holds what they share.

mod subagents;
mod supervisor;
mod support;
