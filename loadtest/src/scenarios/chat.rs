//! `chat`: the agent loop against a scripted OpenAI-compatible model on loopback. Every
//! chat is two rounds: the model first calls the embedded calculator's `add` (streamed as
//! tool-call deltas), then answers in text once it sees the tool result. The figures are
//! the service's own cost per round (history, persistence, tool call, streaming parse),
//! since the scripted model answers at once.

use std::sync::Arc;

use anyhow::{Result, ensure};
use axum::Json;
use axum::response::{IntoResponse, Response};
use mcp_pool::config::{ProviderKind, ProviderSettings};
use serde_json::{Value, json};

use crate::harness::{Service, measure};

const USER: &str = "chatter";
/// Every chat: the tool-call round, then the answer.
const ROUNDS_PER_CHAT: u64 = 2;

fn chunk(delta: Value, finish: Value) -> String {
    let chunk = json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {chunk}\n\n")
}

/// One streamed completion: a tool call (arguments split across deltas) unless the last
/// message is a tool result, then a short text.
async fn complete(Json(body): Json<Value>) -> Response {
    let after_tool = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool");
    let mut events = String::new();
    if after_tool {
        for piece in ["The sum ", "is ", "3."] {
            events += &chunk(json!({"content": piece}), Value::Null);
        }
        events += &chunk(json!({}), json!("stop"));
    } else {
        events += &chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "mcp__calc__add", "arguments": ""}}]}),
            Value::Null,
        );
        for piece in ["{\"a\":", " 1, \"b\"", ": 2}"] {
            events += &chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                Value::Null,
            );
        }
        events += &chunk(json!({}), json!("tool_calls"));
    }
    events += "data: [DONE]\n\n";
    ([("content-type", "text/event-stream")], events).into_response()
}

/// The scripted model on loopback; returns its base URL.
async fn start_model() -> Result<String> {
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(complete));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{address}/v1"))
}

pub async fn run(chats: usize, levels: Vec<usize>, as_json: bool) -> Result<()> {
    let model_url = start_model().await?;
    let service = Arc::new(
        Service::start_with(|settings| {
            settings.llm.providers.insert(
                "scripted".into(),
                ProviderSettings {
                    kind: ProviderKind::Openai,
                    base_url: model_url,
                    api_key_env: String::new(),
                    models: Vec::new(),
                    prompt_mode_models: Vec::new(),
                },
            );
        })
        .await?,
    );
    let calculator = service
        .create_server(
            USER,
            json!({"name": "calc", "type": "embedded", "embedded": "calculator", "autoApproveTools": ["add"]}),
        )
        .await?;
    service.bind(USER, "a1", &[&calculator]).await?;
    let body = Arc::new(json!({
        "assistantId": "a1",
        "message": "What is 1 + 2?",
        "model": {"provider": "scripted", "name": "bench-model"},
    }));

    let mut rows = Vec::new();
    for &concurrency in &levels {
        let (svc, request) = (service.clone(), body.clone());
        let summary = measure(chats, concurrency, move || {
            let (svc, request) = (svc.clone(), request.clone());
            async move {
                let answer = svc
                    .post("/api/chat/message", USER, (*request).clone())
                    .await?;
                ensure!(
                    answer["rounds"] == ROUNDS_PER_CHAT,
                    "unexpected answer: {answer}"
                );
                Ok(())
            }
        })
        .await?;
        rows.push((concurrency, summary));
    }
    service.stop().await?;

    if as_json {
        let rows: Vec<Value> = rows
            .iter()
            .map(|(concurrency, s)| {
                json!({"concurrency": concurrency, "chats": s.to_json(),
                       "rounds_per_s": s.throughput * ROUNDS_PER_CHAT as f64})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "chat: POST /api/chat/message, 2 rounds per chat (a streamed tool call to the embedded \
         calculator, then a streamed answer) against a scripted OpenAI-compatible model"
    );
    println!(
        "{:>5} | {:>8} {:>9} {:>9} {:>9} | {:>9}",
        "conc", "chats/s", "p50", "p90", "p99", "rounds/s"
    );
    for (concurrency, s) in &rows {
        println!(
            "{:>5} | {:>8.0} {:>7.0}us {:>7.0}us {:>7.0}us | {:>9.0}",
            concurrency,
            s.throughput,
            s.p50,
            s.p90,
            s.p99,
            s.throughput * ROUNDS_PER_CHAT as f64
        );
    }
    Ok(())
}
