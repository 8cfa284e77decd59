mod agents;
mod approvals;
mod controller;
mod resume;
mod sessions;
mod terminal_tty;
