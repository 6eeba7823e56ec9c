//! The one way the service builds an HTTP client that dials a URL a user or an MCP server
//! chose: MCP base URLs, legacy SSE endpoints, OAuth discovery and every endpoint an
//! authorization server names (authorization, token, registration, revocation, JWKS), and
//! anything added later. (The Xiaozhi bridge dials its WebSocket itself, through
//! [`UrlPolicy::dial`], which applies the same policy before it connects.)
//!
//! The URL policy is applied three times, so no spelling of a host gets past it:
//! - names resolve only through [`GuardedResolver`], which answers with allowed addresses
//!   alone (DNS rebinding, late-registered names);
//! - every new connection's peer address, the address actually connected, is checked
//!   before a byte of the request is written ([`AddressGuard`]): IP-literal hosts never
//!   reach a resolver, so this is the backstop for `http://169.254.169.254/` or
//!   `http://[::1]/` wherever they come from (reqwest hides the destination from a
//!   connector layer, so the TCP connection itself opens, and is closed unused);
//! - a redirect to an IP-literal host the policy refuses is not followed at all, and the
//!   service's own entry points judge a literal before they dial (a saved or connected URL
//!   by [`UrlPolicy::check`], OAuth requests in `oauth::PolicyHttp`, endpoints an
//!   authorization server names when its metadata is read).
//!
//! Proxies are never used: through a proxy the policy could not see the address dialled.
//! `tests/api/outbound.rs` fails when a client is built anywhere else.

use std::path::Path;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use anyhow::Context;
use futures::future::BoxFuture;
use hyper_util::client::legacy::connect::{Connection, HttpInfo};

use super::url_guard::{GuardedResolver, UrlPolicy, literal_host};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Builds the service's outbound clients: one TLS configuration (system roots plus an
/// operator's extra CA), one connect timeout and one URL policy for all of them.
#[derive(Clone)]
pub struct Dialer {
    tls: rustls::ClientConfig,
    connect_timeout: Duration,
    policy: Arc<UrlPolicy>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("connect_timeout", &self.connect_timeout)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// Which redirects a client follows.
#[derive(Debug, Clone, Copy)]
pub enum Redirects {
    /// None: the URL was checked and a redirect would lead elsewhere (MCP sessions).
    Never,
    /// Up to this many hops, each to a host the policy allows (OAuth discovery).
    UpTo(usize),
}

impl Dialer {
    /// `extra_ca_file`: PEM certificates trusted besides the system's (a company CA).
    pub fn new(
        policy: Arc<UrlPolicy>,
        connect_timeout: Duration,
        extra_ca_file: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let extra_roots = match extra_ca_file {
            Some(path) => read_certificates(path)?,
            None => Vec::new(),
        };
        Ok(Self {
            tls: tls_config(extra_roots)?,
            connect_timeout,
            policy,
        })
    }

    pub fn policy(&self) -> &Arc<UrlPolicy> {
        &self.policy
    }

    /// A client under the policy. `timeout` bounds each whole request, where the caller
    /// wants that (an MCP session's streams live long and have none).
    pub fn client(&self, redirects: Redirects, timeout: Option<Duration>) -> reqwest::Client {
        let redirect = match redirects {
            Redirects::Never => reqwest::redirect::Policy::none(),
            Redirects::UpTo(hops) => {
                let policy = self.policy.clone();
                reqwest::redirect::Policy::custom(move |attempt| {
                    if attempt.previous().len() > hops {
                        return attempt.error(format!("more than {hops} redirects"));
                    }
                    match literal_host(attempt.url()) {
                        Some(ip) => match policy.admits(ip) {
                            Ok(()) => attempt.follow(),
                            Err(refused) => attempt.error(refused),
                        },
                        None => attempt.follow(),
                    }
                })
            }
        };
        #[allow(clippy::disallowed_methods)] // this is the one place clients are built
        let mut builder = reqwest::Client::builder();
        builder = builder
            .tls_backend_preconfigured(self.tls.clone())
            .connect_timeout(self.connect_timeout)
            .no_proxy()
            .dns_resolver(GuardedResolver(self.policy.clone()))
            .connector_layer(AddressGuardLayer(self.policy.clone()))
            .redirect(redirect);
        if let Some(timeout) = timeout {
            builder = builder.timeout(timeout);
        }
        builder
            .build()
            .expect("a reqwest client with a rustls configuration builds")
    }
}

/// Wraps reqwest's connector so every connection it makes is checked, by its peer address,
/// before it is used.
#[derive(Clone)]
struct AddressGuardLayer(Arc<UrlPolicy>);

impl<S> tower::Layer<S> for AddressGuardLayer {
    type Service = AddressGuard<S>;

    fn layer(&self, inner: S) -> AddressGuard<S> {
        AddressGuard {
            inner,
            policy: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct AddressGuard<S> {
    inner: S,
    policy: Arc<UrlPolicy>,
}

impl<S, Request> tower::Service<Request> for AddressGuard<S>
where
    S: tower::Service<Request, Error = BoxError>,
    S::Response: Connection + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let connecting = self.inner.call(request);
        let policy = self.policy.clone();
        Box::pin(async move {
            let connection = connecting.await?;
            let mut extensions = http::Extensions::new();
            connection.connected().get_extras(&mut extensions);
            let Some(info) = extensions.get::<HttpInfo>() else {
                return Err("the connection's peer address is unknown; refused".into());
            };
            // Dropping the connection closes it: nothing of the request was written.
            policy.admits_connected(info.remote_addr().ip())?;
            Ok(connection)
        })
    }
}

/// What reqwest builds for itself (the platform's roots through rustls-platform-verifier),
/// plus the extra roots, offering HTTP/2 and HTTP/1.1 by ALPN.
fn tls_config(
    extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
) -> anyhow::Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = if extra_roots.is_empty() {
        rustls_platform_verifier::Verifier::new(provider.clone())
    } else {
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra_roots, provider.clone())
    }
    .context("the TLS certificate verifier")?;
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS protocol versions")?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tls)
}

fn read_certificates(
    path: &Path,
) -> anyhow::Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    use rustls::pki_types::pem::PemObject;
    let certificates = rustls::pki_types::CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("security.extra_ca_file {}", path.display()))?;
    anyhow::ensure!(
        !certificates.is_empty(),
        "security.extra_ca_file {} holds no PEM certificate",
        path.display()
    );
    Ok(certificates)
}

#[cfg(test)]
mod tests {
    //! The dialer itself against real sockets: a listener on 127.0.0.2 (forbidden; only
    //! 127.0.0.1 is listed) is never connected to, whichever spelling of its address a URL
    //! or a redirect from an allowed host uses.
    use std::net::Ipv4Addr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use proptest::prelude::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    fn dialer() -> Dialer {
        let mut settings = crate::config::Settings::defaults().security;
        settings.allow_loopback_urls = false;
        settings.allowed_url_hosts = vec!["127.0.0.1".into()];
        let policy = Arc::new(UrlPolicy::from_settings(&settings));
        Dialer::new(policy, Duration::from_secs(2), None).unwrap()
    }

    /// Counts connections to 127.0.0.2 and the requests (any byte) they carried; its port.
    async fn forbidden_listener(accepted: Arc<AtomicUsize>, requests: Arc<AtomicUsize>) -> u16 {
        let listener = TcpListener::bind("127.0.0.2:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let requests = requests.clone();
                tokio::spawn(async move {
                    let mut byte = [0u8; 1];
                    if matches!(socket.read(&mut byte).await, Ok(n) if n > 0) {
                        requests.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        port
    }

    /// An allowed host (127.0.0.1) that redirects every request to `location`.
    async fn redirector(location: String) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let location = location.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let _ = socket.read(&mut buffer).await;
                    let answer = format!(
                        "HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        port
    }

    fn spell(form: u8) -> String {
        let ip = Ipv4Addr::new(127, 0, 0, 2);
        let n = u32::from(ip);
        match form % 7 {
            0 => ip.to_string(),
            1 => n.to_string(),
            2 => format!("0x{n:x}"),
            3 => "0177.0.0.02".into(),
            4 => "127.2".into(),
            5 => format!("[::ffff:{ip}]"),
            _ => "127.0.0.2.".into(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn a_forbidden_address_gets_no_request_directly_and_no_connection_by_redirect(
            form in any::<u8>(),
            userinfo in prop::option::of("[a-z]{1,6}:[a-z]{1,6}@"),
            path in "(/[a-z]{0,6}){0,2}",
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let (direct, redirected, accepted, requests) = runtime.block_on(async {
                let accepted = Arc::new(AtomicUsize::new(0));
                let requests = Arc::new(AtomicUsize::new(0));
                let port = forbidden_listener(accepted.clone(), requests.clone()).await;
                let target = format!(
                    "http://{}{}:{port}{path}",
                    userinfo.clone().unwrap_or_default(),
                    spell(form)
                );
                let dialer = dialer();
                let client = dialer.client(Redirects::UpTo(5), Some(Duration::from_secs(5)));
                // A redirect hop is judged before it is dialled: no connection at all.
                let from = redirector(target.clone()).await;
                let redirected = client.get(format!("http://127.0.0.1:{from}/start")).send().await;
                let after_redirect = accepted.load(Ordering::SeqCst);
                // A literal handed to the client itself: the connection is judged by its
                // peer address and closed before a byte of the request is written.
                let direct = client.get(&target).send().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                (
                    direct.map(|r| r.status()),
                    redirected.map(|r| r.status()),
                    after_redirect,
                    requests.load(Ordering::SeqCst),
                )
            });
            prop_assert!(redirected.is_err(), "redirected: {redirected:?}");
            prop_assert_eq!(accepted, 0, "a redirect hop was dialled");
            prop_assert!(direct.is_err(), "direct: {direct:?}");
            prop_assert_eq!(requests, 0, "a request reached the forbidden address");
        }
    }
}
