//! The MCP client side: connecting to one upstream server over stdio, streamable HTTP or
//! legacy SSE, and making requests that always carry a timeout.
//!
//! rmcp has no default request timeout (a lost response would hang forever) and no
//! legacy-SSE client; both gaps are closed here. Nothing in this module knows users,
//! actors or HTTP routes: the pool owns the connections this module makes.

pub mod auth;
mod client;
mod connect;
pub mod downstream;
mod handler;
mod http;
mod listen;
mod sse;
pub(crate) mod stdio;
mod url_free;

pub use client::{
    BecameTask, CallOutcome, CallPeers, McpClient, Progress, RelayedRound, ServerFeatures,
};
pub use connect::{SessionRevision, UpstreamSpec, UpstreamTransport, connect};
pub use handler::UpstreamEvents;
pub use http::{LeasedClient, UpstreamHttp};
pub use stdio::{GroupUsage, StdioLimits, group_usage, prepare_containment};

use std::time::Duration;

/// Failures talking to an upstream MCP server.
///
/// The texts come from the upstream or from what it sent; they are shown to callers only
/// as a short [`excerpt`], so an error can never relay an upstream's body (e.g. a page an
/// attacker pointed a server at).
#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    #[error("the MCP server did not answer within {}s", .0.as_secs_f32())]
    Timeout(Duration),
    #[error("could not connect to the MCP server: {}", excerpt(.0))]
    Connect(String),
    #[error("the connection to the MCP server was lost: {}", excerpt(.0))]
    Transport(String),
    #[error("the MCP server answered with error {code}: {}", excerpt(.message))]
    Remote {
        code: i32,
        message: String,
        /// The error's `data`, for a caller that relays the error as the server sent it.
        data: Option<serde_json::Value>,
    },
    #[error("the MCP server sent an unexpected response: {}", excerpt(.0))]
    Protocol(String),
    #[error("the MCP server's answer is larger than the {0} bytes this service accepts")]
    ResultTooLarge(usize),
    /// The URL policy refused every address the server's name resolved to when dialled.
    #[error("could not connect to the MCP server: its host {0}")]
    Refused(String),
    /// The server refused without (enough) authorization: the user has to authorize it.
    #[error("{}", if .0.insufficient_scope { "the MCP server needs the user's authorization for more scopes (OAuth)" } else { "the MCP server needs the user's authorization (OAuth)" })]
    AuthRequired(auth::AuthChallenge),
}

/// Longest part of an upstream-supplied text an error shows (room for the target and the
/// root cause at the end of an error chain).
const EXCERPT_CHARS: usize = 300;

/// `error` and each of its sources, as one line: a refusal by the URL policy deep inside a
/// request error still says why ("error sending request: … 'x' is a loopback address …").
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    // rustls says what went wrong ("received corrupt message", "invalid peer
    // certificate") without saying it was TLS; its error arrives boxed inside hyper's and
    // an io::Error, where no downcast reaches it, so it is known by its words.
    if TLS_PHRASES.iter().any(|phrase| text.contains(phrase)) {
        text = format!("TLS handshake failed: {text}");
    }
    text
}

/// How rustls's errors begin (`rustls::Error`'s Display).
const TLS_PHRASES: [&str; 7] = [
    "received corrupt message",
    "invalid peer certificate",
    "received fatal alert",
    "peer is incompatible",
    "peer misbehaved",
    "peer sent no certificates",
    "received unexpected message",
];

/// At most [`EXCERPT_CHARS`] characters of `text`, on one line, control characters
/// dropped: enough to say what failed, too little to carry a document.
pub fn excerpt(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(EXCERPT_CHARS + 3));
    let mut chars = 0;
    let mut last_space = false;
    for c in text.chars() {
        let c = if c.is_whitespace() { ' ' } else { c };
        if c.is_control() || (c == ' ' && last_space) {
            continue;
        }
        if chars == EXCERPT_CHARS {
            out.push('…');
            break;
        }
        last_space = c == ' ';
        out.push(c);
        chars += 1;
    }
    out
}

impl McpError {
    /// Whether the connection itself is unusable (as opposed to one request failing).
    pub(crate) fn is_connection_failure(&self) -> bool {
        match self {
            McpError::Connect(_) | McpError::Transport(_) | McpError::Refused(_) => true,
            // A 401 on a live session: its token is gone for good (the refresh failed).
            McpError::AuthRequired(challenge) => !challenge.insufficient_scope,
            _ => false,
        }
    }
}

impl From<rmcp::service::ServiceError> for McpError {
    fn from(err: rmcp::service::ServiceError) -> Self {
        use rmcp::service::ServiceError as E;
        match err {
            E::McpError(data) if data.code.0 == stdio::MESSAGE_TOO_LARGE_CODE => {
                McpError::ResultTooLarge(
                    data.data
                        .as_ref()
                        .and_then(|d| d["limitBytes"].as_u64())
                        .unwrap_or_default() as usize,
                )
            }
            E::McpError(data) => McpError::Remote {
                code: data.code.0,
                message: data.message.to_string(),
                data: data.data,
            },
            E::Timeout { timeout } => McpError::Timeout(timeout),
            // The transport's cause, without rmcp's wrapper naming the transport's type
            // (`Transport [rmcp::transport::worker::WorkerTransport<…>] error: …`), which
            // says nothing to a person (as `connect::initialize_failure` does).
            E::TransportSend(e) => match refusal(&e) {
                Some(challenge) => McpError::AuthRequired(challenge),
                None => McpError::Transport(error_chain(&*e.error)),
            },
            E::TransportClosed => McpError::Transport("transport closed".into()),
            E::Cancelled { reason } => {
                McpError::Transport(reason.unwrap_or_else(|| "request cancelled".into()))
            }
            other => McpError::Protocol(other.to_string()),
        }
    }
}

/// The challenge a streamable HTTP request was refused with (401, or 403
/// `insufficient_scope`), read from that request's own error: the connection's
/// last-challenge note (`auth::ChallengeSlot`) may meanwhile have been cleared by another
/// request's success.
fn refusal(error: &rmcp::transport::DynamicTransportError) -> Option<auth::AuthChallenge> {
    use rmcp::transport::streamable_http_client::StreamableHttpError as Http;
    match error.error.downcast_ref::<Http<reqwest::Error>>()? {
        Http::AuthRequired(refused) => Some(auth::AuthChallenge {
            www_authenticate: refused.www_authenticate_header.clone(),
            insufficient_scope: false,
        }),
        Http::InsufficientScope(refused) => Some(auth::AuthChallenge {
            www_authenticate: refused.www_authenticate_header.clone(),
            insufficient_scope: true,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_excerpt_is_short_and_on_one_line() {
        let long = format!("first\nsecond\t\u{7}{}", "z".repeat(500));
        let short = super::excerpt(&long);
        assert!(short.starts_with("first second "), "{short}");
        assert_eq!(short.chars().count(), super::EXCERPT_CHARS + 1);
        assert!(short.ends_with('…'));
        assert_eq!(super::excerpt("as is"), "as is");
    }

    /// A request refused for scopes fails as that refusal by itself, whatever the
    /// connection's last-challenge note says by the time its error is read.
    #[test]
    fn a_refused_requests_own_error_carries_its_challenge() {
        use rmcp::transport::DynamicTransportError;
        use rmcp::transport::streamable_http_client::{
            InsufficientScopeError, StreamableHttpClientWorker, StreamableHttpError,
        };
        type Http = rmcp::transport::worker::WorkerTransport<
            StreamableHttpClientWorker<
                rmcp::transport::auth::AuthClient<super::url_free::UrlFreeErrors>,
            >,
        >;
        let header = r#"Bearer error="insufficient_scope", scope="write""#;
        let refused: StreamableHttpError<reqwest::Error> = StreamableHttpError::InsufficientScope(
            InsufficientScopeError::new(header.into(), Some("write".into())),
        );
        let error = DynamicTransportError::new::<Http, rmcp::RoleClient>(refused);
        match super::McpError::from(rmcp::service::ServiceError::TransportSend(error)) {
            super::McpError::AuthRequired(challenge) => {
                assert!(challenge.insufficient_scope);
                assert_eq!(challenge.www_authenticate, header);
                assert_eq!(challenge.scopes(), vec!["write".to_owned()]);
            }
            other => panic!("expected the refusal, got {other:?}"),
        }
        let lost: StreamableHttpError<reqwest::Error> = StreamableHttpError::UnexpectedEndOfStream;
        let error = DynamicTransportError::new::<Http, rmcp::RoleClient>(lost);
        assert!(matches!(
            super::McpError::from(rmcp::service::ServiceError::TransportSend(error)),
            super::McpError::Transport(_)
        ));
    }
}
