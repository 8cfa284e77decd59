//! The dashboard's login token: 32 random bytes as hex in `$INTENDANT_HOME/web-token` (mode
//! 0600, written by descriptor through `RecordDir`), created on first use and replaced by
//! [`rotate`]. The browser never keeps the token: logging in trades it for a session cookie
//! derived from it ([`session_cookie_value`]), so rotating the token also logs every browser out.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use intendant_core::record_dir::RecordDir;
use ring::hmac;

/// Name of the token file in the state root.
pub const TOKEN_FILE: &str = "web-token";
/// Random bytes in a token (hex-encoded, so the file holds twice as many characters).
const TOKEN_BYTES: usize = 32;
/// What the session cookie is a MAC of (keyed by the token).
const COOKIE_CONTEXT: &[u8] = b"intendant web session v1";

/// Why the token could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Reading or writing the token file failed.
    #[error("web token {path}: {source}")]
    Io {
        /// The token file.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// The file holds something other than a token (edited by hand?).
    #[error(
        "web token {path} is not 64 hex digits; remove it or run `intendant ctl web-token --rotate`"
    )]
    Malformed {
        /// The token file.
        path: PathBuf,
    },
}

/// The token of the state root `home`, created (0600) when there is none yet.
pub fn load_or_create(home: &Path) -> Result<String, TokenError> {
    match load(home)? {
        Some(token) => Ok(token),
        None => rotate(home),
    }
}

/// The token of the state root `home`, if one was created.
pub fn load(home: &Path) -> Result<Option<String>, TokenError> {
    let path = home.join(TOKEN_FILE);
    let io_err = |source| TokenError::Io {
        path: path.clone(),
        source,
    };
    let dir = match RecordDir::open(home) {
        Ok(dir) => dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(e)),
    };
    let mut file = match dir.open_read(TOKEN_FILE) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(e)),
    };
    let mut text = String::new();
    // Bounded: a token file is 64 bytes and a newline; anything far longer is not a token.
    (&mut file)
        .take(4 * TOKEN_BYTES as u64)
        .read_to_string(&mut text)
        .map_err(io_err)?;
    let token = text.trim();
    if token.len() != 2 * TOKEN_BYTES || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(TokenError::Malformed { path });
    }
    Ok(Some(token.to_ascii_lowercase()))
}

/// Replaces the token of the state root `home` with a fresh one (0600) and returns it; the old
/// token and every cookie made from it stop working at once, also in a running dashboard.
pub fn rotate(home: &Path) -> Result<String, TokenError> {
    let path = home.join(TOKEN_FILE);
    let io_err = |source| TokenError::Io {
        path: path.clone(),
        source,
    };
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| io_err(io::Error::other(e.to_string())))?;
    let token = hex(&bytes);
    let dir = RecordDir::create_all(home).map_err(io_err)?;
    dir.replace(TOKEN_FILE, format!("{token}\n").as_bytes())
        .map_err(io_err)?;
    Ok(token)
}

/// The value of the session cookie a login with `token` sets.
pub fn session_cookie_value(token: &str) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, token.as_bytes());
    hex(hmac::sign(&key, COOKIE_CONTEXT).as_ref())
}

/// Whether `a` and `b` are equal, in time that depends only on their lengths.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn created_once_private_and_rotatable() {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("state");
        assert_eq!(load(&root).unwrap(), None);
        let first = load_or_create(&root).unwrap();
        assert_eq!(first.len(), 64);
        assert_eq!(load_or_create(&root).unwrap(), first);
        let mode = std::fs::metadata(root.join(TOKEN_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let second = rotate(&root).unwrap();
        assert_ne!(second, first);
        assert_eq!(load(&root).unwrap(), Some(second.clone()));
        assert_ne!(session_cookie_value(&first), session_cookie_value(&second));
    }

    #[test]
    fn a_malformed_file_is_refused_not_replaced() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join(TOKEN_FILE), "hunter2\n").unwrap();
        let err = load_or_create(home.path()).unwrap_err();
        assert!(matches!(err, TokenError::Malformed { .. }), "{err}");
        assert!(err.to_string().contains("--rotate"), "{err}");
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
    }
}
