//! The one way an HTTP client of ours is made: the model providers, the MCP client's HTTP
//! servers, the runtime's `browse`, and the tests and benchmarks that talk to them.
//!
//! Every client trusts the same roots over the same TLS: Mozilla's roots as the `webpki-roots`
//! crate carries them (built in, so a machine without a system store still reaches a provider),
//! and the PEM certificates the file `SSL_CERT_FILE` names, as curl and OpenSSL read it (a company
//! proxy's root, a test's own authority), on rustls with `ring`. reqwest is built without a TLS
//! provider of its own (its default would compile AWS-LC and a second certificate verifier), so a
//! client made any other way cannot speak TLS at all: hence one function.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use thiserror::Error;

/// The variable naming extra roots to trust.
pub const CERT_FILE_VAR: &str = "SSL_CERT_FILE";

/// Why a client could not be made.
#[derive(Debug, Clone, Error)]
pub enum ClientError {
    /// `SSL_CERT_FILE` names a file that is unreadable or holds no certificate.
    #[error("{CERT_FILE_VAR} names {path}: {why}")]
    CertFile {
        /// The file named.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The TLS settings or the client were refused.
    #[error("the HTTP client could not be made: {0}")]
    Build(String),
}

/// A client builder trusting the built-in roots and those `SSL_CERT_FILE` names (read now).
pub fn client_builder() -> Result<reqwest::ClientBuilder, ClientError> {
    let extra = named_file();
    let tls = shared_tls_config(extra.as_deref().map(Path::new))?;
    Ok(reqwest::Client::builder().tls_backend_preconfigured(tls))
}

/// The TLS settings of the last client made, and what they were made from: the file named and
/// its size and change time when read.
type Made = (
    Option<(PathBuf, Option<(u64, SystemTime)>)>,
    Result<rustls::ClientConfig, ClientError>,
);

/// [`tls_config`] for `extra`, made again only when the file named, its size or its change time
/// differ from the last client's: reading and parsing a system bundle (150 certificates) costs
/// about 0.7 ms, which every session start of a daemon would otherwise pay, while a `stat`
/// costs microseconds and still sees a file replaced.
fn shared_tls_config(extra: Option<&Path>) -> Result<rustls::ClientConfig, ClientError> {
    static LAST: Mutex<Option<Made>> = Mutex::new(None);
    let key = extra.map(|path| {
        let stamp = std::fs::metadata(path)
            .ok()
            .and_then(|meta| Some((meta.len(), meta.modified().ok()?)));
        (path.to_path_buf(), stamp)
    });
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    match &*last {
        Some((made_from, made)) if *made_from == key => made.clone(),
        _ => {
            let made = tls_config(extra);
            *last = Some((key, made.clone()));
            made
        }
    }
}

/// The file `SSL_CERT_FILE` names, when set and not empty.
fn named_file() -> Option<std::ffi::OsString> {
    std::env::var_os(CERT_FILE_VAR).filter(|v| !v.is_empty())
}

/// A client with nothing but the trust [`client_builder`] sets: for a caller (a test, a
/// benchmark) that needs no other setting.
pub fn client() -> Result<reqwest::Client, ClientError> {
    client_builder()?
        .build()
        .map_err(|e| ClientError::Build(e.to_string()))
}

/// An error's description with its sources, as one line (reqwest and rmcp keep the useful part,
/// a refused certificate or a refused connection, in the sources).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Whether `error` or one of its sources is TLS refusing the server (a certificate not trusted
/// or none presented, no protocol in common): trying again cannot help. Another TLS failure (an
/// alert, a record cut short) may be the network's, and is not one.
pub fn is_tls_refusal(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return matches!(
                tls,
                rustls::Error::InvalidCertificate(_)
                    | rustls::Error::NoCertificatesPresented
                    | rustls::Error::PeerIncompatible(_)
                    | rustls::Error::UnsupportedNameType
            );
        }
        // An I/O error wrapping another names it as its `get_ref`, not as its source (tokio-rustls
        // wraps rustls' error twice).
        next = match error.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
    }
    false
}

/// rustls' client settings: the built-in roots plus every certificate of `extra`, HTTP/2 offered
/// before HTTP/1.1 (what reqwest offers with its own TLS).
fn tls_config(extra: Option<&Path>) -> Result<rustls::ClientConfig, ClientError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Build(e.to_string()))?
        .with_root_certificates(roots(extra)?)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Whom a client made now trusts (`intendant doctor`'s `tls_roots`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trust {
    /// Mozilla's roots built in.
    pub built_in: usize,
    /// The file `SSL_CERT_FILE` names and how many certificates it adds, when set.
    pub extra: Option<(String, usize)>,
}

/// What [`client_builder`] would trust now, or why it could make no client.
pub fn trust() -> Result<Trust, ClientError> {
    let extra = named_file();
    let path = extra.as_deref().map(Path::new);
    let built_in = webpki_roots::TLS_SERVER_ROOTS.len();
    let added = roots(path)?.len() - built_in;
    Ok(Trust {
        built_in,
        extra: path.map(|p| (p.display().to_string(), added)),
    })
}

/// The built-in roots and every certificate of `extra`.
fn roots(extra: Option<&Path>) -> Result<rustls::RootCertStore, ClientError> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = extra {
        let cert_file = |why: String| ClientError::CertFile {
            path: path.display().to_string(),
            why,
        };
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| cert_file(format!("cannot read it: {e}")))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| cert_file(format!("not a PEM certificate list: {e}")))?;
        if certs.is_empty() {
            return Err(cert_file("it holds no PEM certificate".into()));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| cert_file(format!("a certificate in it is refused: {e}")))?;
        }
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_roots_are_trusted_with_no_file_named() {
        let config = tls_config(None).unwrap();
        assert_eq!(config.alpn_protocols[0], b"h2");
        assert!(!config.crypto_provider().cipher_suites.is_empty());
    }

    #[test]
    fn a_named_authority_is_trusted_beside_the_built_in_roots() {
        let authority =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../testkit/fixtures/tls/ca.pem");
        let built_in = webpki_roots::TLS_SERVER_ROOTS.len();
        assert_eq!(roots(None).unwrap().len(), built_in);
        assert_eq!(roots(Some(&authority)).unwrap().len(), built_in + 1);
    }

    #[test]
    fn a_tls_refusal_is_found_however_deep_the_io_errors_wrap_it() {
        use std::io::{Error, ErrorKind};
        let refused = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let twice = Error::other(Error::new(ErrorKind::InvalidData, refused));
        assert!(is_tls_refusal(&twice));
        let cut = Error::other(Error::new(
            ErrorKind::InvalidData,
            rustls::Error::DecryptError,
        ));
        assert!(
            !is_tls_refusal(&cut),
            "a record that fails to decrypt may be the network's"
        );
        assert!(!is_tls_refusal(&Error::from(ErrorKind::ConnectionRefused)));
        assert!(!is_tls_refusal(&Error::other("reset by peer")));
    }

    #[test]
    fn the_shared_settings_are_made_again_when_the_named_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("extra.pem");
        let authority =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../testkit/fixtures/tls/ca.pem");
        std::fs::write(&file, "").unwrap();
        let err = shared_tls_config(Some(&file)).unwrap_err().to_string();
        assert!(err.contains("holds no PEM certificate"), "{err}");
        // Replaced by a file with one certificate: read again, not the error kept.
        std::fs::copy(&authority, &file).unwrap();
        assert!(shared_tls_config(Some(&file)).is_ok());
        assert!(shared_tls_config(None).is_ok());
        // And emptied again: refused again.
        std::fs::write(&file, "").unwrap();
        assert!(shared_tls_config(Some(&file)).is_err());
    }

    #[test]
    fn a_named_file_that_is_missing_empty_or_not_pem_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = tls_config(Some(&missing)).unwrap_err().to_string();
        assert!(err.starts_with("SSL_CERT_FILE names "), "{err}");
        assert!(err.contains("missing.pem: cannot read it"), "{err}");

        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let err = tls_config(Some(&empty)).unwrap_err().to_string();
        assert!(err.contains("holds no PEM certificate"), "{err}");

        let broken = dir.path().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = tls_config(Some(&broken)).unwrap_err().to_string();
        assert!(err.contains("not a PEM certificate list"), "{err}");
    }
}
