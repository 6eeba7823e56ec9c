//! A server's sampling requests (`sampling/createMessage`) during a REST, chat, gRPC or
//! approved call, under the server's `sampling` policy: `deny` (the default) refuses
//! them, `ask` parks each for its user (`mcp.sampling.requested` on the event stream,
//! answered with `POST /api/sampling/{id}`, refused when `sampling.timeout_secs` pass),
//! `auto` runs them at once. A request runs on the provider and model the server's
//! policy names, counts against the user's chat-turn rate limit, and asks for at most
//! `llm.max_tokens`. Gateway clients answer their own (see `mcp::downstream`).
//!
//! Text and tool content pass (sampling with tools, 2025-11-25); images and audio are
//! refused rather than dropped, so the model never answers a request it did not see.

// Sampling is deprecated in 2026-07-28 but is what 2025-11-25 servers use.
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rmcp::ErrorData;
use rmcp::model::{CreateMessageRequestParams, CreateMessageResult, ErrorCode};
use serde_json::{Value, json};
use uuid::Uuid;

use super::RateLimits;
use super::parked::forward::Forwarder;
use super::parked::{ParkLimits, Parked};
use crate::cluster::{ParkedFailure, ParkedKind};
use crate::domain::{SamplingPolicy, SamplingSettings, UserId};
use crate::error::{Error, Resource, Result};
use crate::events::EventHub;
use crate::llm::{ChatRequest, LlmClient, ToolCall, ToolResult, ToolSpec, Turn};

/// The code MCP's specification uses for a refused sampling request.
const REFUSED: ErrorCode = ErrorCode(-1);

/// The sampling requests of this instance's calls.
#[derive(Clone)]
pub struct Sampling {
    parked: Parked<(), bool>,
    events: Arc<EventHub>,
    llm: LlmClient,
    rate_limits: Arc<RateLimits>,
    timeout: Duration,
    limits: ParkLimits,
    max_tokens: u32,
    max_prompt_bytes: usize,
    /// Decisions on requests another instance holds go there.
    forward: Forwarder,
    /// The operator's `samplingTokens` quotas.
    policies: Option<super::Policies>,
}

/// How a server's sampling requests are bounded.
pub struct SamplingLimits {
    /// Unapproved requests are refused after this.
    pub timeout: Duration,
    pub parked: ParkLimits,
    pub max_tokens: u32,
    pub max_prompt_bytes: usize,
}

impl Sampling {
    pub fn new(
        events: Arc<EventHub>,
        llm: LlmClient,
        rate_limits: Arc<RateLimits>,
        limits: SamplingLimits,
        forward: Forwarder,
    ) -> Self {
        Self {
            parked: Parked::new(forward.me()),
            forward,
            events,
            llm,
            rate_limits,
            timeout: limits.timeout,
            limits: limits.parked,
            max_tokens: limits.max_tokens,
            max_prompt_bytes: limits.max_prompt_bytes,
            policies: None,
        }
    }

    /// Counts the tokens of the requests it runs against the operator's quotas.
    pub fn counted_by(self, policies: super::Policies) -> Self {
        Self {
            policies: Some(policies),
            ..self
        }
    }

    /// `POST /api/sampling/{id}`: `approve` or `reject`. A request another instance holds
    /// is decided there.
    pub async fn answer(&self, user: &UserId, id: &str, action: &str) -> Result<()> {
        let approved = match action {
            "approve" => true,
            "reject" => false,
            other => {
                return Err(Error::validation(format!(
                    "action '{other}' is not one of approve, reject"
                )));
            }
        };
        if let Some(outcome) = self.parked.answer(user, id, |_| Ok(approved)) {
            return outcome;
        }
        self.forward
            .forward(
                user,
                ParkedKind::Sampling,
                id,
                serde_json::json!({"approved": approved}),
            )
            .await
            .unwrap_or_else(|| Err(Error::NotFound(Resource::SamplingRequest, id.to_owned())))
    }

    /// A decision another instance forwarded here.
    pub(crate) fn answer_forwarded(
        &self,
        user: &UserId,
        id: &str,
        sent: serde_json::Value,
    ) -> std::result::Result<(), ParkedFailure> {
        let Some(approved) = sent["approved"].as_bool() else {
            return Err(ParkedFailure::Refused("an unreadable decision".into()));
        };
        ParkedFailure::verdict(self.parked.answer(user, id, |_| Ok(approved)))
    }

    /// Handles one request of `user`'s `server` under its policy.
    pub async fn handle(
        &self,
        user: &UserId,
        server: Uuid,
        policy: &SamplingSettings,
        params: CreateMessageRequestParams,
    ) -> std::result::Result<CreateMessageResult, ErrorData> {
        let (provider, model) = match (policy.policy, &policy.provider, &policy.model) {
            (SamplingPolicy::Deny, ..) => {
                return Err(refused(
                    "sampling is denied for this server (its sampling policy is deny)",
                ));
            }
            (_, Some(provider), Some(model)) => (provider.as_str(), model.as_str()),
            _ => return Err(refused("this server's sampling policy names no model")),
        };
        let params = serde_json::to_value(&params)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let prompt_bytes = ["messages", "systemPrompt", "tools"]
            .iter()
            .map(|field| serde_json::to_vec(&params[*field]).map_or(0, |bytes| bytes.len()))
            .sum::<usize>();
        if prompt_bytes > self.max_prompt_bytes {
            return Err(ErrorData::invalid_params(
                format!(
                    "the sampling prompt is {prompt_bytes} bytes; this service samples at most {} (sampling.max_prompt_bytes)",
                    self.max_prompt_bytes
                ),
                None,
            ));
        }
        let mut request = chat_request(model, &params)?;
        request.max_tokens = Some(params["maxTokens"].as_u64().map_or(self.max_tokens, |n| {
            n.min(u64::from(self.max_tokens)) as u32
        }));
        // The operator's token quotas first: a user out of tokens is not asked.
        let counts = match &self.policies {
            Some(policies) => policies
                .sampling_allowance(user)
                .await
                .map_err(|e| refused(&format!("sampling request refused: {e}")))?,
            None => Vec::new(),
        };
        // A chat turn of its user's: counted before the model runs, and for `ask` once
        // the request is parked, before the user is asked (a refused one costs nothing).
        if policy.policy == SamplingPolicy::Ask {
            self.ask(user, server, provider, model, &params).await?;
        } else {
            self.rate_limits
                .chat_turn(user)
                .map_err(|e| refused(&e.to_string()))?;
        }
        let handle = self
            .llm
            .model(provider, model, Some(crate::llm::ToolMode::Native))
            .map_err(|e| refused(&format!("sampling cannot run: {e}")))?;
        let completion = handle
            .complete(&request, &mut |_| {})
            .await
            .map_err(|e| ErrorData::internal_error(format!("sampling failed: {e}"), None))?;
        if let (Some(policies), false) = (&self.policies, counts.is_empty()) {
            // The provider's count, else about four bytes a token of prompt and answer.
            let tokens = completion.tokens.unwrap_or_else(|| {
                let answered = completion.text.len()
                    + completion
                        .calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>();
                (prompt_bytes + answered).div_ceil(4) as u64
            });
            policies.count_sampling(&counts, tokens).await;
        }
        tracing::info!(user = %user, %server, provider, model, "ran a sampling request");
        result(model, completion)
    }

    /// Parks the request until its user approves it; an error when they reject it or
    /// nobody answers in time.
    async fn ask(
        &self,
        user: &UserId,
        server: Uuid,
        provider: &str,
        model: &str,
        params: &Value,
    ) -> std::result::Result<(), ErrorData> {
        let waiting = self
            .parked
            .park(user, server, (), self.limits)
            .map_err(|refusal| refused(&format!("sampling request refused: {refusal}")))?;
        // Refused here, the request leaves the parked ones as `waiting` is dropped.
        self.rate_limits
            .chat_turn(user)
            .map_err(|e| refused(&e.to_string()))?;
        let id = waiting.id;
        let expires_at: DateTime<Utc> =
            Utc::now() + chrono::Duration::from_std(self.timeout).unwrap_or_default();
        self.events.publish(
            user,
            "mcp.sampling.requested",
            json!({
                "id": id,
                "serverId": server,
                "provider": provider,
                "model": model,
                "messages": params["messages"],
                "systemPrompt": params["systemPrompt"],
                "maxTokens": params["maxTokens"],
                "tools": params["tools"],
                "expiresAt": expires_at,
            }),
        );
        let approved = self.parked.wait(waiting, self.timeout).await;
        let outcome = match approved {
            Some(true) => "approved",
            Some(false) => "rejected",
            None => "expired",
        };
        self.events.publish(
            user,
            "mcp.sampling.completed",
            json!({"id": id, "serverId": server, "outcome": outcome}),
        );
        match approved {
            Some(true) => Ok(()),
            Some(false) => Err(refused("the user rejected the sampling request")),
            None => Err(refused(
                "the user did not answer the sampling request in time",
            )),
        }
    }
}

fn refused(message: &str) -> ErrorData {
    ErrorData::new(REFUSED, message.to_owned(), None)
}

fn unsupported(what: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("{what} content cannot be sampled here: only text and tool content pass"),
        None,
    )
}

/// The request in the provider-neutral shape of [`crate::llm`].
fn chat_request(model: &str, params: &Value) -> std::result::Result<ChatRequest, ErrorData> {
    let mut turns = Vec::new();
    // Tool results name only the call; the model's providers want the tool's name too.
    let mut called: std::collections::HashMap<String, String> = Default::default();
    for message in params["messages"].as_array().into_iter().flatten() {
        let blocks = match &message["content"] {
            Value::Array(blocks) => blocks.clone(),
            block => vec![block.clone()],
        };
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut results = Vec::new();
        for block in &blocks {
            match block["type"].as_str().unwrap_or_default() {
                "text" => text.push_str(block["text"].as_str().unwrap_or_default()),
                "tool_use" => {
                    let id = block["id"].as_str().unwrap_or_default().to_owned();
                    let name = block["name"].as_str().unwrap_or_default().to_owned();
                    called.insert(id.clone(), name.clone());
                    calls.push(ToolCall {
                        id,
                        name,
                        arguments: block["input"].to_string(),
                    });
                }
                "tool_result" => {
                    let call_id = block["toolUseId"].as_str().unwrap_or_default().to_owned();
                    let content = block["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n");
                    results.push(ToolResult {
                        name: called.get(&call_id).cloned().unwrap_or_default(),
                        call_id,
                        content,
                        is_error: block["isError"].as_bool().unwrap_or(false),
                    });
                }
                other => return Err(unsupported(other)),
            }
        }
        match message["role"].as_str() {
            Some("assistant") => turns.push(Turn::Assistant { text, calls }),
            _ if !results.is_empty() => turns.push(Turn::ToolResults(results)),
            _ => turns.push(Turn::User(text)),
        }
    }
    if turns.is_empty() {
        return Err(ErrorData::invalid_params(
            "a sampling request needs messages",
            None,
        ));
    }
    let offered = params["toolChoice"]["mode"].as_str() != Some("none");
    let tools = params["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|_| offered)
        .map(|tool| ToolSpec {
            name: tool["name"].as_str().unwrap_or_default().to_owned(),
            description: tool["description"].as_str().unwrap_or_default().to_owned(),
            parameters: tool["inputSchema"].clone(),
        })
        .collect();
    Ok(ChatRequest {
        model: model.to_owned(),
        system: params["systemPrompt"].as_str().map(str::to_owned),
        turns,
        tools,
        max_tokens: None,
    })
}

/// The model's answer as MCP's `CreateMessageResult`.
fn result(
    model: &str,
    completion: crate::llm::Completion,
) -> std::result::Result<CreateMessageResult, ErrorData> {
    let stop_reason = if !completion.calls.is_empty() {
        "toolUse"
    } else {
        match completion.finish_reason.as_deref() {
            Some("length" | "max_tokens") => "maxTokens",
            Some("stop_sequence") => "stopSequence",
            _ => "endTurn",
        }
    };
    let content = if completion.calls.is_empty() {
        json!({"type": "text", "text": completion.text})
    } else {
        let mut blocks = Vec::new();
        if !completion.text.is_empty() {
            blocks.push(json!({"type": "text", "text": completion.text}));
        }
        for call in &completion.calls {
            let input: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
            blocks.push(
                json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}),
            );
        }
        Value::Array(blocks)
    };
    serde_json::from_value(json!({
        "model": model,
        "stopReason": stop_reason,
        "role": "assistant",
        "content": content,
    }))
    .map_err(|e| ErrorData::internal_error(format!("sampling result: {e}"), None))
}
