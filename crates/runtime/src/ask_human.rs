//! `askHuman`: a question file out, an answer file in, over the log directory.
//!
//! The question goes to `<log_dir>/human_question` (atomically) and is echoed to stderr; then
//! `<log_dir>/human_response` is polled every 500 ms with no timeout. Without a
//! `human_response_token` the whole file, one trailing newline stripped, is the answer. With one,
//! the file must be the JSON [`HumanResponse`] carrying that token; any other file is deleted and
//! waiting goes on, so a model-driven process that can write the log dir cannot answer for the
//! human. Writers must create the answer atomically (temporary file, then rename). A stale answer
//! left from before the question is deleted before the question is posed.

use intendant_protocol::runtime::{
    AskHumanResult, HUMAN_QUESTION_FILE, HUMAN_RESPONSE_FILE, HumanResponse,
};
use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;
use thiserror::Error;

use crate::artifact::{self, PathIoError};

/// Interval between looks for the answer file.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Largest answer file read; a bigger one is discarded.
pub const MAX_ANSWER_BYTES: u64 = 1024 * 1024;

/// Why a question could not be asked (the batch goes on).
#[derive(Debug, Error)]
pub enum AskHumanError {
    /// No `question` field.
    #[error("missing `question`")]
    MissingQuestion,
    /// A file in the log dir could not be written or removed.
    #[error(transparent)]
    Io(#[from] PathIoError),
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> AskHumanError {
    artifact::path_io(action, path)
}

/// Asks `question`, echoing it and any discarded answer to `diag`, and blocks for the answer.
pub fn ask(
    log_dir: &Path,
    question: Option<&str>,
    token: Option<&str>,
    diag: &mut dyn Write,
) -> Result<AskHumanResult, AskHumanError> {
    let question = question.ok_or(AskHumanError::MissingQuestion)?;
    let question_path = log_dir.join(HUMAN_QUESTION_FILE);
    let response_path = log_dir.join(HUMAN_RESPONSE_FILE);
    remove_if_present(&response_path)?;
    write_question(log_dir, &question_path, question)?;
    let _ = writeln!(diag, "askHuman: {question}");
    let _ = writeln!(
        diag,
        "askHuman: waiting for {} (no timeout)",
        response_path.display()
    );
    let answer = loop {
        match read_answer(&response_path) {
            Ok(None) => {}
            Ok(Some(bytes)) => match accept(&bytes, token) {
                Ok(answer) => break answer,
                Err(why) => {
                    remove_if_present(&response_path)?;
                    let _ = writeln!(diag, "askHuman: discarded an answer file: {why}");
                }
            },
            Err(why) => {
                remove_if_present(&response_path)?;
                let _ = writeln!(diag, "askHuman: discarded an answer file: {why}");
            }
        }
        std::thread::sleep(POLL_INTERVAL);
    };
    remove_if_present(&response_path)?;
    remove_if_present(&question_path)?;
    Ok(AskHumanResult { answer })
}

/// Checks an answer file's bytes against the expected token.
pub fn accept(bytes: &[u8], token: Option<&str>) -> Result<String, String> {
    let Some(expected) = token else {
        let text = String::from_utf8_lossy(bytes);
        return Ok(text.strip_suffix('\n').unwrap_or(&text).to_owned());
    };
    let parsed: HumanResponse = serde_json::from_slice(bytes)
        .map_err(|e| format!("not a {{\"token\",\"answer\"}} object ({e})"))?;
    match parsed.token {
        Some(t) if constant_time_eq(t.as_bytes(), expected.as_bytes()) => Ok(parsed.answer),
        Some(_) => Err("wrong token".to_owned()),
        None => Err("no token".to_owned()),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The answer file's bytes, `None` when it is not there yet; `Err` for a file to discard.
fn read_answer(path: &Path) -> Result<Option<Vec<u8>>, String> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    let mut buf = Vec::new();
    file.take(MAX_ANSWER_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if buf.len() as u64 > MAX_ANSWER_BYTES {
        return Err(format!("larger than {MAX_ANSWER_BYTES} bytes"));
    }
    Ok(Some(buf))
}

fn write_question(log_dir: &Path, path: &Path, question: &str) -> Result<(), AskHumanError> {
    let (mut tmp, tmp_path) = artifact::create_unique(log_dir, ".human_question", "tmp")
        .map_err(io_err("creating", path))?;
    let written = tmp
        .write_all(question.as_bytes())
        .and_then(|()| tmp.write_all(b"\n"))
        .and_then(|()| std::fs::rename(&tmp_path, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp_path);
        return Err(io_err("writing", path)(e));
    }
    Ok(())
}

fn remove_if_present(path: &Path) -> Result<(), AskHumanError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("removing", path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_by_token() {
        assert_eq!(accept(b"yes\n", None).unwrap(), "yes");
        assert_eq!(accept(b"a\n\n", None).unwrap(), "a\n");
        let ok = br#"{"token":"s3","answer":"go"}"#;
        assert_eq!(accept(ok, Some("s3")).unwrap(), "go");
        assert!(accept(ok, Some("s4")).is_err());
        assert!(accept(b"go", Some("s3")).is_err());
        assert!(accept(br#"{"answer":"go"}"#, Some("s3")).is_err());
    }
}
