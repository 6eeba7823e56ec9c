//! The model's tool calls for one message (seed 001): resolve each name through the
//! assistant's table, check its arguments, then run it at once (auto-approved) or park it
//! for the user's decision.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::policies::CallDecider;
use super::{AssistantTools, AuditTrail, UpstreamService};
use crate::config::Settings;
use crate::confirm::{Confirmations, ExecOutcome, Execution, Executor, Waited};
use crate::domain::{AssistantId, CallOrigin, ToolCallRecord, ToolCallStatus, UserId};
use crate::error::{Error, Resource, Result};
use crate::store::{AuditEntry, AuditOutcome, Ownership, Store, StoredMessage};

/// One call as the model produced it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelToolCall {
    #[schema(min_length = 1, max_length = 128)]
    pub id: String,
    pub name: String,
    /// An object, or a JSON string of one (OpenAI sends arguments as a string).
    #[serde(default)]
    pub arguments: Value,
}

#[derive(Clone)]
pub struct ToolCallService {
    store: Store,
    settings: Arc<Settings>,
    upstream: UpstreamService,
    confirmations: Confirmations,
    /// Where an admin's decisions on a user's calls are recorded.
    audit: AuditTrail,
}

/// Keeps a tool result within `max_bytes` of JSON, cutting text cleanly and saying so.
pub(crate) fn limit_result(result: &CallToolResult, max_bytes: usize) -> Value {
    let content = serde_json::to_value(&result.content).unwrap_or(Value::Array(Vec::new()));
    let size = json_size(&content);
    if size <= max_bytes {
        return content;
    }
    truncated(&result.content, size, max_bytes)
}

/// [`limit_result`] for a result that goes on as a result (the gateway's answer): sized
/// without building a JSON tree or a buffer, and passed through untouched when it fits.
pub(crate) fn limit_result_in_place(
    mut result: CallToolResult,
    max_bytes: usize,
) -> CallToolResult {
    let size = json_size(&result.content);
    if size > max_bytes {
        result.content = serde_json::from_value(truncated(&result.content, size, max_bytes))
            .unwrap_or_else(|_| vec![ContentBlock::text("(unreadable result)")]);
    }
    result
}

/// Bytes of `value` as JSON, counted as it is written, nothing kept.
fn json_size(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The text of `content` cut to fit `max_bytes` of JSON, with a marker saying so.
fn truncated(content: &[ContentBlock], size: usize, max_bytes: usize) -> Value {
    let text: String = content
        .iter()
        .filter_map(|block| serde_json::to_value(block).ok())
        .filter_map(|block| block.get("text").and_then(Value::as_str).map(str::to_owned))
        .collect::<Vec<_>>()
        .join("\n");
    let marker = format!("\n[truncated: the result was {size} bytes, the limit is {max_bytes}]");
    let shaped =
        |cut: usize| json!([{"type": "text", "text": format!("{}{marker}", &text[..cut])}]);
    // Escaping can make the JSON longer than the text: shrink until it fits.
    let mut cut = max_bytes.min(text.len());
    loop {
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let limited = shaped(cut);
        let size = json_size(&limited);
        if cut == 0 || size <= max_bytes {
            return limited;
        }
        cut = cut.saturating_sub((size - max_bytes).max(1));
    }
}

/// Runs approved calls through the pool; every failure becomes a result the model can read.
pub(crate) fn executor(upstream: UpstreamService, max_result_bytes: usize) -> Executor {
    Arc::new(
        move |Execution {
                  user,
                  server,
                  tool,
                  arguments,
                  scope,
                  origin,
              }| {
            let upstream = upstream.clone();
            Box::pin(async move {
                let started = Instant::now();
                let outcome = match upstream
                    .call_tool(
                        &user,
                        &server.to_string(),
                        &tool,
                        arguments,
                        scope.as_deref(),
                        origin,
                    )
                    .await
                {
                    Ok(report) => ExecOutcome {
                        response: limit_result(&report.outcome.result, max_result_bytes),
                        is_error: report.outcome.result.is_error.unwrap_or(false),
                        error_code: None,
                        latency: report.latency,
                    },
                    Err(error) => ExecOutcome {
                        response: Value::String(error.to_string()),
                        is_error: true,
                        error_code: Some(error.code().to_owned()),
                        latency: started.elapsed(),
                    },
                };
                tracing::info!(
                    %user, %server, %tool,
                    is_error = outcome.is_error,
                    error_code = outcome.error_code.as_deref(),
                    latency_ms = outcome.latency.as_millis() as u64,
                    "tool call executed"
                );
                outcome
            })
        },
    )
}

fn parse_message_id(raw: &str) -> Result<Uuid> {
    Uuid::parse_str(raw).map_err(|_| Error::NotFound(Resource::Message, raw.to_owned()))
}

fn failed(call: &ModelToolCall, arguments: Value, reason: Value) -> ToolCallRecord {
    ToolCallRecord {
        id: call.id.clone(),
        server_id: None,
        server_name: None,
        tool_name: None,
        display_name: call.name.clone(),
        arguments,
        status: ToolCallStatus::Error,
        response: reason,
        is_error: true,
    }
}

/// The arguments as an object, or why they are not one.
fn object_arguments(call: &ModelToolCall) -> std::result::Result<Value, Value> {
    match &call.arguments {
        Value::Null => Ok(json!({})),
        Value::String(text) if text.trim().is_empty() => Ok(json!({})),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(parsed @ Value::Object(_)) => Ok(parsed),
            _ => Err(call.arguments.clone()),
        },
        object @ Value::Object(_) => Ok(object.clone()),
        other => Err(other.clone()),
    }
}

/// Resolves each call through the assistant's tools and checks its arguments and the
/// operator's rules: a record ready to run (auto-approved, and no rule wants approval), to
/// park (pending), or already failed with a reason the model can read (a rule denies it).
pub fn plan_calls(
    listing: &AssistantTools,
    calls: &[ModelToolCall],
    decider: &CallDecider,
) -> Vec<ToolCallRecord> {
    calls
        .iter()
        .map(|call| {
            let arguments = match object_arguments(call) {
                Ok(arguments) => arguments,
                Err(raw) => {
                    return failed(call, raw, json!("The arguments are not a JSON object."));
                }
            };
            let Some(tool) = listing.resolve(&call.name) else {
                return failed(
                    call,
                    arguments,
                    json!(format!("Unknown or disabled tool '{}'.", call.name)),
                );
            };
            if let Err(problems) = tool.catalog.validate(&tool.tool.name, &arguments) {
                return failed(
                    call,
                    arguments,
                    json!({"error": "The arguments do not match the tool's input schema.", "details": problems}),
                );
            }
            let decision = decider.decide(&tool.server.server, &tool.tool, Some(&arguments));
            if decision.is_denied()
                && let Some(refusal) = decider.refusal(&decision)
            {
                return failed(call, arguments, json!(format!("{}: {refusal}", refusal.code())));
            }
            let spec = &tool.server.server.spec;
            let auto = !decision.requires_approval()
                && spec.auto_approve_tools.iter().any(|t| *t == tool.tool.name);
            ToolCallRecord {
                id: call.id.clone(),
                server_id: Some(tool.server.server.id),
                server_name: Some(spec.name.as_str().to_owned()),
                tool_name: Some(tool.tool.name.to_string()),
                display_name: call.name.clone(),
                arguments,
                status: if auto {
                    ToolCallStatus::Invoking
                } else {
                    ToolCallStatus::Pending
                },
                response: Value::Null,
                is_error: false,
            }
        })
        .collect()
}

/// Where search mode (`toolExposure: search`) plans a model's calls: which assistant's
/// tools it searches, and the names found so far, which the model is offered from then on.
pub struct SearchMode<'a> {
    pub upstream: &'a UpstreamService,
    pub user: &'a UserId,
    pub assistant: &'a AssistantId,
    pub found: &'a mut std::collections::BTreeSet<String>,
}

/// [`plan_calls`] in search mode: `search_tools` is answered here, `call_tool` becomes
/// the call of the tool it names (approval and rules key on that tool), and a found
/// tool called by its own name is planned as usual.
pub async fn plan_search_mode_calls(
    listing: &AssistantTools,
    calls: &[ModelToolCall],
    decider: &CallDecider,
    search: SearchMode<'_>,
) -> Vec<ToolCallRecord> {
    use crate::domain::tool_search::{CALL_TOOL, SEARCH_TOOLS};
    let mut records: Vec<Option<ToolCallRecord>> = Vec::with_capacity(calls.len());
    let mut to_plan = Vec::new();
    for call in calls {
        let arguments = match object_arguments(call) {
            Ok(Value::Object(arguments)) => arguments,
            Ok(_) | Err(_) => {
                records.push(Some(failed(
                    call,
                    call.arguments.clone(),
                    json!("The arguments are not a JSON object."),
                )));
                continue;
            }
        };
        match call.name.as_str() {
            SEARCH_TOOLS => {
                let answer = async {
                    let asked = super::SearchArguments::of(arguments.clone())?;
                    let ranked = search
                        .upstream
                        .rank_tools(
                            search.user,
                            search.assistant,
                            super::Audience::Model,
                            listing,
                            &asked.query,
                            asked.limit,
                        )
                        .await?;
                    for found in &ranked {
                        search
                            .found
                            .insert(listing.tools[found.position].name.clone());
                    }
                    Ok::<_, crate::error::Error>(super::found_tools(listing, &ranked, |i| {
                        Some(listing.tools[i].name.as_str())
                    }))
                }
                .await;
                records.push(Some(match answer {
                    Ok(found) => ToolCallRecord {
                        status: ToolCallStatus::Done,
                        response: Value::String(found.to_string()),
                        is_error: false,
                        ..failed(call, Value::Object(arguments), Value::Null)
                    },
                    Err(error) => failed(call, Value::Object(arguments), json!(error.to_string())),
                }));
            }
            CALL_TOOL => match super::called_through(arguments.clone()) {
                Ok((name, inner)) => {
                    search.found.insert(name.clone());
                    records.push(None);
                    to_plan.push(ModelToolCall {
                        id: call.id.clone(),
                        name,
                        arguments: Value::Object(inner.unwrap_or_default()),
                    });
                }
                Err(error) => records.push(Some(failed(
                    call,
                    Value::Object(arguments),
                    json!(error.to_string()),
                ))),
            },
            _ => {
                records.push(None);
                to_plan.push(call.clone());
            }
        }
    }
    let mut planned = plan_calls(listing, &to_plan, decider).into_iter();
    records
        .into_iter()
        .map(|record| record.or_else(|| planned.next()).expect("a planned call"))
        .collect()
}

impl ToolCallService {
    pub fn new(
        store: Store,
        settings: Arc<Settings>,
        upstream: UpstreamService,
        confirmations: Confirmations,
        audit: AuditTrail,
    ) -> Self {
        Self {
            store,
            settings,
            upstream,
            confirmations,
            audit,
        }
    }

    pub async fn submit(
        &self,
        user: &UserId,
        message_id: &str,
        assistant: &AssistantId,
        conversation: Option<Uuid>,
        calls: Vec<ModelToolCall>,
        origin: CallOrigin,
    ) -> Result<Vec<ToolCallRecord>> {
        let message = Uuid::parse_str(message_id)
            .map_err(|_| Error::validation("the message id must be a UUID"))?;
        let max = self.settings.limits.max_tool_calls_per_request;
        if calls.is_empty() || calls.len() > max {
            return Err(Error::validation(format!(
                "calls must hold 1 to {max} tool calls"
            )));
        }
        for call in &calls {
            if call.id.is_empty() || call.id.len() > 128 || call.id.chars().any(char::is_control) {
                return Err(Error::validation(
                    "each call id must be 1 to 128 characters",
                ));
            }
        }
        if let Some(conversation) = conversation {
            match self
                .store
                .conversations()
                .ownership(user, conversation)
                .await?
            {
                Ownership::Mine => {}
                Ownership::Others => {
                    return Err(Error::NotFound(
                        Resource::Conversation,
                        conversation.to_string(),
                    ));
                }
                Ownership::Missing => {
                    self.store
                        .conversations()
                        .insert(user, conversation, Some(assistant.as_str()))
                        .await?;
                }
            }
        }
        let listing = self.upstream.assistant_tools(user, assistant).await?;
        let decider = self
            .upstream
            .policies()
            .decider(user, crate::domain::CallVia::Chat)
            .await?;
        let records = plan_calls(&listing, &calls, &decider);
        self.confirmations
            .submit(user, message, conversation, None, records, origin)
            .await
    }

    pub async fn confirm(
        &self,
        user: &UserId,
        message_id: &str,
        call_id: &str,
        approved: bool,
        admin: Option<Uuid>,
    ) -> Result<ToolCallRecord> {
        let message = parse_message_id(message_id)?;
        let record = self
            .confirmations
            .confirm(user, message, call_id, approved)
            .await?;
        if let Some(admin) = admin {
            // Support decisions on a user's behalf are the admin's, on the record.
            let outcome = if approved {
                AuditOutcome::Approved
            } else {
                AuditOutcome::Rejected
            };
            let mut entry = AuditEntry::new(
                user,
                outcome,
                record.server_name.as_deref().unwrap_or_default(),
                record.tool_name.as_deref().unwrap_or_default(),
            );
            entry.server_id = record.server_id;
            entry.message_id = Some(message);
            entry.decided_by = Some(admin.to_string());
            self.audit.record(entry);
        }
        Ok(record)
    }

    /// Waits (bounded by `confirmation.max_wait_secs`) until the message has no open call.
    pub async fn wait(&self, user: &UserId, message_id: &str, seconds: u64) -> Result<Waited> {
        let message = parse_message_id(message_id)?;
        let wait = Duration::from_secs(seconds.min(self.settings.confirmation.max_wait_secs));
        self.confirmations.wait_settled(user, message, wait).await
    }

    pub async fn message(&self, user: &UserId, message_id: &str) -> Result<StoredMessage> {
        let message = parse_message_id(message_id)?;
        self.store
            .messages()
            .get(user, message)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::Message, message_id.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolResult, ContentBlock};

    use super::{limit_result, limit_result_in_place};

    #[test]
    fn both_limits_agree_and_a_fitting_result_passes_untouched() {
        let small = CallToolResult::success(vec![ContentBlock::text("short \"quoted\" é")]);
        assert_eq!(
            serde_json::to_value(&limit_result_in_place(small.clone(), 1000).content).unwrap(),
            limit_result(&small, 1000)
        );
        assert_eq!(limit_result_in_place(small.clone(), 1000), small);
        let big = CallToolResult::success(vec![ContentBlock::text("é\"x".repeat(400))]);
        let cut = limit_result_in_place(big.clone(), 300);
        let json = serde_json::to_value(&cut.content).unwrap();
        assert_eq!(json, limit_result(&big, 300));
        assert!(json.to_string().len() <= 300, "{json}");
        assert!(
            json.to_string().contains("[truncated: the result was"),
            "{json}"
        );
    }
}
