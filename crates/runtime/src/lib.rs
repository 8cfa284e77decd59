//! `intendant-runtime`: the executor half of the controller/runtime split
//! (`docs/runtime-protocol.md`, `docs/design.md`).
//!
//! It reads one `AgentInput`, runs its commands strictly in order, writes one result envelope
//! per command and exits. It holds no keys and talks to no model. The one design decision to
//! know: everything that keeps a hostile model in its box (Landlock, the environment scrub,
//! the path guard, the address guard of `browse`, non-dumpability) is applied *inside* this
//! process, so it holds however the runtime was started.
//!
//! # Layout
//! Protocol and execution:
//! - `input`: bounded stdin read and parse, with a safe preview on failure.
//! - `batch`: the sequential dispatcher and the envelope writer; abort-versus-continue.
//! - `logdir`: resolution of the log directory; `artifact`: create-new unpredictable log files.
//! - `exec`, `nonce`, `display`, `pty`, `edit`, `inspect`, `ask_human`, `screen`: one module
//!   per function or concern.
//! - `child`: the child supervision `exec`, `pty` and `display` share (environment, shell,
//!   deadline, process-group stop); `spawn`: the lean start of `execAsAgent`'s shell.
//!
//! Security boundary (`docs/security.md`):
//! - `sandbox`: the Landlock write sandbox, fail closed (and, where the controller asks, a
//!   Landlock wall over the TCP ports commands connect to).
//! - `netns`: a session's own network namespace: its holder (`--hold-network`) and the join
//!   each runtime makes before its sandbox.
//! - `sandboxed`: `--sandboxed-stdio`, the same walls around one long-lived program (an MCP
//!   server, a hook) that then replaces the runtime, its stdio piped by the controller.
//! - `guard`: `--guard`, which ends a long-lived program (an agent CLI worker, and the program
//!   `--sandboxed-stdio` runs) and all it started when the controller dies.
//! - `envguard`: the environment a model-driven shell receives.
//! - `pathguard`: `validate_path()` for the structured tools.
//! - `netguard` (the `intendant-netguard` crate, shared with the egress proxy) and `browse`: the
//!   address policy and the SSRF-safe fetch.
//! - `hardening`: process-level hardening (non-dumpable).

pub mod artifact;
pub mod ask_human;
pub mod batch;
pub mod browse;
pub mod child;
pub mod display;
pub mod edit;
pub mod envguard;
pub mod exec;
pub mod guard;
pub mod hardening;
pub mod input;
pub mod inspect;
pub mod logdir;
/// The address policy, shared with the controller's egress proxy (one copy, its own crate).
pub use intendant_netguard as netguard;
pub mod netns;
pub mod nonce;
pub mod pathguard;
pub mod pty;
pub mod sandbox;
pub mod sandboxed;
pub mod screen;
pub mod spawn;
