//! Scripted LLM providers on loopback: an OpenAI-compatible and an Anthropic-compatible
//! HTTP endpoint that answer each request with the next scripted reply, streamed in the
//! providers' real wire formats (SSE chunks, tool-call deltas split across chunks), and
//! keep every request body so tests can check what the model was told.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use mcp_pool::Settings;
use mcp_pool::config::{ProviderKind, ProviderSettings};

/// One scripted answer.
#[derive(Clone)]
pub enum Reply {
    /// SSE events (each already `data: …\n\n` or `event: …\ndata: …\n\n`), sent with a
    /// short pause between them so they arrive as separate chunks.
    Stream(Vec<String>),
    /// An error status with a JSON body and an optional Retry-After.
    Status(u16, Value, Option<u64>),
    /// These events, then silence with the connection held open.
    Stall(Vec<String>),
}

#[derive(Default)]
struct Script {
    replies: VecDeque<Reply>,
    requests: Vec<(String, HeaderMap, Value)>,
}

pub struct ScriptedLlm {
    pub base_url: String,
    kind: ProviderKind,
    script: Arc<Mutex<Script>>,
    server: JoinHandle<()>,
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn answer(
    State(script): State<Arc<Mutex<Script>>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = {
        let mut script = script.lock().unwrap();
        script.requests.push((uri.path().to_owned(), headers, body));
        script.replies.pop_front()
    };
    match reply {
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the test script has no reply left",
        )
            .into_response(),
        Some(Reply::Status(status, body, retry_after)) => {
            let mut response = (
                StatusCode::from_u16(status).unwrap(),
                [("content-type", "application/json")],
                body.to_string(),
            )
                .into_response();
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", seconds.to_string().parse().unwrap());
            }
            response
        }
        Some(Reply::Stream(events)) => event_stream(events, false),
        Some(Reply::Stall(events)) => event_stream(events, true),
    }
}

fn event_stream(events: Vec<String>, stall: bool) -> Response {
    let stream = futures::stream::iter(events).then(|event| async move {
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok::<_, Infallible>(Bytes::from(event))
    });
    let body = if stall {
        Body::from_stream(stream.chain(futures::stream::pending()))
    } else {
        Body::from_stream(stream)
    };
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap()
}

impl ScriptedLlm {
    pub async fn start(kind: ProviderKind) -> Self {
        let script = Arc::new(Mutex::new(Script::default()));
        let app = Router::new()
            .fallback(axum::routing::post(answer))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        let base_url = match kind {
            ProviderKind::Openai => format!("http://{address}/v1"),
            ProviderKind::Anthropic => format!("http://{address}"),
        };
        Self {
            base_url,
            kind,
            script,
            server,
        }
    }

    pub async fn openai() -> Self {
        Self::start(ProviderKind::Openai).await
    }

    pub async fn anthropic() -> Self {
        Self::start(ProviderKind::Anthropic).await
    }

    /// Registers this endpoint as provider `name` (no API key; prompt-mode models listed).
    pub fn configure(&self, settings: &mut Settings, name: &str, prompt_mode_models: &[&str]) {
        settings.llm.providers.insert(
            name.to_owned(),
            ProviderSettings {
                kind: self.kind,
                base_url: self.base_url.clone(),
                api_key_env: String::new(),
                models: Vec::new(),
                prompt_mode_models: prompt_mode_models.iter().map(|m| m.to_string()).collect(),
            },
        );
        settings.llm.retry_base_delay_ms = 10;
    }

    pub fn push(&self, reply: Reply) {
        self.script.lock().unwrap().replies.push_back(reply);
    }

    /// Bodies of the requests received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.script
            .lock()
            .unwrap()
            .requests
            .iter()
            .map(|(_, _, body)| body.clone())
            .collect()
    }

    pub fn paths(&self) -> Vec<String> {
        self.script
            .lock()
            .unwrap()
            .requests
            .iter()
            .map(|(path, _, _)| path.clone())
            .collect()
    }
}

fn data(value: Value) -> String {
    format!("data: {value}\n\n")
}

/// Splits text into pieces of at most `size` characters.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// The events of [`openai_text`].
pub fn openai_text_events(text: &str) -> Vec<String> {
    match openai_text(text) {
        Reply::Stream(events) => events,
        _ => unreachable!(),
    }
}

/// OpenAI: a plain answer streamed in pieces.
pub fn openai_text(text: &str) -> Reply {
    let mut events = vec![data(json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}],
    }))];
    for piece in pieces(text, 4) {
        events.push(data(json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}],
        })));
    }
    events.push(data(json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    })));
    events.push(data(
        json!({"id": "chatcmpl-1", "choices": [], "usage": {"total_tokens": 9}}),
    ));
    events.push("data: [DONE]\n\n".into());
    Reply::Stream(events)
}

/// OpenAI: tool calls (id, name, arguments), their argument strings split into small
/// deltas and interleaved between the calls, after an optional text.
pub fn openai_tool_calls(text: &str, calls: &[(&str, &str, Value)]) -> Reply {
    let chunk = |delta: Value, finish: Value| {
        data(json!({
            "id": "chatcmpl-2", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }))
    };
    let mut events = Vec::new();
    for piece in pieces(text, 5) {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (index, (id, name, _)) in calls.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
    }
    let split: Vec<Vec<String>> = calls
        .iter()
        .map(|(_, _, arguments)| pieces(&arguments.to_string(), 3))
        .collect();
    let longest = split.iter().map(Vec::len).max().unwrap_or(0);
    for step in 0..longest {
        for (index, parts) in split.iter().enumerate() {
            if let Some(part) = parts.get(step) {
                events.push(chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": part}}]}),
                    Value::Null,
                ));
            }
        }
    }
    events.push(chunk(json!({}), json!("tool_calls")));
    events.push("data: [DONE]\n\n".into());
    Reply::Stream(events)
}

fn named(event: &str, value: Value) -> String {
    format!("event: {event}\ndata: {value}\n\n")
}

/// Anthropic: an answer with optional tool_use blocks, inputs streamed as
/// `input_json_delta` pieces.
pub fn anthropic_reply(text: &str, calls: &[(&str, &str, Value)]) -> Reply {
    let mut events = vec![
        named(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "content": [], "model": "claude-test",
                "stop_reason": null, "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        ),
        named("ping", json!({"type": "ping"})),
    ];
    let mut index = 0;
    if !text.is_empty() {
        events.push(named(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
        ));
        for piece in pieces(text, 4) {
            events.push(named(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        events.push(named(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ));
        index += 1;
    }
    for (id, name, input) in calls {
        events.push(named(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ));
        for piece in pieces(&input.to_string(), 4) {
            events.push(named(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        events.push(named(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    events.push(named(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": 7}}),
    ));
    events.push(named("message_stop", json!({"type": "message_stop"})));
    Reply::Stream(events)
}
