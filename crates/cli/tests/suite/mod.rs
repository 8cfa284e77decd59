mod agents;
mod approvals;
mod controller;
mod resume;
mod sessions;
