mod approvals;
mod resume;
mod sessions;
