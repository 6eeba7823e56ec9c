//! Reading a stdio server's messages: newline-delimited JSON-RPC with a size limit, the
//! answers to pending tool calls read as tool results directly.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use regex::bytes::Regex;
use rmcp::RoleClient;
use rmcp::model::{
    CallToolResult, ClientNotification, ClientRequest, JsonRpcMessage, JsonRpcResponse, RequestId,
    ServerNotification, ServerRequest, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::MESSAGE_TOO_LARGE_CODE;

/// Read buffers above this size are given back after the message that needed them.
pub(super) const KEPT_BUFFER: usize = 64 * 1024;

/// How much of an oversized line's head and tail is kept to find its request id.
const ID_WINDOW: usize = 1024;

/// Ids of the `tools/call` requests sent and not answered yet, so that their answers are
/// read as tool results at once. rmcp's `ServerResult` is an untagged union that lists
/// `CallToolResult` 16th: read through it, each call's answer first failed 15 other
/// shapes, a serde error formatted for each (~29,000 instructions, a sixth of a REST
/// call's).
#[derive(Clone, Default)]
pub(super) struct PendingCalls(Arc<Mutex<HashSet<RequestId>>>);

/// More unanswered calls than this on one connection means answers went missing (a
/// server that never answers what was cancelled): the ids are dropped, and the answers
/// that still come are read the general way, as any other answer.
const MAX_PENDING_CALLS: usize = 65_536;

impl PendingCalls {
    pub(super) fn set(&self) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes a call going out, or one the client gave up on.
    pub(super) fn outgoing(&self, message: &TxJsonRpcMessage<RoleClient>) {
        match message {
            JsonRpcMessage::Request(request)
                if matches!(request.request, ClientRequest::CallToolRequest(_)) =>
            {
                let mut set = self.set();
                if set.len() >= MAX_PENDING_CALLS {
                    set.clear();
                }
                set.insert(request.id.clone());
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.set().remove(id);
                }
            }
            _ => {}
        }
    }

    fn answered(&self, id: &RequestId) -> bool {
        self.set().remove(id)
    }
}

/// Newline-delimited messages with a size limit. A line over the limit is skipped without
/// being buffered; when its request id can be found (in its head, where rmcp and the
/// Python SDK put it, or its tail, where the TypeScript SDK does) the waiting request is
/// answered at once with [`MESSAGE_TOO_LARGE_CODE`].
pub(super) struct LineReader<R> {
    pub(super) read: BufReader<R>,
    pub(super) line: Vec<u8>,
    max: usize,
    calls: PendingCalls,
    /// Set while the rest of an oversized line is being skipped (reads may be cancelled
    /// between chunks, so this lives here and not on the stack).
    skipping: Option<Skipped>,
}

struct Skipped {
    head: Vec<u8>,
    tail: Vec<u8>,
    bytes: usize,
}

impl<R: tokio::io::AsyncRead + Unpin + Send> LineReader<R> {
    pub(super) fn new(read: R, max: usize, calls: PendingCalls) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            max,
            calls,
            skipping: None,
        }
    }

    pub(super) async fn next_message(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let (consumed, done) = {
                let available = match self.read.fill_buf().await {
                    Ok(available) => available,
                    Err(error) => {
                        tracing::warn!(%error, "reading from a stdio server failed");
                        return None;
                    }
                };
                if available.is_empty() {
                    return None;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let chunk = &available[..newline.map_or(available.len(), |i| i + 1)];
                if let Some(skipped) = self.skipping.as_mut() {
                    skipped.push(chunk);
                } else if self.line.len() + chunk.len() > self.max {
                    let mut skipped = Skipped {
                        head: Vec::new(),
                        tail: Vec::new(),
                        bytes: 0,
                    };
                    skipped.push(&self.line);
                    skipped.push(chunk);
                    self.line = Vec::new();
                    self.skipping = Some(skipped);
                } else {
                    self.line.extend_from_slice(chunk);
                }
                (chunk.len(), newline.is_some())
            };
            self.read.consume(consumed);
            if !done {
                continue;
            }
            if let Some(skipped) = self.skipping.take() {
                if let Some(answer) = skipped.answer(self.max) {
                    return Some(answer);
                }
                continue;
            }
            let parsed = parse_line(&self.line, &self.calls);
            self.line.clear();
            if self.line.capacity() > KEPT_BUFFER {
                self.line.shrink_to(KEPT_BUFFER);
            }
            if let Some(message) = parsed {
                return Some(message);
            }
        }
    }
}

impl Skipped {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes += chunk.len();
        if self.head.len() < ID_WINDOW {
            let take = (ID_WINDOW - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
        }
        self.tail
            .extend_from_slice(&chunk[chunk.len().saturating_sub(ID_WINDOW)..]);
        if self.tail.len() > ID_WINDOW {
            self.tail.drain(..self.tail.len() - ID_WINDOW);
        }
    }

    /// The error answer for the request this line answered, when its id can be found.
    fn answer(self, max: usize) -> Option<RxJsonRpcMessage<RoleClient>> {
        static HEAD: OnceLock<Regex> = OnceLock::new();
        static TAIL: OnceLock<Regex> = OnceLock::new();
        let id = r#"(-?\d+|"(?:[^"\\]|\\.)*")"#;
        let head = HEAD.get_or_init(|| {
            Regex::new(&format!(
                r#"^\s*\{{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*{id}"#
            ))
            .expect("a valid pattern")
        });
        let tail = TAIL.get_or_init(|| {
            Regex::new(&format!(
                r#""id"\s*:\s*{id}\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}}\s*$"#
            ))
            .expect("a valid pattern")
        });
        let found = head
            .captures(&self.head)
            .or_else(|| tail.captures(&self.tail))
            .and_then(|c| serde_json::from_slice::<serde_json::Value>(&c[1]).ok());
        let Some(id) = found else {
            tracing::error!(
                bytes = self.bytes,
                max,
                "a stdio server sent a message over the size limit; it was dropped"
            );
            return None;
        };
        tracing::warn!(
            bytes = self.bytes,
            max,
            "a stdio server's answer is over the size limit; its request fails"
        );
        serde_json::from_value(serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": MESSAGE_TOO_LARGE_CODE,
                "message": format!("the answer is larger than the service accepts ({max} bytes)"),
                "data": {"limitBytes": max},
            }
        }))
        .ok()
    }
}

/// A message whose answer, if it is one, is read as a tool result.
type ToolCallMessage = JsonRpcMessage<ServerRequest, CallToolResult, ServerNotification>;

/// One message, or `None` for a line that is empty or not a message (logged).
///
/// While calls are unanswered, a line is first read as a tool call's answer: taken when it
/// answers one of them; requests, notifications and errors read this way are taken as they
/// are. Anything else (an answer to another request, a line this reading refuses) is read
/// the general way, as rmcp would, so a call's answer that is not a plain tool result (a
/// task, an input request) comes out just as before.
pub(super) fn parse_line(
    line: &[u8],
    calls: &PendingCalls,
) -> Option<RxJsonRpcMessage<RoleClient>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let any_pending = !calls.set().is_empty();
    if any_pending && let Ok(message) = serde_json::from_slice::<ToolCallMessage>(line) {
        match message {
            JsonRpcMessage::Response(answer) if calls.answered(&answer.id) => {
                return Some(JsonRpcMessage::Response(JsonRpcResponse {
                    jsonrpc: answer.jsonrpc,
                    id: answer.id,
                    result: ServerResult::CallToolResult(answer.result),
                }));
            }
            JsonRpcMessage::Response(_) => {}
            JsonRpcMessage::Request(request) => return Some(JsonRpcMessage::Request(request)),
            JsonRpcMessage::Notification(notification) => {
                return Some(JsonRpcMessage::Notification(notification));
            }
            JsonRpcMessage::Error(error) => {
                if let Some(id) = &error.id {
                    calls.answered(id);
                }
                return Some(JsonRpcMessage::Error(error));
            }
        }
    }
    match serde_json::from_slice(line) {
        Ok(message) => {
            if any_pending && let JsonRpcMessage::Response(JsonRpcResponse { id, .. }) = &message {
                calls.answered(id);
            }
            Some(message)
        }
        Err(error) => {
            tracing::debug!(%error, "ignored a line from a stdio server that is not a message");
            None
        }
    }
}
