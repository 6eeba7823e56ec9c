//! The MCP client side: connecting to one upstream server over stdio, streamable HTTP or
//! legacy SSE, and making requests that always carry a timeout.
//!
//! rmcp has no default request timeout (a lost response would hang forever) and no
//! legacy-SSE client; both gaps are closed here. Nothing in this module knows users,
//! actors or HTTP routes: the pool owns the connections this module makes.

mod client;
mod connect;
mod handler;
mod sse;

pub use client::{CallOutcome, McpClient, Progress, ServerFeatures};
pub use connect::{UpstreamSpec, UpstreamTransport, connect, http_client};
pub use handler::UpstreamEvents;

use std::time::Duration;

/// Failures talking to an upstream MCP server.
#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    #[error("the MCP server did not answer within {}s", .0.as_secs_f32())]
    Timeout(Duration),
    #[error("could not connect to the MCP server: {0}")]
    Connect(String),
    #[error("the connection to the MCP server was lost: {0}")]
    Transport(String),
    #[error("the MCP server answered with error {code}: {message}")]
    Remote { code: i32, message: String },
    #[error("the MCP server sent an unexpected response: {0}")]
    Protocol(String),
}

impl McpError {
    /// Whether the connection itself is unusable (as opposed to one request failing).
    pub fn is_connection_failure(&self) -> bool {
        matches!(self, McpError::Connect(_) | McpError::Transport(_))
    }
}

impl From<rmcp::service::ServiceError> for McpError {
    fn from(err: rmcp::service::ServiceError) -> Self {
        use rmcp::service::ServiceError as E;
        match err {
            E::McpError(data) => McpError::Remote {
                code: data.code.0,
                message: data.message.to_string(),
            },
            E::Timeout { timeout } => McpError::Timeout(timeout),
            E::TransportSend(e) => McpError::Transport(e.to_string()),
            E::TransportClosed => McpError::Transport("transport closed".into()),
            E::Cancelled { reason } => {
                McpError::Transport(reason.unwrap_or_else(|| "request cancelled".into()))
            }
            other => McpError::Protocol(other.to_string()),
        }
    }
}
