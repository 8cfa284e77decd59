mod auth_env;
mod delegation;
mod readiness;
mod real_clis;
mod support;
