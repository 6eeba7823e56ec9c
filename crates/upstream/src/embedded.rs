//! Embedded MCP servers: tools that run inside this process (seed 002's in-process adapter).
//!
//! Each is a real rmcp server, connected to the pool's client over an in-memory duplex
//! pipe, so an embedded server goes through exactly the same connection actor, caches,
//! timeouts and confirmation rules as any other, with no process and no network. They are
//! also the cheapest upstream to measure the pool's own overhead against.

mod calculator;
mod clock;

use rmcp::ServiceExt;

pub use crate::domain::EmbeddedKind;

/// Bytes buffered in each direction of the in-memory pipe.
const PIPE_BYTES: usize = 256 * 1024;

/// Starts the embedded server `kind` and returns the client's end of its pipe. The server
/// task ends when the client drops its end.
pub fn start(kind: EmbeddedKind) -> tokio::io::DuplexStream {
    let (client_end, server_end) = tokio::io::duplex(PIPE_BYTES);
    match kind {
        EmbeddedKind::Clock => spawn_server(clock::Clock, server_end),
        EmbeddedKind::Calculator => spawn_server(calculator::Calculator, server_end),
    }
    client_end
}

fn spawn_server<S: rmcp::ServerHandler>(server: S, pipe: tokio::io::DuplexStream) {
    tokio::spawn(async move {
        match server.serve(pipe).await {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(error) => tracing::warn!(%error, "an embedded server did not start"),
        }
    });
}

/// A JSON Schema object for a tool's input.
fn schema(value: serde_json::Value) -> std::sync::Arc<rmcp::model::JsonObject> {
    std::sync::Arc::new(value.as_object().cloned().expect("schema is an object"))
}
