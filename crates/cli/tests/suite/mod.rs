mod agents;
mod approvals;
mod controller;
mod records_boundary;
mod resume;
mod security_controller;
mod sessions;
mod terminal_tty;
