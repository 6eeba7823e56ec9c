//! Anthropic messages: request body and streamed events.
//!
//! The conversation must alternate user/assistant, tool results travel as `tool_result`
//! blocks of a user message, and a `tool_use` block's input streams as `input_json_delta`
//! pieces of its content block.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{ChatRequest, Completion, LlmError, SseEvents, ToolCall, Turn, parse_event};

pub(super) fn request_body(request: &ChatRequest, max_tokens: u32) -> Value {
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, blocks: Vec<Value>| {
        if blocks.is_empty() {
            return;
        }
        match messages.last_mut() {
            // Consecutive turns of one role become one message, as the API requires.
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    };
    for turn in &request.turns {
        match turn {
            Turn::User(text) => push("user", vec![json!({"type": "text", "text": text})]),
            Turn::Assistant { text, calls } => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for call in calls {
                    let input = match serde_json::from_str::<Value>(&call.arguments) {
                        Ok(object @ Value::Object(_)) => object,
                        _ => json!({}),
                    };
                    blocks.push(json!({
                        "type": "tool_use", "id": call.id, "name": call.name, "input": input,
                    }));
                }
                push("assistant", blocks);
            }
            Turn::ToolResults(results) => push(
                "user",
                results
                    .iter()
                    .map(|result| {
                        json!({
                            "type": "tool_result",
                            "tool_use_id": result.call_id,
                            "content": result.content,
                            "is_error": result.is_error,
                        })
                    })
                    .collect(),
            ),
        }
    }
    let mut body = json!({
        "model": request.model,
        "max_tokens": max_tokens,
        "messages": messages
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect::<Vec<_>>(),
        "stream": true,
    });
    if let Some(system) = &request.system {
        body["system"] = json!(system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters,
                })
            })
            .collect();
    }
    body
}

struct ToolBlock {
    id: String,
    name: String,
    input_json: String,
    /// `input` given whole in `content_block_start` (non-empty only when not streamed).
    initial_input: Value,
}

pub(super) async fn read_stream(
    mut events: SseEvents,
    on_text: &mut (dyn FnMut(&str) + Send),
) -> Result<Completion, LlmError> {
    let mut completion = Completion::default();
    let mut tools: BTreeMap<u64, ToolBlock> = BTreeMap::new();
    let mut stopped = false;
    while let Some(event) = events.next().await? {
        let data = parse_event(&event.data)?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.name.as_deref())
            .unwrap_or_default()
            .to_owned();
        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind.as_str() {
            "content_block_start" => {
                let block = &data["content_block"];
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        tools.insert(
                            index,
                            ToolBlock {
                                id: block["id"].as_str().unwrap_or_default().to_owned(),
                                name: block["name"].as_str().unwrap_or_default().to_owned(),
                                input_json: String::new(),
                                initial_input: block.get("input").cloned().unwrap_or(Value::Null),
                            },
                        );
                    }
                    Some("text") => {
                        if let Some(text) = block.get("text").and_then(Value::as_str)
                            && !text.is_empty()
                        {
                            completion.text.push_str(text);
                            on_text(text);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(text) = delta.get("text").and_then(Value::as_str) {
                            completion.text.push_str(text);
                            on_text(text);
                        }
                    }
                    Some("input_json_delta") => {
                        let piece = delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        match tools.get_mut(&index) {
                            Some(tool) => tool.input_json.push_str(piece),
                            None => {
                                return Err(LlmError::BadResponse(format!(
                                    "input for content block {index}, which is not a tool_use"
                                )));
                            }
                        }
                    }
                    _ => {}
                }
            }
            "message_start" => {
                // The prompt's tokens; the answer's come with `message_delta`.
                if let Some(input) = data
                    .pointer("/message/usage/input_tokens")
                    .and_then(Value::as_u64)
                {
                    completion.tokens = Some(completion.tokens.unwrap_or(0) + input);
                }
            }
            "message_delta" => {
                if let Some(output) = data.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    completion.tokens = Some(completion.tokens.unwrap_or(0) + output);
                }
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    completion.finish_reason = Some(reason.to_owned());
                }
            }
            "message_stop" => {
                stopped = true;
                break;
            }
            "error" => {
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("unspecified error");
                let kind = data
                    .pointer("/error/type")
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                // Nothing streamed yet and the API is overloaded: worth a retry.
                if kind == "overloaded_error" && completion.text.is_empty() && tools.is_empty() {
                    return Err(LlmError::Status {
                        status: 529,
                        message: message.to_owned(),
                    });
                }
                return Err(LlmError::Stream(format!("{kind}: {message}")));
            }
            // content_block_stop, ping.
            _ => {}
        }
    }
    if !stopped {
        return Err(LlmError::Stream(
            "the stream ended before message_stop".into(),
        ));
    }
    for (_, tool) in tools {
        let arguments = if !tool.input_json.trim().is_empty() {
            tool.input_json
        } else if tool.initial_input.is_object() {
            tool.initial_input.to_string()
        } else {
            "{}".into()
        };
        completion.calls.push(ToolCall {
            id: tool.id,
            name: tool.name,
            arguments,
        });
    }
    Ok(completion)
}
