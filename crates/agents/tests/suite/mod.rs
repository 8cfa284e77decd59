mod delegation;
mod readiness;
mod support;
