//! `--tls-cert FILE --tls-key FILE`: the fixture serves HTTPS, offering HTTP/2 and HTTP/1.1
//! by ALPN (hyper answers whichever the client chose), as a remote server written with
//! hyper or rmcp does. The load tool runs its `actors --tls` scenario on it: with HTTP/2 the
//! service's sessions share connections, so 50,000 of them fit in the descriptor limit.
//!
//! Accepted connections are counted by negotiated protocol (`GET /fixture/sessions`,
//! `tls_connections`): tests tell one connection per group of sessions from one per session.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// A client that connects and never finishes its handshake is dropped after this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections accepted, by the protocol ALPN settled on.
#[derive(Default)]
pub struct TlsConnections {
    h2: AtomicU64,
    http1: AtomicU64,
}

impl TlsConnections {
    pub fn to_json(&self) -> Value {
        json!({
            "h2": self.h2.load(Ordering::Relaxed),
            "http/1.1": self.http1.load(Ordering::Relaxed),
        })
    }
}

/// The fixture's TLS side: its configuration and the connections it accepted.
pub struct TlsServer {
    acceptor: TlsAcceptor,
    pub connections: Arc<TlsConnections>,
}

impl TlsServer {
    /// From a PEM certificate chain and key.
    pub fn from_pem(cert: &Path, key: &Path) -> std::io::Result<Self> {
        let invalid = |what: &Path, e: &dyn std::fmt::Display| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{}: {e}", what.display()),
            )
        };
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| invalid(cert, &e))?;
        let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| invalid(key, &e))?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(chain, key_der)
            .map_err(|e| invalid(cert, &e))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            connections: Arc::default(),
        })
    }
}

/// Connections whose handshake is done and not yet taken by `axum::serve`.
const READY_BACKLOG: usize = 1024;

/// A TCP listener whose connections `axum::serve` gets after their TLS handshake. Each
/// handshake runs in its own task, so a slow or silent client holds up nobody else and
/// many connections opened at once (the load tool's) are not finished one by one.
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, server: TlsServer) -> std::io::Result<Self> {
        let local_addr = tcp.local_addr()?;
        let TlsServer {
            acceptor,
            connections,
        } = server;
        let (sender, ready) = tokio::sync::mpsc::channel(READY_BACKLOG);
        tokio::spawn(async move {
            loop {
                let (socket, address) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors, most likely: let some close.
                        eprintln!("mcp-fixture: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Like the plain listener: without it every kept-alive call waits ~40 ms.
                let _ = socket.set_nodelay(true);
                let (acceptor, connections, sender) =
                    (acceptor.clone(), connections.clone(), sender.clone());
                tokio::spawn(async move {
                    let handshake =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket));
                    let Ok(Ok(stream)) = handshake.await else {
                        return;
                    };
                    let counter = match stream.get_ref().1.alpn_protocol() {
                        Some(b"h2") => &connections.h2,
                        _ => &connections.http1,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    let _ = sender.send((stream, address)).await;
                });
            }
        });
        Ok(Self { ready, local_addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accepting task ended (the runtime is going down): accept nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}
