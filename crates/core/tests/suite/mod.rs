//! One module per behaviour of the loop; `support` builds the world each test runs in.

mod approvals;
mod cancel;
mod checkpoints;
mod compaction;
mod faults;
mod limits;
mod memory;
mod sandboxed;
mod support;
mod text_tools;
mod turns;
