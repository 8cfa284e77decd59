mod auth_env;
mod delegation;
mod hardening;
mod readiness;
mod real_clis;
mod support;
mod worker_codex;
mod worker_transcripts;
