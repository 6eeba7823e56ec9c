//! The egress proxy of one sandboxed server: an HTTP proxy on a Unix socket bound into
//! its sandbox (reached there through a forwarder on the sandbox's own loopback), which
//! dials only what the URL policy allows, through [`UrlPolicy::dial`], the same check as
//! the service's own dials. `CONNECT host:port` (HTTPS and any TCP) is tunnelled;
//! `GET http://host/…` (absolute form) is forwarded with its request line made
//! origin-form and the connection closed after the answer. Anything else is refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use url::Url;

use crate::domain::host_allowed;
use crate::security::UrlPolicy;

/// The socket's name in its folder.
pub(super) const SOCKET: &str = "proxy.sock";
/// Longest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;

/// A running proxy; dropping it stops it and removes its socket.
pub struct EgressProxy {
    folder: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl EgressProxy {
    /// Listens on a fresh socket in a folder of its own below `base`.
    pub(super) fn start(
        base: &Path,
        policy: Arc<UrlPolicy>,
        allow_hosts: Vec<String>,
    ) -> std::io::Result<Self> {
        let folder = base.join(uuid::Uuid::new_v4().simple().to_string());
        std::fs::create_dir_all(&folder)?;
        let listener = UnixListener::bind(folder.join(SOCKET))?;
        let allow = Arc::new(allow_hosts);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (policy, allow) = (policy.clone(), allow.clone());
                tokio::spawn(async move {
                    if let Err(error) = serve(client, &policy, &allow).await {
                        tracing::debug!(%error, "an egress proxy connection ended");
                    }
                });
            }
        });
        Ok(Self { folder, task })
    }

    pub(super) fn folder(&self) -> &Path {
        &self.folder
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.folder);
    }
}

/// One client connection: its first request decides where it goes.
async fn serve(
    mut client: UnixStream,
    policy: &UrlPolicy,
    allow: &[String],
) -> std::io::Result<()> {
    let mut buffer = Vec::with_capacity(1024);
    let head_len = loop {
        let mut chunk = [0u8; 2048];
        let read = client.read(&mut chunk).await?;
        if read == 0 {
            return Ok(());
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if buffer.len() > MAX_HEAD {
            return refuse(&mut client, 431, "the request head is too large").await;
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    if !matches!(
        request.parse(&buffer[..head_len]),
        Ok(httparse::Status::Complete(_))
    ) {
        return refuse(&mut client, 400, "not an HTTP request").await;
    }
    let method = request.method.unwrap_or_default().to_owned();
    let target = request.path.unwrap_or_default().to_owned();
    let (url, tunnel) = if method.eq_ignore_ascii_case("CONNECT") {
        (Url::parse(&format!("http://{target}/")).ok(), true)
    } else {
        (
            Url::parse(&target).ok().filter(|u| u.scheme() == "http"),
            false,
        )
    };
    let Some(url) = url.filter(|u| u.host_str().is_some()) else {
        return refuse(
            &mut client,
            400,
            "the proxy takes CONNECT host:port or an absolute http:// URL",
        )
        .await;
    };
    let host = url
        .host_str()
        .unwrap_or_default()
        .trim_matches(['[', ']'])
        .to_owned();
    if !host_allowed(allow, &host) {
        tracing::warn!(%host, "egress refused: the host is not on the server's allow list");
        return refuse(
            &mut client,
            403,
            &format!("{host} is not on this server's allow list (sandbox.allowHosts)"),
        )
        .await;
    }
    let mut upstream = match policy.dial(&url).await {
        Ok(stream) => stream,
        Err(error) => {
            tracing::warn!(%host, %error, "egress refused by the URL policy");
            return refuse(&mut client, 403, &format!("refused: {error}")).await;
        }
    };
    if tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
        upstream.write_all(&buffer[head_len..]).await?;
    } else {
        upstream
            .write_all(&origin_form(&request, &url).into_bytes())
            .await?;
        upstream.write_all(&buffer[head_len..]).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// The request's head as the origin server reads it: origin-form target, no proxy
/// headers, one request per connection.
fn origin_form(request: &httparse::Request<'_, '_>, url: &Url) -> String {
    let mut path = url.path().to_owned();
    if let Some(query) = url.query() {
        path = format!("{path}?{query}");
    }
    let mut head = format!("{} {path} HTTP/1.1\r\n", request.method.unwrap_or("GET"));
    for header in request.headers.iter() {
        let name = header.name.to_ascii_lowercase();
        if name.starts_with("proxy-") || name == "connection" || name == "keep-alive" {
            continue;
        }
        head.push_str(header.name);
        head.push_str(": ");
        head.push_str(&String::from_utf8_lossy(header.value));
        head.push_str("\r\n");
    }
    head.push_str("Connection: close\r\n\r\n");
    head
}

async fn refuse(client: &mut UnixStream, status: u16, why: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Request Header Fields Too Large",
    };
    let body = format!("{why}\n");
    let answer = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(answer.as_bytes()).await?;
    client.shutdown().await
}
