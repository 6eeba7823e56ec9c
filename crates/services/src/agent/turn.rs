//! One chat turn, run: rounds of (LLM answer, tool calls, results) until plain text.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::history::{RoundNote, TurnMetadata, round_turns, turns_from_history};
use super::prompt_mode::{self, PromptTool};
use super::{ChatEvent, ChatOutcome, ChatService, FinishReason, RunningGuard};
use crate::confirm::{TOOL_CALL_EVENT, Waited};
use crate::domain::tool_search::search_mode_tools;
use crate::domain::{AssistantId, ToolCallRecord, ToolCallStatus, ToolExposure, UserId};
use crate::error::{Error, Result};
use crate::events::Event;
use crate::llm::{ChatRequest, LlmProgress, ModelHandle, ToolMode, ToolSpec, Turn};
use crate::services::{
    AssistantTool, AssistantTools, ModelToolCall, SearchMode, plan_calls, plan_search_mode_calls,
};
use crate::store::StoredMessage;

pub(super) struct TurnSetup {
    pub user: UserId,
    pub assistant: AssistantId,
    pub conversation: Uuid,
    pub user_message: Uuid,
    pub message: Uuid,
    pub system_prompt: Option<String>,
    pub max_rounds: u32,
    pub model: ModelHandle,
    pub history: Vec<StoredMessage>,
    pub user_text: String,
    pub metadata: TurnMetadata,
    /// Who started the turn: its calls are audited as theirs.
    pub origin: crate::domain::CallOrigin,
    /// Held until the turn ends: the conversation is busy meanwhile.
    pub _running: RunningGuard,
}

/// A turn whose conversation and messages are stored, ready to run.
pub struct PreparedTurn {
    service: ChatService,
    setup: TurnSetup,
}

/// What the turn has produced so far; saved whatever way it ends.
struct Progress {
    content: String,
    records: Vec<ToolCallRecord>,
    metadata: TurnMetadata,
}

type Events = mpsc::UnboundedSender<ChatEvent>;

impl PreparedTurn {
    pub(super) fn new(service: ChatService, setup: TurnSetup) -> Self {
        Self { service, setup }
    }

    pub fn conversation_id(&self) -> Uuid {
        self.setup.conversation
    }

    pub fn message_id(&self) -> Uuid {
        self.setup.message
    }

    /// Runs to the end, reporting on `events`; `cancel` stops it (the client went away).
    pub async fn run(self, events: Events, cancel: CancellationToken) {
        let setup = &self.setup;
        let (_, mut hub) = self.service.events.subscribe(&setup.user, None);
        let mut progress = Progress {
            content: String::new(),
            records: Vec::new(),
            metadata: setup.metadata.clone(),
        };
        let result = tokio::select! {
            result = self.rounds(&events, &mut hub, &mut progress) => result,
            () = cancel.cancelled() => Ok(FinishReason::Cancelled),
        };
        let finish = match &result {
            Ok(finish) => *finish,
            Err(_) => FinishReason::Error,
        };
        if finish == FinishReason::Cancelled {
            let cancelled = self
                .service
                .confirmations
                .cancel_parked(
                    &setup.user,
                    setup.message,
                    "Cancelled: the chat was closed before the call was approved.",
                )
                .await;
            tracing::info!(message = %setup.message, cancelled, "chat turn cancelled by the client");
        }
        progress.metadata.finish_reason = Some(finish.as_str().to_owned());
        if let Err(error) = &result {
            progress.metadata.error = Some(error.summary());
        }
        if let Err(error) = self.save(&progress).await {
            tracing::error!(%error, message = %setup.message, "could not save the chat turn's end");
        }
        forward_tool_events(&mut hub, setup.message, &events);
        // The records as stored: calls that settled after the loop stopped are included.
        let records = match self
            .service
            .store
            .messages()
            .get(&setup.user, setup.message)
            .await
        {
            Ok(Some(message)) => message.tool_calls,
            _ => progress.records,
        };
        let outcome = ChatOutcome {
            conversation_id: setup.conversation,
            user_message_id: setup.user_message,
            message_id: setup.message,
            content: progress.content,
            tool_calls: records,
            finish_reason: finish,
            rounds: progress.metadata.rounds.len() as u32,
        };
        let _ = events.send(match result {
            Ok(_) => ChatEvent::Completed(outcome),
            Err(error) => ChatEvent::Failed { outcome, error },
        });
    }

    async fn save(&self, progress: &Progress) -> Result<()> {
        let metadata = serde_json::to_value(&progress.metadata).unwrap_or(Value::Null);
        self.service
            .store
            .messages()
            .save_content(
                &self.setup.user,
                self.setup.message,
                &progress.content,
                &metadata,
            )
            .await?;
        Ok(())
    }

    async fn rounds(
        &self,
        events: &Events,
        hub: &mut broadcast::Receiver<Arc<Event>>,
        progress: &mut Progress,
    ) -> Result<FinishReason> {
        let setup = &self.setup;
        let service = &self.service;
        let mode = setup.model.tool_mode;
        let mut turns = turns_from_history(&setup.history, mode);
        turns.push(Turn::User(setup.user_text.clone()));
        let mut started = false;
        // Search mode (native tool calls): the model gets `search_tools`, `call_tool`, the
        // pinned tools and those it found, which are kept here from round to round.
        let mut found = (mode == ToolMode::Native
            && service
                .upstream
                .tool_exposure(&setup.user, &setup.assistant)
                .await?
                == ToolExposure::Search)
            .then(BTreeSet::new);
        for round in 1..=setup.max_rounds {
            let listing = service
                .upstream
                .assistant_tools(&setup.user, &setup.assistant)
                .await?;
            if !started {
                started = true;
                let _ = events.send(ChatEvent::Started {
                    conversation_id: setup.conversation,
                    user_message_id: setup.user_message,
                    message_id: setup.message,
                    model: setup.model.model.clone(),
                    tool_mode: mode,
                    unavailable: listing
                        .unavailable
                        .iter()
                        .map(|u| {
                            let mut entry = u.error.summary();
                            entry["serverId"] = json!(u.server_id);
                            entry
                        })
                        .collect(),
                });
            }
            let request = self.request(&listing, &turns, found.as_ref());
            let message_id = setup.message;
            let completion = setup
                .model
                .complete(&request, &mut |step| match step {
                    LlmProgress::Text(text) if mode == ToolMode::Native => {
                        let _ = events.send(ChatEvent::Delta {
                            message_id,
                            text: text.to_owned(),
                        });
                    }
                    LlmProgress::Text(_) => {}
                    LlmProgress::Retrying {
                        attempt,
                        delay,
                        error,
                    } => {
                        let _ = events.send(ChatEvent::Retrying {
                            message_id,
                            attempt,
                            delay_ms: delay.as_millis() as u64,
                            code: error.code(),
                            message: error.to_string(),
                        });
                    }
                })
                .await?;

            let (visible, calls) = match mode {
                ToolMode::Native => (
                    completion.text.clone(),
                    completion
                        .calls
                        .iter()
                        .map(|call| ModelToolCall {
                            id: call.id.clone(),
                            name: call.name.clone(),
                            arguments: Value::String(call.arguments.clone()),
                        })
                        .collect::<Vec<_>>(),
                ),
                ToolMode::Prompt => {
                    let parsed = prompt_mode::parse_reply(&completion.text);
                    if !parsed.text.is_empty() {
                        let _ = events.send(ChatEvent::Delta {
                            message_id,
                            text: parsed.text.clone(),
                        });
                    }
                    let calls = parsed
                        .instructions
                        .into_iter()
                        .map(|instruction| ModelToolCall {
                            id: String::new(),
                            name: model_name(
                                &listing,
                                instruction.server.as_deref(),
                                &instruction.tool,
                            ),
                            arguments: instruction.arguments,
                        })
                        .collect();
                    (parsed.text, calls)
                }
            };
            let calls = self.unique_ids(calls, &progress.records);
            if !visible.is_empty() {
                if !progress.content.is_empty() {
                    progress.content.push_str("\n\n");
                }
                progress.content.push_str(&visible);
            }
            progress.metadata.rounds.push(RoundNote {
                text: completion.text.clone(),
                tool_call_ids: calls.iter().map(|c| c.id.clone()).collect(),
            });
            if calls.is_empty() {
                self.save(progress).await?;
                return Ok(FinishReason::Stop);
            }
            let last_round = round == setup.max_rounds;
            let decider = service
                .upstream
                .policies()
                .decider(&setup.user, crate::domain::CallVia::Chat)
                .await?;
            let mut records = match found.as_mut() {
                Some(found) => {
                    plan_search_mode_calls(
                        &listing,
                        &calls,
                        &decider,
                        SearchMode {
                            upstream: &service.upstream,
                            user: &setup.user,
                            assistant: &setup.assistant,
                            found,
                        },
                    )
                    .await
                }
                None => plan_calls(&listing, &calls, &decider),
            };
            if last_round {
                for record in &mut records {
                    record.status = ToolCallStatus::Cancelled;
                    record.is_error = true;
                    record.response = json!(format!(
                        "Not run: this turn reached its limit of {} tool rounds.",
                        setup.max_rounds
                    ));
                }
            }
            self.save(progress).await?;
            service
                .confirmations
                .submit(
                    &setup.user,
                    setup.message,
                    Some(setup.conversation),
                    None,
                    records,
                    setup.origin,
                )
                .await?;
            let settled = self.wait_settled(hub, events).await?;
            let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
            let round_records: Vec<ToolCallRecord> = ids
                .iter()
                .filter_map(|id| settled.iter().find(|r| r.id == *id).cloned())
                .collect();
            progress.records = settled;
            if last_round {
                return Ok(FinishReason::MaxRounds);
            }
            let refs: Vec<&ToolCallRecord> = round_records.iter().collect();
            turns.extend(round_turns(&completion.text, &refs, mode));
        }
        Ok(FinishReason::MaxRounds)
    }

    /// The request of one round: tools natively, or described in the system prompt. In
    /// search mode (`found`), the search tools, then the pinned and found ones.
    fn request(
        &self,
        listing: &AssistantTools,
        turns: &[Turn],
        found: Option<&BTreeSet<String>>,
    ) -> ChatRequest {
        let setup = &self.setup;
        match setup.model.tool_mode {
            ToolMode::Native => {
                let spec = |tool: &AssistantTool| ToolSpec {
                    name: tool.name.clone(),
                    description: tool.tool.description.as_deref().unwrap_or("").to_owned(),
                    parameters: Value::Object((*tool.tool.input_schema).clone()),
                };
                let tools = match found {
                    None => listing.tools.iter().map(spec).collect(),
                    Some(found) => search_mode_tools()
                        .into_iter()
                        .map(|meta| ToolSpec {
                            name: meta.name.to_owned(),
                            description: meta.description.to_owned(),
                            parameters: meta.input_schema,
                        })
                        .chain(
                            listing
                                .tools
                                .iter()
                                .filter(|t| t.pinned || found.contains(&t.name))
                                .map(spec),
                        )
                        .collect(),
                };
                ChatRequest {
                    model: setup.model.model.clone(),
                    system: setup.system_prompt.clone(),
                    turns: turns.to_vec(),
                    tools,
                    max_tokens: None,
                }
            }
            ToolMode::Prompt => {
                let schemas: Vec<Value> = listing
                    .tools
                    .iter()
                    .map(|tool| Value::Object((*tool.tool.input_schema).clone()))
                    .collect();
                let tools: Vec<PromptTool<'_>> = listing
                    .tools
                    .iter()
                    .zip(&schemas)
                    .map(|(tool, schema)| PromptTool {
                        server: tool.server.server.spec.name.as_str(),
                        tool: &tool.tool.name,
                        description: tool.tool.description.as_deref().unwrap_or(""),
                        schema,
                    })
                    .collect();
                ChatRequest {
                    model: setup.model.model.clone(),
                    system: Some(prompt_mode::system_prompt(
                        setup.system_prompt.as_deref(),
                        &tools,
                    )),
                    turns: turns.to_vec(),
                    tools: Vec::new(),
                    max_tokens: None,
                }
            }
        }
    }

    /// Call ids unique within the message (a model may repeat or omit them).
    fn unique_ids(
        &self,
        calls: Vec<ModelToolCall>,
        existing: &[ToolCallRecord],
    ) -> Vec<ModelToolCall> {
        let mut seen: std::collections::HashSet<String> =
            existing.iter().map(|r| r.id.clone()).collect();
        calls
            .into_iter()
            .map(|mut call| {
                let usable = !call.id.is_empty()
                    && call.id.len() <= 128
                    && !call.id.chars().any(char::is_control);
                if !usable || !seen.insert(call.id.clone()) {
                    call.id = format!("call_{}", Uuid::new_v4().simple());
                    seen.insert(call.id.clone());
                }
                call
            })
            .collect()
    }

    /// Waits until no call of the message is open, relaying their updates meanwhile.
    async fn wait_settled(
        &self,
        hub: &mut broadcast::Receiver<Arc<Event>>,
        events: &Events,
    ) -> Result<Vec<ToolCallRecord>> {
        let setup = &self.setup;
        let confirmation = &self.service.settings.confirmation;
        // Parked calls time out on their own; this only bounds a stuck actor.
        let limit = Duration::from_secs(confirmation.timeout_secs + 60);
        let wait = self
            .service
            .confirmations
            .wait_settled(&setup.user, setup.message, limit);
        tokio::pin!(wait);
        let waited = loop {
            tokio::select! {
                waited = &mut wait => break waited?,
                received = hub.recv() => match received {
                    Ok(event) => relay(&event, setup.message, events),
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => {}
                },
            }
        };
        forward_tool_events(hub, setup.message, events);
        match waited {
            Waited::Settled(records) => Ok(records),
            Waited::StillOpen(_) => Err(Error::Unexpected(anyhow::anyhow!(
                "tool calls of message {} did not settle",
                setup.message
            ))),
        }
    }
}

/// The model-facing name of a prompt-mode instruction: `server_name` + `tool_name`, or a
/// name the assistant's table knows, or a raw tool name only one server has.
fn model_name(listing: &AssistantTools, server: Option<&str>, tool: &str) -> String {
    if let Some(server) = server
        && let Some(found) = listing
            .tools
            .iter()
            .find(|t| t.server.server.spec.name.as_str() == server && *t.tool.name == *tool)
    {
        return found.name.clone();
    }
    if listing.resolve(tool).is_some() {
        return tool.to_owned();
    }
    let mut same_name = listing.tools.iter().filter(|t| *t.tool.name == *tool);
    match (same_name.next(), same_name.next()) {
        (Some(only), None) => only.name.clone(),
        _ => match server {
            Some(server) => format!("{server}.{tool}"),
            None => tool.to_owned(),
        },
    }
}

/// The user's events a chat client needs while its turn runs: its message's tool calls,
/// what the user's servers ask of the user (a question, a sampling approval, an
/// authorization), and what they log.
const NOTICES: [&str; 7] = [
    "mcp.elicitation.requested",
    "mcp.elicitation.completed",
    "mcp.sampling.requested",
    "mcp.sampling.completed",
    "mcp.log",
    "mcp.oauth.required",
    "mcp.oauth.completed",
];

fn relay(event: &Event, message: Uuid, events: &Events) {
    if event.name == TOOL_CALL_EVENT
        && event.data.get("messageId").and_then(Value::as_str) == Some(&message.to_string())
    {
        let _ = events.send(ChatEvent::ToolCall(event.data.clone()));
    } else if NOTICES.contains(&event.name) {
        let _ = events.send(ChatEvent::Notice {
            name: event.name,
            data: event.data.clone(),
        });
    }
}

/// Relays what the hub already holds for the message.
fn forward_tool_events(hub: &mut broadcast::Receiver<Arc<Event>>, message: Uuid, events: &Events) {
    loop {
        match hub.try_recv() {
            Ok(event) => relay(&event, message, events),
            Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
            Err(_) => break,
        }
    }
}
