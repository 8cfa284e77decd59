//! TLS in front of a plain loopback server, for tests of our HTTP clients over `https`: the
//! certificate under `fixtures/tls/` (for `localhost` and `127.0.0.1`), signed by the test
//! authority [`authority`] names, which a client under test trusts through `SSL_CERT_FILE`.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};

/// The test authority's certificate (PEM).
pub fn authority() -> PathBuf {
    fixture("ca.pem")
}

fn fixture(name: &str) -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "fixtures", "tls", name]
        .iter()
        .collect()
}

/// A TLS listener on a loopback port whose every connection, once its handshake is done, is
/// relayed to `127.0.0.1:upstream` in plain text. Ends when dropped.
pub struct Front {
    port: u16,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Front {
    /// Listens on a free loopback port, offering HTTP/1.1 (the upstream's protocol).
    pub fn start(upstream: u16) -> io::Result<Front> {
        let invalid =
            |e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
        let certs = CertificateDer::pem_file_iter(fixture("server.pem"))
            .map_err(|e| invalid(&e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(&e))?;
        let key = PrivateKeyDer::from_pem_file(fixture("server.key")).map_err(|e| invalid(&e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(&e))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| invalid(&e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        runtime.spawn(async move {
            let Ok(listener) = TcpListener::from_std(listener) else {
                return;
            };
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        Ok(Front {
            port,
            runtime: Some(runtime),
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
