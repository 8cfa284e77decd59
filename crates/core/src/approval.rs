//! Approval rules and the gate every batch passes before dispatch.
//!
//! Each category has a rule (`auto`, `ask` or `deny`): the `[approval]` table of
//! `intendant.toml`, else the default of the autonomy level ([`default_rule`]). The level then
//! relaxes `ask` ([`effective_rule`]): `high` auto-approves it except for destructive actions,
//! `full` auto-approves it always; `deny` holds at every level. A command takes the strictest
//! effective rule among its categories. Human input is never an approval matter: the question
//! goes to the human (only an explicit `deny` blocks it).
//!
//! [`ApprovalGate::review`] applies this to a batch, asks the human through the bus for every
//! `ask`, and never decides an `ask` on its own: without an interactive human it denies.
//!
//! # Layout
//! - `policy`: the rules and the decision about one command.
//! - `gate`: the gate that applies a policy to a batch and asks the human.

mod gate;
mod policy;

pub(crate) use gate::next_approval_id;
pub use gate::{
    ApprovalAnswer, ApprovalGate, CallReview, DENIED_OUTPUT, Denial, DenialSource, ExternalAction,
    McpCall, SKIPPED_OUTPUT, Verdict, parse_terminal_answer,
};
pub use policy::{
    ApprovalConfigError, ApprovalPolicy, Decision, MCP_TOOL_PREFIX, McpHint, Rule,
    default_mcp_rule, default_rule, effective_rule, tool_pattern_matches,
};

#[cfg(test)]
mod tests;
