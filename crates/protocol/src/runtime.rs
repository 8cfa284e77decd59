//! The runtime protocol (`docs/runtime-protocol.md`): one [`AgentInput`] on stdin, one
//! [`ResultEnvelope`] line per command on stdout.
//!
//! `data` in the envelope is itself a JSON *string*: either one of the per-function result
//! objects below, serialized, or `"Error: <message>"` for a failed command.

use serde::{Deserialize, Serialize};

/// Upper bound on the bytes `intendant-runtime` reads from stdin.
pub const MAX_INPUT_BYTES: usize = 64 * 1024 * 1024;

/// Bytes of each output stream (stdout, stderr, PTY transcript) returned inline in a result.
pub const LOG_TAIL_BYTES: usize = 10 * 1024;

/// Default `timeout_ms` of `execAsAgent`.
pub const DEFAULT_EXEC_TIMEOUT_MS: u64 = 120_000;

/// Exit code reported when `execAsAgent` killed its command at the timeout.
pub const EXIT_TIMEOUT: i32 = -3;
/// Exit code reported when `wait_for_port` never saw a listener.
pub const EXIT_PORT_TIMEOUT: i32 = -2;
/// Exit code reported when the command could not be spawned or waited for.
pub const EXIT_SPAWN_FAILED: i32 = -1;

/// Environment variable naming the runtime's log directory (set by the controller).
pub const LOG_DIR_ENV: &str = "INTENDANT_LOG_DIR";
/// Environment variable holding the sandbox write set (`:`-separated); empty or unset: none.
pub const SANDBOX_WRITE_PATHS_ENV: &str = "INTENDANT_SANDBOX_WRITE_PATHS";
/// Environment variable, set to `1` by the controller for `[sandbox] require_full = true`: the
/// runtime refuses to run when the sandbox's second layer (mount namespace, syscall filter)
/// cannot be set up, instead of running with Landlock alone.
pub const SANDBOX_REQUIRE_FULL_ENV: &str = "INTENDANT_SANDBOX_REQUIRE_FULL";
/// Environment variable holding what sandboxed commands must not read (set by the controller
/// with the sandbox): [`ReadMask`] entries, encoded by [`encode_read_masks`]. The runtime
/// applies them in its mount namespace; where that namespace is missing, reads are not
/// confined and the runtime says so.
pub const SANDBOX_READ_MASKS_ENV: &str = "INTENDANT_SANDBOX_READ_MASKS";
/// How the runtime's stderr line starts when the sandbox's second layer is unavailable and it
/// runs with Landlock alone (said once per runtime process, forwarded by the controller).
pub const SANDBOX_DEGRADED_WARNING: &str =
    "intendant-runtime: warning: the sandbox's second layer is unavailable";
/// How the runtime's stderr line starts when Landlock cannot keep signals and abstract UNIX
/// socket connects inside the sandbox (a kernel before Landlock ABI 6), and it runs without
/// (said once per runtime process, forwarded by the controller).
pub const SANDBOX_SCOPE_WARNING: &str = "intendant-runtime: warning: the sandbox cannot keep signals and abstract sockets inside the session";
/// How the runtime's stderr line starts when it was asked to limit its commands' TCP connects
/// to some ports (`INTENDANT_SANDBOX_CONNECT_PORTS`) and the kernel's Landlock has no TCP rules
/// (before ABI 4), and it runs without.
pub const SANDBOX_PORTS_WARNING: &str =
    "intendant-runtime: warning: the sandbox cannot limit the ports commands connect to";
/// The `oom_score_adj` every process of a session runs with at least (its commands, the programs
/// inside its walls, its workers): the kernel's out-of-memory killer adds half of the memory it
/// weighs against to each one's size, so when memory runs out a session's processes are killed
/// before the controller that supervises them (or any other process short of half that memory).
pub const SESSION_OOM_SCORE_ADJ: i32 = 500;
/// How the runtime's stderr line starts when it cannot raise its `oom_score_adj` to
/// [`SESSION_OOM_SCORE_ADJ`], and runs without.
pub const SANDBOX_OOM_WARNING: &str = "intendant-runtime: warning: the session's processes cannot be made the out-of-memory killer's first choice";
/// The nice value every command of a session runs at least at (and everything it starts): below
/// the controller's priority, so busy commands (a build, a hostile loop) slow the controller
/// little where no `cpu` cgroup weighs the session as one; a command cannot take it back (root's
/// commands have no `CAP_SYS_NICE`, an ordinary user's `RLIMIT_NICE` is 0).
pub const SESSION_NICE: i32 = 10;
/// How the runtime's stderr line starts when it cannot lower its priority to [`SESSION_NICE`],
/// and runs without.
pub const SANDBOX_PRIORITY_WARNING: &str = "intendant-runtime: warning: the session's processes cannot be put below the controller's priority";
/// Every stderr line start the controller lifts out of the runtime's stderr as a sandbox warning.
pub const SANDBOX_WARNINGS: &[&str] = &[
    SANDBOX_DEGRADED_WARNING,
    SANDBOX_SCOPE_WARNING,
    SANDBOX_PORTS_WARNING,
    SANDBOX_OOM_WARNING,
    SANDBOX_PRIORITY_WARNING,
];
/// Environment variable, set non-empty by the controller, granting the user's own display.
pub const USER_DISPLAY_GRANTED_ENV: &str = "INTENDANT_USER_DISPLAY_GRANTED";

/// The argument that starts `intendant-runtime` as the guard of one long-lived program the
/// controller runs outside the walls (an agent CLI worker): `--guard PID -- PROGRAM [ARG...]`,
/// PID being the controller's. The program runs below the guard with the guard's stdio,
/// environment, process group and cgroups, and the guard exits as it did; when process PID ends
/// first, the guard ends the program and everything it started (`SIGTERM`, then `SIGKILL`).
pub const GUARD_ARG: &str = "--guard";

/// The argument that starts `intendant-runtime` as the wall of one long-lived program instead
/// of a batch: `--sandboxed-stdio PID -- PROGRAM [ARG...]`, PID being the controller's. The
/// runtime applies the same sandbox from the same variables as for a batch, waits for
/// [`SANDBOXED_START_LINE`] on stdin, and then runs the program below itself as its
/// [`GUARD_ARG`] would, with its stdin, stdout and stderr.
pub const SANDBOXED_STDIO_ARG: &str = "--sandboxed-stdio";
/// Environment variable of a [`SANDBOXED_STDIO_ARG`] runtime: comma-separated names of its
/// variables the program keeps although the scrub would drop them (the values a trusted
/// setting gives the program, a key it names among them).
pub const SANDBOXED_KEEP_ENV: &str = "INTENDANT_SANDBOXED_KEEP";
/// The first line the controller writes to a [`SANDBOXED_STDIO_ARG`] runtime's stdin, once
/// it has placed the runtime in the session's cgroups: nothing of the program runs before it.
pub const SANDBOXED_START_LINE: &[u8] = b"start\n";

/// One entry of [`SANDBOX_READ_MASKS_ENV`]. Paths are absolute; one that does not exist when
/// the runtime starts is skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadMask {
    /// Hidden: an empty read-only directory or file in its place. A write root beneath it, or
    /// a [`ReadMask::Reveal`] path, stays visible; a write root itself is never hidden.
    Hide(std::path::PathBuf),
    /// Left visible beneath a hidden path (the user's own home under `/home`, an `allow_read`).
    Reveal(std::path::PathBuf),
    /// A `.env` file shown read-only with its credential entries removed
    /// ([`crate::dotenv::scrub`]).
    ScrubEnv(std::path::PathBuf),
}

impl ReadMask {
    /// The path the mask is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            ReadMask::Hide(p) | ReadMask::Reveal(p) | ReadMask::ScrubEnv(p) => p,
        }
    }

    fn tag(&self) -> char {
        match self {
            ReadMask::Hide(_) => 'h',
            ReadMask::Reveal(_) => 'r',
            ReadMask::ScrubEnv(_) => 'e',
        }
    }
}

/// Encodes masks for [`SANDBOX_READ_MASKS_ENV`]: a platform path list (`:`-separated) whose
/// entries are a one-letter kind followed by the path. The error names a path that cannot be
/// listed (one holding the separator).
pub fn encode_read_masks(masks: &[ReadMask]) -> Result<std::ffi::OsString, String> {
    let entries = masks.iter().map(|m| {
        let mut entry = std::ffi::OsString::from(m.tag().to_string());
        entry.push(m.path().as_os_str());
        entry
    });
    std::env::join_paths(entries).map_err(|e| format!("cannot pass read masks: {e}"))
}

/// Decodes [`SANDBOX_READ_MASKS_ENV`]; an unknown kind or a relative path is an error (the
/// runtime refuses to run rather than confine less than it was asked to).
pub fn decode_read_masks(value: &std::ffi::OsStr) -> Result<Vec<ReadMask>, String> {
    let mut out = Vec::new();
    for entry in std::env::split_paths(value) {
        if entry.as_os_str().is_empty() {
            continue;
        }
        let bad = |what: &str| format!("read mask {} {what}", entry.display());
        // `h/a/b` is the components `h`, `a`, `b`: the kind, then the absolute path's names.
        let mut components = entry.components();
        let Some(std::path::Component::Normal(tag)) = components.next() else {
            return Err(bad("is not a kind and an absolute path"));
        };
        let path = std::path::Path::new("/").join(components.as_path());
        let starts_absolute = entry
            .as_os_str()
            .as_encoded_bytes()
            .get(tag.len())
            .is_some_and(|b| *b == b'/');
        if !starts_absolute {
            return Err(bad("is not a kind and an absolute path"));
        }
        out.push(match tag.to_str() {
            Some("h") => ReadMask::Hide(path),
            Some("r") => ReadMask::Reveal(path),
            Some("e") => ReadMask::ScrubEnv(path),
            Some(_) | None => return Err(bad("has an unknown kind")),
        });
    }
    Ok(out)
}

/// Prefix of `data` for a command that failed.
pub const ERROR_PREFIX: &str = "Error: ";

/// The whole stdin payload of one runtime invocation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInput {
    /// Commands, executed in order, each to completion before the next.
    pub commands: Vec<Command>,
    /// Per-spawn secret the controller sets; copied into every result envelope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_protocol_token: Option<String>,
    /// Secret an `askHuman` answer file must carry to be accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_response_token: Option<String>,
}

/// One command: a flat struct, only `function` and `nonce` always required.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    /// Runtime function name, e.g. `execAsAgent` (see [`Function`]).
    pub function: String,
    /// Caller-chosen id echoed in the result envelope.
    pub nonce: u64,
    /// Shell command for `execAsAgent` and `execPty`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// X display number for `execAsAgent` and `captureScreen`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<u32>,
    /// `execAsAgent` timeout; [`DEFAULT_EXEC_TIMEOUT_MS`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Loopback TCP port `execAsAgent` waits to see listening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_port: Option<u16>,
    /// Path for `inspectPath`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Target file of `editFile` / `writeFile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_path: Option<String>,
    /// `editFile` operation (see [`EditOperation`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// Text written, appended, inserted or substituted by `editFile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Text `editFile` `replace` looks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_content: Option<String>,
    /// 1-based line for `insert_at` and first line of `replace_lines`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_number: Option<u64>,
    /// 1-based inclusive last line of `replace_lines`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u64>,
    /// URL for `browse`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Question for `askHuman`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// PTY session key for `execPty`; `default` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell_id: Option<String>,
}

impl Command {
    /// Whether this command calls `function`.
    pub fn is(&self, function: Function) -> bool {
        self.function == function.wire_name()
    }
}

/// The runtime functions, by their wire names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Function {
    /// Run a shell command to completion.
    ExecAsAgent,
    /// PNG screenshot of a display into the log dir.
    CaptureScreen,
    /// Stat a path.
    InspectPath,
    /// Structured edit, no shell.
    EditFile,
    /// Legacy alias of `editFile` with operation `write`.
    WriteFile,
    /// Fetch a public web page as text.
    Browse,
    /// Ask the human and wait for the answer file.
    AskHuman,
    /// Run a command in a persistent PTY.
    ExecPty,
}

impl Function {
    /// Every function, in documentation order.
    pub const ALL: [Function; 8] = [
        Function::ExecAsAgent,
        Function::CaptureScreen,
        Function::InspectPath,
        Function::EditFile,
        Function::WriteFile,
        Function::Browse,
        Function::AskHuman,
        Function::ExecPty,
    ];

    /// The wire name, e.g. `execAsAgent`.
    pub fn wire_name(self) -> &'static str {
        match self {
            Function::ExecAsAgent => "execAsAgent",
            Function::CaptureScreen => "captureScreen",
            Function::InspectPath => "inspectPath",
            Function::EditFile => "editFile",
            Function::WriteFile => "writeFile",
            Function::Browse => "browse",
            Function::AskHuman => "askHuman",
            Function::ExecPty => "execPty",
        }
    }

    /// Parses a wire name; `None` for an unknown function.
    pub fn from_wire_name(name: &str) -> Option<Function> {
        Function::ALL.into_iter().find(|f| f.wire_name() == name)
    }

    /// Whether a failure of this function aborts the rest of the batch.
    pub fn failure_aborts_batch(self) -> bool {
        match self {
            Function::ExecAsAgent | Function::CaptureScreen => true,
            Function::InspectPath
            | Function::EditFile
            | Function::WriteFile
            | Function::Browse
            | Function::AskHuman
            | Function::ExecPty => false,
        }
    }
}

/// `editFile` operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditOperation {
    /// Replace the whole file.
    Write,
    /// Append to the end (creating the file).
    Append,
    /// Replace every occurrence of `match_content`.
    Replace,
    /// Insert before `line_number` (1-based).
    InsertAt,
    /// Replace `line_number..=end_line` (1-based).
    ReplaceLines,
}

impl EditOperation {
    /// Every operation, in documentation order.
    pub const ALL: [EditOperation; 5] = [
        EditOperation::Write,
        EditOperation::Append,
        EditOperation::Replace,
        EditOperation::InsertAt,
        EditOperation::ReplaceLines,
    ];

    /// The wire name, e.g. `insert_at`.
    pub fn wire_name(self) -> &'static str {
        match self {
            EditOperation::Write => "write",
            EditOperation::Append => "append",
            EditOperation::Replace => "replace",
            EditOperation::InsertAt => "insert_at",
            EditOperation::ReplaceLines => "replace_lines",
        }
    }

    /// Parses a wire name; `None` for an unknown operation.
    pub fn from_wire_name(name: &str) -> Option<EditOperation> {
        EditOperation::ALL
            .into_iter()
            .find(|op| op.wire_name() == name)
    }
}

/// One stdout line of the runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultEnvelope {
    /// Always `"result"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The nonce of the command this line answers.
    pub nonce: u64,
    /// The stringified per-command result, or `"Error: <message>"`.
    pub data: String,
    /// Copied from [`AgentInput::runtime_protocol_token`]; absent when none was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_protocol_token: Option<String>,
}

impl ResultEnvelope {
    /// The value of [`ResultEnvelope::kind`].
    pub const KIND: &'static str = "result";

    /// An envelope for `nonce` carrying `data`.
    pub fn new(nonce: u64, data: String, token: Option<String>) -> Self {
        ResultEnvelope {
            kind: Self::KIND.to_owned(),
            nonce,
            data,
            runtime_protocol_token: token,
        }
    }

    /// Whether `data` reports a failed command.
    pub fn is_error(&self) -> bool {
        self.data.starts_with(ERROR_PREFIX)
    }
}

/// Result of `execAsAgent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecResult {
    /// Real exit code, or [`EXIT_TIMEOUT`], [`EXIT_PORT_TIMEOUT`], [`EXIT_SPAWN_FAILED`]. A command
    /// killed by a signal reports `128 + signal`, as a shell would.
    pub exit_code: i32,
    /// Pid of the shell (also the process-group id); `None` when spawning failed.
    pub pid: Option<u32>,
    /// Last [`LOG_TAIL_BYTES`] of stdout (lossy UTF-8).
    pub stdout: String,
    /// Last [`LOG_TAIL_BYTES`] of stderr (lossy UTF-8).
    pub stderr: String,
    /// Whether stdout was longer than the returned tail.
    pub stdout_truncated: bool,
    /// Whether stderr was longer than the returned tail.
    pub stderr_truncated: bool,
    /// Full stdout artifact in the log dir.
    pub stdout_log: Option<String>,
    /// Full stderr artifact in the log dir.
    pub stderr_log: Option<String>,
    /// Whether the process was left running (a `wait_for_port` command whose listener came up);
    /// its pid is then in the runtime's process table for `$NONCE[id]`.
    #[serde(default)]
    pub running: bool,
    /// Why the exit code is negative, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Result of `inspectPath`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InspectResult {
    /// The path as given.
    pub path: String,
    /// Whether anything exists there (a dangling symlink counts as existing).
    pub exists: bool,
    /// `file`, `directory`, `symlink` or `other`; `None` when it does not exist.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Size in bytes.
    pub size: Option<u64>,
    /// Modification time, seconds since the Unix epoch.
    pub modified: Option<i64>,
    /// Permission bits, e.g. `0644` as the octal string `"644"`.
    pub mode: Option<String>,
    /// Owner uid.
    pub uid: Option<u32>,
    /// Owner gid.
    pub gid: Option<u32>,
}

/// Result of `editFile` / `writeFile`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditResult {
    /// The file edited.
    pub file_path: String,
    /// The operation performed (wire name).
    pub operation: String,
    /// Size of the file after the edit.
    pub bytes: u64,
    /// Occurrences replaced (`replace` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacements: Option<u64>,
}

/// Result of `execPty`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtyResult {
    /// The PTY session the command ran in.
    pub shell_id: String,
    /// ANSI-stripped output, at most [`LOG_TAIL_BYTES`].
    pub output: String,
    /// Whether `output` is a tail of something longer.
    pub truncated: bool,
    /// Where the full transcript was preserved, when truncated and preservation succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_log: Option<String>,
    /// Whether the 30 s deadline passed before the command finished (the command was then
    /// interrupted with Ctrl-C).
    pub timed_out: bool,
    /// Exit status of the command, when it finished; `None` on timeout. When the shell itself
    /// exited (`shell_exited`), the shell's exit status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Whether the PTY's shell ended during this command; the next `execPty` on the same
    /// `shell_id` starts a fresh shell.
    #[serde(default)]
    pub shell_exited: bool,
}

/// Result of `askHuman`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskHumanResult {
    /// The human's answer.
    pub answer: String,
}

/// Name of the answer file `askHuman` polls for, inside the log dir.
pub const HUMAN_RESPONSE_FILE: &str = "human_response";
/// Name of the question file `askHuman` writes, inside the log dir.
pub const HUMAN_QUESTION_FILE: &str = "human_question";

/// The content of `<log_dir>/human_response` when the batch carried a `human_response_token`.
///
/// Without a token the whole file (one trailing newline stripped) is the answer; with one, the
/// file must be this JSON object carrying the same token. Writers create the file atomically
/// (write a temporary file in the same directory, then rename it into place).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HumanResponse {
    /// Must equal [`AgentInput::human_response_token`] when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The human's answer.
    pub answer: String,
}

/// Result of `captureScreen`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenResult {
    /// Path of the PNG in the log dir.
    pub path: String,
    /// Display captured, e.g. `:99`.
    pub display: String,
    /// Image width in pixels.
    pub width: u32,
    /// Image height in pixels.
    pub height: u32,
}

/// Result of `browse`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrowseResult {
    /// The URL requested.
    pub url: String,
    /// The URL after redirects.
    pub final_url: String,
    /// HTTP status code of the final response.
    pub status: u16,
    /// `Content-Type` of the final response.
    pub content_type: Option<String>,
    /// Readable text (HTML converted), from at most the first 50 KiB of the body.
    pub text: String,
    /// Whether the body was longer than the 50 KiB prefix.
    pub truncated: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_omits_absent_token() {
        let line = serde_json::to_string(&ResultEnvelope::new(7, "x".into(), None)).unwrap();
        assert_eq!(line, r#"{"type":"result","nonce":7,"data":"x"}"#);
    }

    #[test]
    fn envelope_carries_token_when_given() {
        let env = ResultEnvelope::new(1, "x".into(), Some("t".into()));
        let line = serde_json::to_string(&env).unwrap();
        assert_eq!(
            line,
            r#"{"type":"result","nonce":1,"data":"x","runtime_protocol_token":"t"}"#
        );
    }

    #[test]
    fn function_names_round_trip() {
        for f in Function::ALL {
            assert_eq!(Function::from_wire_name(f.wire_name()), Some(f));
        }
        assert_eq!(Function::from_wire_name("rmRf"), None);
        for op in EditOperation::ALL {
            assert_eq!(EditOperation::from_wire_name(op.wire_name()), Some(op));
        }
    }

    #[test]
    fn human_response_round_trips_and_token_is_optional() {
        let with = HumanResponse {
            token: Some("t".into()),
            answer: "yes".into(),
        };
        let line = serde_json::to_string(&with).unwrap();
        assert_eq!(line, r#"{"token":"t","answer":"yes"}"#);
        assert_eq!(serde_json::from_str::<HumanResponse>(&line).unwrap(), with);
        let without: HumanResponse = serde_json::from_str(r#"{"answer":"no"}"#).unwrap();
        assert_eq!(without.token, None);
        assert!(serde_json::from_str::<HumanResponse>(r#"{"token":"t"}"#).is_err());
    }

    #[test]
    fn new_result_fields_default_when_absent() {
        let exec: ExecResult = serde_json::from_str(
            r#"{"exit_code":0,"pid":1,"stdout":"","stderr":"","stdout_truncated":false,
                "stderr_truncated":false,"stdout_log":null,"stderr_log":null}"#,
        )
        .unwrap();
        assert!(!exec.running);
        let pty: PtyResult = serde_json::from_str(
            r#"{"shell_id":"default","output":"","truncated":false,"timed_out":true}"#,
        )
        .unwrap();
        assert_eq!((pty.exit_code, pty.shell_exited), (None, false));
    }

    #[test]
    fn read_masks_round_trip_and_bad_entries_are_refused() {
        let masks = vec![
            ReadMask::Hide("/h/.ssh".into()),
            ReadMask::Reveal("/home/u".into()),
            ReadMask::ScrubEnv("/p/.env".into()),
        ];
        let encoded = encode_read_masks(&masks).unwrap();
        assert_eq!(encoded, "h/h/.ssh:r/home/u:e/p/.env");
        assert_eq!(decode_read_masks(&encoded).unwrap(), masks);
        assert_eq!(decode_read_masks("".as_ref()).unwrap(), Vec::new());
        assert!(decode_read_masks("x/a".as_ref()).is_err());
        assert!(decode_read_masks("hrelative".as_ref()).is_err());
        // A path without its kind is refused, not skipped: it was meant to confine something.
        for untagged in ["/home/u/.ssh", "h/a:/etc/shadow", "./x"] {
            assert!(decode_read_masks(untagged.as_ref()).is_err(), "{untagged}");
        }
        assert_eq!(
            decode_read_masks("h/a::r/b".as_ref()).unwrap(),
            [ReadMask::Hide("/a".into()), ReadMask::Reveal("/b".into())],
            "empty entries are nothing"
        );
        assert!(encode_read_masks(&[ReadMask::Hide("/a:b".into())]).is_err());
    }

    #[test]
    fn command_needs_function_and_nonce() {
        assert!(serde_json::from_str::<Command>(r#"{"function":"x"}"#).is_err());
        assert!(serde_json::from_str::<Command>(r#"{"nonce":1}"#).is_err());
        let c: Command = serde_json::from_str(r#"{"function":"x","nonce":1}"#).unwrap();
        assert_eq!(c.nonce, 1);
    }
}
