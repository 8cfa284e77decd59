mod agents;
mod approvals;
mod resume;
mod sessions;
