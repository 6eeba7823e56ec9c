//! OpenAI-compatible chat completions: request body and streamed chunks.
//!
//! Tool calls arrive as deltas keyed by `index`: the first carries the id and name, the
//! following ones pieces of the arguments string, possibly interleaved between calls.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{ChatRequest, Completion, LlmError, SseEvents, ToolCall, Turn, parse_event};

pub(super) fn request_body(request: &ChatRequest) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for turn in &request.turns {
        match turn {
            Turn::User(text) => messages.push(json!({"role": "user", "content": text})),
            Turn::Assistant { text, calls } => {
                let mut message = json!({
                    "role": "assistant",
                    "content": if text.is_empty() { Value::Null } else { json!(text) },
                });
                if !calls.is_empty() {
                    message["tool_calls"] = calls
                        .iter()
                        .map(|call| {
                            json!({
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments},
                            })
                        })
                        .collect();
                }
                messages.push(message);
            }
            Turn::ToolResults(results) => {
                for result in results {
                    messages.push(json!({
                        "role": "tool",
                        "tool_call_id": result.call_id,
                        "content": result.content,
                    }));
                }
            }
        }
    }
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
    });
    if let Some(max_tokens) = request.max_tokens {
        body["max_tokens"] = json!(max_tokens);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                })
            })
            .collect();
    }
    body
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

pub(super) async fn read_stream(
    mut events: SseEvents,
    on_text: &mut (dyn FnMut(&str) + Send),
) -> Result<Completion, LlmError> {
    let mut completion = Completion::default();
    let mut calls: BTreeMap<u64, PartialCall> = BTreeMap::new();
    let mut done = false;
    while let Some(event) = events.next().await? {
        let data = event.data.trim();
        if data == "[DONE]" {
            done = true;
            break;
        }
        let chunk = parse_event(data)?;
        if let Some(error) = chunk.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("unspecified error");
            return Err(LlmError::Stream(message.to_owned()));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let part = |name: &str| usage.get(name).and_then(Value::as_u64);
            completion.tokens = part("total_tokens")
                .or_else(|| Some(part("prompt_tokens").unwrap_or(0) + part("completion_tokens")?));
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            // Usage-only chunks and keep-alives carry no choice.
            continue;
        };
        let delta = &choice["delta"];
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            completion.text.push_str(text);
            on_text(text);
        }
        if let Some(deltas) = delta.get("tool_calls").and_then(Value::as_array) {
            for (position, piece) in deltas.iter().enumerate() {
                let index = piece
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(position as u64);
                let call = calls.entry(index).or_default();
                if let Some(id) = piece.get("id").and_then(Value::as_str) {
                    call.id = id.to_owned();
                }
                if let Some(name) = piece.pointer("/function/name").and_then(Value::as_str) {
                    call.name.push_str(name);
                }
                if let Some(arguments) =
                    piece.pointer("/function/arguments").and_then(Value::as_str)
                {
                    call.arguments.push_str(arguments);
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            completion.finish_reason = Some(reason.to_owned());
        }
    }
    if !done && completion.finish_reason.is_none() {
        return Err(LlmError::Stream(
            "the stream ended without a finish reason".into(),
        ));
    }
    for (index, call) in calls {
        if call.name.is_empty() {
            return Err(LlmError::BadResponse(format!(
                "tool call #{index} has no function name"
            )));
        }
        completion.calls.push(ToolCall {
            id: if call.id.is_empty() {
                format!("call_{index}")
            } else {
                call.id
            },
            name: call.name,
            arguments: if call.arguments.trim().is_empty() {
                "{}".into()
            } else {
                call.arguments
            },
        });
    }
    Ok(completion)
}
