//! A stored conversation as the model sees it again: the user's messages, each round of
//! each assistant message (its text, its calls, their results) in order.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::{ToolCallRecord, ToolCallStatus};
use crate::llm::{ToolCall, ToolMode, ToolResult, Turn};
use crate::store::StoredMessage;

/// One LLM round of an assistant message, as kept in its metadata.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoundNote {
    /// What the model wrote, as it wrote it (in prompt mode: with its instructions).
    pub text: String,
    pub tool_call_ids: Vec<String>,
}

/// What the agent loop records about an assistant message besides text and calls.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnMetadata {
    pub provider: String,
    pub model: String,
    pub tool_mode: Option<ToolMode>,
    pub rounds: Vec<RoundNote>,
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

/// A tool result as text for the model.
pub(crate) fn result_text(record: &ToolCallRecord) -> String {
    if record.status.is_open() {
        return "The call has no result: it was interrupted.".into();
    }
    match &record.response {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|block| match block.get("text").and_then(Value::as_str) {
                Some(text) if block.get("type").and_then(Value::as_str) == Some("text") => {
                    text.to_owned()
                }
                _ => block.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The model-facing call of a record (the name the model used, the checked arguments).
pub(crate) fn call_of(record: &ToolCallRecord) -> ToolCall {
    ToolCall {
        id: record.id.clone(),
        name: record.display_name.clone(),
        arguments: match &record.arguments {
            Value::String(raw) => raw.clone(),
            other => other.to_string(),
        },
    }
}

/// Results of one round, in the shape the tool mode needs.
pub(crate) fn results_turn(records: &[&ToolCallRecord], mode: ToolMode) -> Turn {
    match mode {
        ToolMode::Native => Turn::ToolResults(
            records
                .iter()
                .map(|record| ToolResult {
                    call_id: record.id.clone(),
                    name: record.display_name.clone(),
                    content: result_text(record),
                    is_error: record.is_error,
                })
                .collect(),
        ),
        ToolMode::Prompt => {
            let mut text = String::from("Tool results:");
            for record in records {
                let outcome = match record.status {
                    ToolCallStatus::Done if !record.is_error => "ok",
                    ToolCallStatus::Cancelled => "not run",
                    _ => "error",
                };
                text.push_str(&format!(
                    "\n\n[{} on {}] ({outcome})\n{}",
                    record.tool_name.as_deref().unwrap_or(&record.display_name),
                    record.server_name.as_deref().unwrap_or("?"),
                    result_text(record)
                ));
            }
            Turn::User(text)
        }
    }
}

/// The turns of one round: what the model said and asked, then the results.
pub(crate) fn round_turns(text: &str, records: &[&ToolCallRecord], mode: ToolMode) -> Vec<Turn> {
    let calls = match mode {
        ToolMode::Native => records.iter().map(|r| call_of(r)).collect(),
        ToolMode::Prompt => Vec::new(),
    };
    if text.is_empty() && records.is_empty() {
        return Vec::new();
    }
    let mut turns = vec![Turn::Assistant {
        text: text.to_owned(),
        calls,
    }];
    if !records.is_empty() {
        turns.push(results_turn(records, mode));
    }
    turns
}

/// Replays stored messages as turns.
pub(crate) fn turns_from_history(messages: &[StoredMessage], mode: ToolMode) -> Vec<Turn> {
    let mut turns = Vec::new();
    for message in messages {
        match message.role.as_str() {
            "user" => turns.push(Turn::User(message.content.clone())),
            "assistant" => {
                let rounds = message
                    .metadata
                    .as_ref()
                    .and_then(|m| serde_json::from_value::<TurnMetadata>(m.clone()).ok())
                    .map(|m| m.rounds)
                    .filter(|rounds| !rounds.is_empty())
                    .unwrap_or_else(|| {
                        // Written by the tool-calls API: one round holding everything.
                        vec![RoundNote {
                            text: message.content.clone(),
                            tool_call_ids: message
                                .tool_calls
                                .iter()
                                .map(|c| c.id.clone())
                                .collect(),
                        }]
                    });
                for round in rounds {
                    let records: Vec<&ToolCallRecord> = round
                        .tool_call_ids
                        .iter()
                        .filter_map(|id| message.tool_calls.iter().find(|c| &c.id == id))
                        .collect();
                    turns.extend(round_turns(&round.text, &records, mode));
                }
            }
            _ => {}
        }
    }
    turns
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(id: &str, status: ToolCallStatus, response: Value) -> ToolCallRecord {
        ToolCallRecord {
            id: id.into(),
            server_id: None,
            server_name: Some("fx".into()),
            tool_name: Some("echo".into()),
            display_name: "mcp__fx__echo".into(),
            arguments: json!({"text": "hi"}),
            status,
            response,
            is_error: status != ToolCallStatus::Done,
        }
    }

    fn message(
        role: &str,
        content: &str,
        calls: Vec<ToolCallRecord>,
        meta: Option<Value>,
    ) -> StoredMessage {
        StoredMessage {
            id: uuid::Uuid::now_v7(),
            user_id: crate::domain::UserId::parse("u").unwrap(),
            conversation_id: None,
            role: role.into(),
            content: content.into(),
            tool_calls: calls,
            metadata: meta,
            owner_instance: None,
            created_at: crate::domain::now(),
            updated_at: crate::domain::now(),
            origins: Default::default(),
        }
    }

    #[test]
    fn rounds_are_replayed_in_order_with_their_results() {
        let meta = json!({
            "provider": "p", "model": "m", "toolMode": "native", "finishReason": "stop",
            "rounds": [
                {"text": "let me look", "toolCallIds": ["a"]},
                {"text": "", "toolCallIds": ["b"]},
                {"text": "done", "toolCallIds": []},
            ],
        });
        let history = vec![
            message("user", "question", vec![], None),
            message(
                "assistant",
                "let me look\n\ndone",
                vec![
                    record(
                        "a",
                        ToolCallStatus::Done,
                        json!([{"type": "text", "text": "hi"}]),
                    ),
                    record(
                        "b",
                        ToolCallStatus::Cancelled,
                        json!("The user rejected this tool call."),
                    ),
                ],
                Some(meta),
            ),
        ];
        let turns = turns_from_history(&history, ToolMode::Native);
        let shape: Vec<String> = turns
            .iter()
            .map(|t| match t {
                Turn::User(text) => format!("user:{text}"),
                Turn::Assistant { text, calls } => format!("assistant:{text}:{}", calls.len()),
                Turn::ToolResults(results) => format!(
                    "results:{}",
                    results
                        .iter()
                        .map(|r| r.content.as_str())
                        .collect::<Vec<_>>()
                        .join("|")
                ),
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                "user:question",
                "assistant:let me look:1",
                "results:hi",
                "assistant::1",
                "results:The user rejected this tool call.",
                "assistant:done:0",
            ]
        );
        let prompt = turns_from_history(&history, ToolMode::Prompt);
        assert!(
            matches!(&prompt[2], Turn::User(text) if text.starts_with("Tool results:") && text.contains("(ok)\nhi"))
        );
    }
}
