//! The controller's brain: conversation, agent loop, runtime runner, approvals, session log,
//! EventBus.
//!
//! The one design decision to know: the loop speaks to frontends only through the [`bus`]
//! (events out, intents in), and everything durable (the session log, approvals) reads a
//! lossless lane of it, never the lossy broadcast ring.
//!
//! # Layout
//! - `config`: `intendant.toml`, parsed once into plain structs.
//! - `bus`, `intents`: the EventBus (broadcast ring plus two lossless lanes) and the intent
//!   inbox that buffers what a waiter is not waiting for.
//! - `session`: `run_session`, the one way to run a session (its first and last events around
//!   the loop); `session::assemble`: the one way to start one (provider, prompts, trust check,
//!   log, approval gate, runner) from a plain spec; `outcome`: how a session ended, the same
//!   for every backend (a leaf: it names nothing of the loop); `agent_loop`: the canonical
//!   loop; `tools`: the tool catalog and its mapping to runtime commands (`tool_args`: the
//!   argument reader it shares with `subagents`); `conversation`: history and compaction;
//!   `prompts`: the system prompt cascade and injected context; `skills`: the Agent Skills
//!   catalog and `invoke_skill`, read once at the start; `ask_human`: the question card and
//!   headless recovery.
//! - `hooks`: the owner's commands bound to a session's events (`[hooks]`), fail-closed at
//!   the two gates (`pre_tool_use`, the `approval_request` reviewer), each run an event.
//! - `host`: `SessionHost`, what the daemon's frontends (socket, dashboard, MCP, sub-agents)
//!   ask of the session supervisor (implemented above this crate, by `intendant-daemon`);
//!   `peer`: whether a process is a session's, so the daemon's surfaces refuse it.
//! - `cancel`: `SessionCancel`, the one way to interrupt a turn or stop a session (signals,
//!   `ctl interrupt`, `ctl stop`, daemon shutdown), built on the child supervisor's token.
//! - `child`: the one child supervisor (own process group, bounded capture, deadline, cancel
//!   token, TERM then KILL of the whole tree) that the runner and the agents' CLIs run under.
//! - `runner`: spawns one `intendant-runtime` per batch, token-checks and bounds its output;
//!   `runtime_env`: the runtime's environment and sandbox write set; `containment`: the
//!   session's cgroup and subreaper, so nothing a session started outlives it; `network`: the
//!   session's own network namespace, held for its life by a holder process; `sandboxed`: one
//!   long-lived program (an MCP server, a hook) inside the session's walls, its stdio piped;
//!   `egress`: the `proxy` session's egress proxy (host policy, address guard, `network`
//!   approvals, events).
//! - `mcp_client`: the tools of the configured MCP servers (`[mcp_servers.NAME]`) in a native
//!   session: each stdio server inside the session's walls, each call approved and bounded.
//! - `provider_select`, `dotenv`: which provider and key; `secrets`: the credential variables,
//!   moved out of the process environment at start; `usage`: tokens, cost, budget.
//! - `autonomy`, `classify`, `approval`: levels, action categories, the approval gate;
//!   `preview`: what an approval shows (whole commands, edit content, invisible characters
//!   escaped).
//! - `trust`: trust records; security-relevant project settings count only once trusted;
//!   `digest`: a project file as read (canonical path, sha256), which those records key on.
//! - `memory`: the memory tools (`memory_search`, `memory_read`, `memory_propose`) over the
//!   store's memories; a proposal is a `memory` approval only a human answers.
//! - `subagents`: the sub-agent tools (spawn, wait, message, stop; a child's submit_result),
//!   answered through the daemon's host with depth, concurrency and budget limits.
//! - `workflow`: `workflow_checkpoint`, a session's named JSON documents in the state root's
//!   database (a sub-agent reads its parent's); their names survive compaction and a resume.
//! - `checkpoint`: the project's tree before and after every batch that can change files, in a
//!   store of its own under the state root (every permission bit kept); listing, diffs, rewind,
//!   undo, retention and garbage collection; `rewind`: the one
//!   way a recorded session is rewound (or the rewind previewed), for every surface.
//! - `git`: the one hardened way the controller runs git, on a repository resolved at a
//!   session's start (no hook, fsmonitor, filter or pointer a command planted is followed).
//! - `session_log`, `resume`: the durable per-session record and rebuilding from it;
//!   `record_dir`: writing by directory descriptor, never through a planted link;
//!   `remove_tree`: removing a tree a session's commands may have shaped, however deep;
//!   `bounded_line`: the lines a peer sends (a socket's client, stdin), at most a bound held;
//!   `regular_file`: reading a file they may have put where the controller reads, without
//!   waiting on it and within a bound.

pub mod agent_loop;
pub mod approval;
pub mod ask_human;
pub mod autonomy;
pub mod bounded_line;
pub mod bus;
pub mod cancel;
pub mod checkpoint;
pub mod child;
pub mod classify;
pub mod config;
pub mod containment;
pub mod conversation;
pub mod digest;
pub mod dotenv;
pub mod egress;
pub mod git;
pub mod hooks;
pub mod host;
pub mod intents;
pub mod mcp_client;
pub mod memory;
pub mod network;
pub mod outcome;
pub mod peer;
pub mod preview;
pub mod prompts;
pub mod provider_select;
pub mod record_dir;
pub mod regular_file;
pub mod remove_tree;
pub mod resume;
pub mod rewind;
pub mod runner;
pub mod runtime_env;
pub mod sandboxed;
pub mod secrets;
pub mod session;
pub mod session_log;
pub mod skills;
pub mod subagents;
pub(crate) mod tool_args;
pub mod tools;
pub mod trust;
pub mod usage;
pub mod workflow;
