//! `ask_human` on the controller side: the headless recovery answer, the note for calls a
//! question displaced, and the token-authenticated answer file the runtime polls for.

use std::path::{Path, PathBuf};

use intendant_protocol::runtime::{HUMAN_RESPONSE_FILE, HumanResponse};

use crate::record_dir::RecordDir;

/// What the model is told when nobody can answer.
pub const HEADLESS_RECOVERY_ANSWER: &str = "No human is available to answer (this run is headless). \
Do not wait for one: continue the task on explicit, stated assumptions, and list those assumptions \
in your final summary.";

/// Result of a call that was not run because a question to the human consumed its batch.
pub const NOT_EXECUTED_NOTE: &str = "not executed: a question to the human consumed this batch; \
re-issue this call after reading the answer if it is still needed.";

/// Writes `<log_dir>/human_response` atomically (temporary file, then rename) so the runtime
/// never reads a half-written answer. `log_dir` is the runtime's artifacts directory, which its
/// commands can write: the file is written by descriptor, never through a link planted there.
pub fn write_human_response(log_dir: &Path, token: &str, answer: &str) -> std::io::Result<PathBuf> {
    let body = serde_json::to_vec(&HumanResponse {
        token: Some(token.to_owned()),
        answer: answer.to_owned(),
    })
    .map_err(std::io::Error::other)?;
    let dir = RecordDir::open(log_dir)?;
    dir.replace(HUMAN_RESPONSE_FILE, &body)?;
    Ok(dir.join(HUMAN_RESPONSE_FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_file_carries_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_human_response(dir.path(), "tok", "yes").unwrap();
        let back: HumanResponse = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        assert_eq!(
            back,
            HumanResponse {
                token: Some("tok".into()),
                answer: "yes".into()
            }
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_link_planted_at_the_answer_file_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = tempfile::NamedTempFile::new().unwrap();
        std::os::unix::fs::symlink(victim.path(), dir.path().join(HUMAN_RESPONSE_FILE)).unwrap();
        write_human_response(dir.path(), "tok", "yes").unwrap();
        assert_eq!(std::fs::read(victim.path()).unwrap(), b"");
        assert!(
            !std::fs::symlink_metadata(dir.path().join(HUMAN_RESPONSE_FILE))
                .unwrap()
                .is_symlink()
        );
    }
}
