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
    // Bytes of the current event; whether the last line ended empty-so-far (at a line's
    // start); whether the last byte was a CR (whose LF, if one follows, ends no new line).
    let mut in_event = 0usize;
    let mut at_line_start = true;
    let mut after_cr = false;
    stream.map(move |chunk| {
        let chunk = chunk.map_err(|e| std::io::Error::other(e.without_url()))?;
        for &byte in chunk.iter() {
            // Lines end in CRLF, LF or CR alone (the SSE grammar); an empty line ends the
            // event.
            let line_end = match byte {
                b'\n' if after_cr => {
                    after_cr = false;
                    continue;
                }
                b'\n' => true,
                b'\r' => {
                    after_cr = true;
                    true
                }
                _ => {
                    after_cr = false;
                    false
                }
            };
            if line_end {
                if at_line_start {
                    in_event = 0;
                }
                at_line_start = true;
            } else {
                at_line_start = false;
                in_event += 1;
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
                    break url.join(data.trim()).map_err(|e| {
                        McpError::Connect(format!("bad endpoint '{}': {e}", super::excerpt(&data)))
                    })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn passes(chunks: &[&str], max: usize) -> bool {
        let stream = futures::stream::iter(
            chunks
                .iter()
                .map(|c| Ok::<_, reqwest::Error>(bytes::Bytes::from(c.to_string())))
                .collect::<Vec<_>>(),
        );
        let results: Vec<_> = capped_events(stream, max).collect().await;
        results.iter().all(Result::is_ok)
    }

    #[tokio::test]
    async fn events_are_counted_one_by_one_whatever_their_line_ends() {
        let many = |end: &str| vec![format!("data: 0123456789{end}{end}"); 100];
        for end in ["\n", "\r\n", "\r"] {
            let events = many(end);
            let chunks: Vec<&str> = events.iter().map(String::as_str).collect();
            assert!(passes(&chunks, 32).await, "{end:?}: short events pass");
        }
        // One event split across chunks, and split inside a CRLF, is still one event.
        assert!(passes(&["data: 01234", "56789\r", "\n\r", "\ndata: x\n\n"], 32).await);
        assert!(!passes(&["data: ", "0123456789", "0123456789", "0123456789"], 32).await);
        // Lines of one event add up until the empty line.
        assert!(
            !passes(
                &["data: 0123456789\ndata: 0123456789\ndata: 0123456789\n"],
                32
            )
            .await
        );
    }
}
