//! The delegation contract's stable error codes (`docs/agents.md`): what `intendant delegate`
//! prints, and what the MCP `delegate` tool answers with.

use crate::closed_set::closed_set;

closed_set! {
    /// A stable error code of the delegation contract, about the external CLI. The wire names
    /// never change: they are the contract's `runtime_*` strings (the contract calls the CLI
    /// "the runtime"; in this workspace that word means `intendant-runtime`).
    pub enum ErrorCode ("delegation error code") {
        /// The CLI executable was not found (config path, then PATH).
        CliMissingExecutable = "runtime_missing_executable",
        /// The CLI's version is outside the profile's supported range or unreadable.
        CliUnsupportedVersion = "runtime_unsupported_version",
        /// The CLI cannot do what was asked (e.g. kimi has no schema-checked answer).
        CliUnsupportedCapability = "runtime_unsupported_capability",
        /// No usable login or key was found for the CLI.
        CliNotAuthenticated = "runtime_not_authenticated",
        /// The temporary workspace or a state file could not be written.
        CliStateUnwritable = "runtime_state_unwritable",
        /// No model was given; the model policy is explicit-only.
        CliModelRequired = "runtime_model_required",
        /// The CLI reports a model other than the requested one (or more than one).
        CliModelMismatch = "runtime_model_mismatch",
        /// The prompt or schema exceeds its byte limit.
        CliInputTooLarge = "runtime_input_too_large",
        /// The CLI's output exceeded its byte limit.
        CliOutputTooLarge = "runtime_output_too_large",
        /// The request ran out of time; the process group was stopped.
        CliTimeout = "runtime_timeout",
        /// The request was cancelled (Ctrl-C or the caller); the process group was stopped.
        CliCancelled = "runtime_cancelled",
        /// The CLI exited non-zero without a more specific failure.
        CliNonzeroExit = "runtime_nonzero_exit",
        /// The CLI's output is not the protocol it should speak.
        CliMalformedProtocol = "runtime_malformed_protocol",
        /// The CLI ended without its protocol's terminal event.
        CliMissingTerminalState = "runtime_missing_terminal_state",
        /// The CLI reported that the turn failed.
        CliTurnFailed = "runtime_turn_failed",
        /// The final value (or the schema itself) failed JSON Schema validation.
        CliSchemaInvalid = "runtime_schema_invalid",
        /// The caller's application validator rejected the final value.
        CliApplicationInvalid = "runtime_application_invalid",
        /// The CLI could not be run, or the auth class found is not allowed by configuration.
        CliPermissionDenied = "runtime_permission_denied",
    }
}
