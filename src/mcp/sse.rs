//! The legacy HTTP+SSE client transport (MCP 2024-11-05), which rmcp 3.x does not ship.
//!
//! GET the event stream, wait for the `endpoint` event, then POST each JSON-RPC message to
//! that URL while `message` events carry the server's messages back. The endpoint must be
//! on the same origin as the stream, so a server cannot redirect our POSTs elsewhere.
//!
//! The URL may carry credentials: messages name it masked, and reqwest's request errors
//! (the only ones that quote a URL) lose it.
//!
//! An event is held only up to `max_message_bytes`: the stream is cut at a longer one (the
//! SSE parser would otherwise buffer an event that never ends).

use std::sync::Arc;

use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use sse_stream::SseStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use url::Url;

use super::McpError;
use crate::domain::SecretUrl;

#[derive(Debug, thiserror::Error)]
pub enum SseTransportError {
    #[error("POST to the SSE endpoint failed: {0}")]
    Http(String),
    #[error("POST to the SSE endpoint answered {0}")]
    Status(reqwest::StatusCode),
    #[error("could not encode a message: {0}")]
    Encode(#[from] serde_json::Error),
}

pub struct LegacySseTransport {
    client: reqwest::Client,
    /// The session's place in its client's group, given back when the transport goes.
    _lease: super::LeasedClient,
    post_url: Arc<Url>,
    headers: Arc<HeaderMap>,
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    reader: JoinHandle<()>,
}

/// The stream's bytes, failing once an event (the bytes between two blank lines) grows
/// past `max` bytes.
fn capped_events(
    stream: impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send + 'static,
    max: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static {
    // Bytes of the current event, and whether the last byte seen (`\r` aside) ended a line.
    let mut in_event = 0usize;
    let mut line_ended = false;
    stream.map(move |chunk| {
        let chunk = chunk.map_err(|e| std::io::Error::other(e.without_url()))?;
        for &byte in chunk.iter() {
            match byte {
                b'\r' => {}
                b'\n' if line_ended => in_event = 0,
                b'\n' => line_ended = true,
                _ => {
                    line_ended = false;
                    in_event += 1;
                }
            }
            if in_event > max {
                return Err(std::io::Error::other(format!(
                    "the server sent an event over {max} bytes (pool.max_message_bytes)"
                )));
            }
        }
        Ok(chunk)
    })
}

impl LegacySseTransport {
    pub async fn connect(
        lease: super::LeasedClient,
        secret_url: &SecretUrl,
        headers: HeaderMap,
        challenges: super::auth::ChallengeSlot,
        max_event_bytes: usize,
    ) -> Result<Self, McpError> {
        let url = secret_url.expose();
        let client = lease.client.clone();
        let response = client
            .get(url.clone())
            .headers(headers.clone())
            .header(ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| McpError::Connect(format!("GET {secret_url}: {}", e.without_url())))?;
        let status = response.status();
        if matches!(status.as_u16(), 401 | 403)
            && let Some(header) = response
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
            && (status.as_u16() == 401 || header.contains("insufficient_scope"))
        {
            challenges.record(super::auth::AuthChallenge {
                www_authenticate: header.to_owned(),
                insufficient_scope: status.as_u16() == 403,
            });
        }
        if !response.status().is_success() {
            return Err(McpError::Connect(format!(
                "GET {secret_url} answered {}",
                response.status()
            )));
        }
        let mut events =
            SseStream::from_bytes_stream(capped_events(response.bytes_stream(), max_event_bytes));
        let post_url = loop {
            match events.next().await {
                Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => {
                    let data = event.data.unwrap_or_default();
                    break url
                        .join(data.trim())
                        .map_err(|e| McpError::Connect(format!("bad endpoint '{data}': {e}")))?;
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(McpError::Connect(format!("SSE stream: {e}"))),
                None => {
                    return Err(McpError::Connect(
                        "the SSE stream ended before announcing its endpoint".into(),
                    ));
                }
            }
        };
        if post_url.origin() != url.origin() {
            return Err(McpError::Connect(format!(
                "the server announced an endpoint on another origin ({}); refused",
                SecretUrl::new(post_url)
            )));
        }
        let (sender, incoming) = mpsc::channel(64);
        let reader = tokio::spawn(async move {
            while let Some(item) = events.next().await {
                match item {
                    Ok(event) if event.event.as_deref().unwrap_or("message") == "message" => {
                        let Some(data) = event.data else { continue };
                        match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&data) {
                            Ok(message) => {
                                if sender.send(message).await.is_err() {
                                    break;
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "ignored an undecodable SSE message")
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "SSE stream failed");
                        break;
                    }
                }
            }
            // Dropping the sender ends `receive`, which closes the session.
        });
        Ok(Self {
            client,
            _lease: lease,
            post_url: Arc::new(post_url),
            headers: Arc::new(headers),
            incoming,
            reader,
        })
    }
}

impl Transport<RoleClient> for LegacySseTransport {
    type Error = SseTransportError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let client = self.client.clone();
        let url = self.post_url.clone();
        let headers = self.headers.clone();
        async move {
            let body = serde_json::to_vec(&item)?;
            let response = client
                .post(url.as_str())
                .headers((*headers).clone())
                .header(CONTENT_TYPE, "application/json")
                .body(body)
                .send()
                .await
                .map_err(|e| SseTransportError::Http(e.without_url().to_string()))?;
            if !response.status().is_success() {
                return Err(SseTransportError::Status(response.status()));
            }
            Ok(())
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        Ok(())
    }
}

impl Drop for LegacySseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}
