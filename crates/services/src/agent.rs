//! The agent loop (seed 001): a user's message, the assistant's tools, an LLM, rounds of
//! tool calls until the model answers in plain text or the round limit is reached.
//!
//! A turn is prepared first (everything a client can get wrong is checked and the
//! conversation, the user's message and the assistant's message are stored), then run as
//! a task that reports [`ChatEvent`]s. Tool calls go through the same confirmation actors
//! as the REST API, so approval, limits and records are the same; the turn waits for
//! parked calls while its stream stays open. Dropping the turn's cancel token (the client
//! went away) stops the loop and cancels the calls still parked.

mod history;
pub mod prompt_mode;
mod turn;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

pub use history::TurnMetadata;
pub use turn::PreparedTurn;

use crate::config::Settings;
use crate::confirm::Confirmations;
use crate::domain::{AssistantId, ToolCallRecord, UserId};
use crate::error::{Error, Resource, Result};
use crate::events::EventHub;
use crate::llm::{LlmClient, ToolMode};
use crate::services::UpstreamService;
use crate::store::{Ownership, Store, StoredMessage};

/// A chat request, as the API received it.
pub struct ChatInput {
    pub assistant: AssistantId,
    pub conversation: Option<Uuid>,
    pub message: String,
    pub provider: String,
    pub model: String,
    pub tool_mode: Option<ToolMode>,
    pub system_prompt: Option<String>,
    pub max_rounds: Option<u32>,
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model answered in plain text.
    Stop,
    /// The model still asked for tools after the last allowed round.
    MaxRounds,
    /// The client went away.
    Cancelled,
    Error,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::MaxRounds => "max_rounds",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Error => "error",
        }
    }
}

/// The end state of a turn.
#[derive(Debug, Clone)]
pub struct ChatOutcome {
    pub conversation_id: Uuid,
    pub user_message_id: Uuid,
    pub message_id: Uuid,
    pub content: String,
    pub tool_calls: Vec<ToolCallRecord>,
    pub finish_reason: FinishReason,
    pub rounds: u32,
}

/// What a running turn reports, in order.
pub enum ChatEvent {
    Started {
        conversation_id: Uuid,
        user_message_id: Uuid,
        message_id: Uuid,
        model: String,
        tool_mode: ToolMode,
        /// Bound servers whose tools could not be listed (`{serverId, code, message}`).
        unavailable: Vec<Value>,
    },
    Delta {
        message_id: Uuid,
        text: String,
    },
    /// A ToolCallRecord changed (`{messageId, toolCall}`), as on `/api/events`.
    ToolCall(Value),
    /// What the user's servers need from them while the turn runs, as on `/api/events`:
    /// `mcp.elicitation.requested`/`completed`, `mcp.sampling.requested`/`completed`,
    /// `mcp.oauth.required`/`completed`.
    Notice {
        name: &'static str,
        data: Value,
    },
    Retrying {
        message_id: Uuid,
        attempt: u32,
        delay_ms: u64,
        code: &'static str,
        message: String,
    },
    Completed(ChatOutcome),
    /// The turn failed; what it produced so far is stored.
    Failed {
        outcome: ChatOutcome,
        error: Error,
    },
}

#[derive(Clone)]
pub struct ChatService {
    store: Store,
    settings: Arc<Settings>,
    upstream: UpstreamService,
    confirmations: Confirmations,
    events: Arc<EventHub>,
    llm: LlmClient,
    /// Conversations with a turn in progress: one at a time, or their messages interleave.
    running: Arc<Mutex<HashSet<Uuid>>>,
}

/// Holds a conversation's "turn in progress" mark until dropped.
pub(crate) struct RunningGuard {
    running: Arc<Mutex<HashSet<Uuid>>>,
    conversation: Uuid,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running
            .lock()
            .expect("running-turns lock")
            .remove(&self.conversation);
    }
}

fn check_length(field: &str, value: &str, max: usize) -> Result<()> {
    if value.len() > max {
        return Err(Error::validation(format!(
            "{field} is longer than {max} bytes"
        )));
    }
    Ok(())
}

/// A conversation title: the start of its first message, on one line.
fn title_of(message: &str) -> String {
    let line: String = message.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

impl ChatService {
    pub fn new(
        store: Store,
        settings: Arc<Settings>,
        upstream: UpstreamService,
        confirmations: Confirmations,
        events: Arc<EventHub>,
    ) -> Self {
        let llm = LlmClient::new(&settings.llm);
        Self {
            store,
            settings,
            upstream,
            confirmations,
            events,
            llm,
            running: Arc::default(),
        }
    }

    fn mark_running(&self, conversation: Uuid) -> Result<RunningGuard> {
        if !self
            .running
            .lock()
            .expect("running-turns lock")
            .insert(conversation)
        {
            return Err(Error::Conflict(format!(
                "a chat turn is already running in conversation {conversation}"
            )));
        }
        Ok(RunningGuard {
            running: self.running.clone(),
            conversation,
        })
    }

    /// Checks the request and stores the conversation and both messages.
    /// `origin`: who asked (the key the chat came with), what its calls' audit rows say.
    pub async fn prepare(
        &self,
        user: &UserId,
        input: ChatInput,
        origin: crate::domain::CallOrigin,
    ) -> Result<PreparedTurn> {
        let agent = &self.settings.agent;
        let message = input.message.trim();
        if message.is_empty() {
            return Err(Error::validation("message must not be empty"));
        }
        check_length("message", message, agent.max_message_bytes)?;
        if let Some(prompt) = &input.system_prompt {
            check_length("systemPrompt", prompt, agent.max_system_prompt_bytes)?;
        }
        let max_rounds = match input.max_rounds {
            None => agent.max_tool_rounds,
            Some(n) if (1..=agent.max_tool_rounds).contains(&n) => n,
            Some(_) => {
                return Err(Error::validation(format!(
                    "maxRounds must be between 1 and {}",
                    agent.max_tool_rounds
                )));
            }
        };
        if input.model.trim().is_empty() || input.model.len() > 256 {
            return Err(Error::validation("model.name must be 1 to 256 characters"));
        }
        let model = self
            .llm
            .model(&input.provider, &input.model, input.tool_mode)?;
        self.upstream.rate_limits().chat_turn(user)?;

        let conversations = self.store.conversations();
        let conversation = input.conversation.unwrap_or_else(Uuid::now_v7);
        let created = match conversations.ownership(user, conversation).await? {
            Ownership::Mine => false,
            Ownership::Others => {
                return Err(Error::NotFound(
                    Resource::Conversation,
                    conversation.to_string(),
                ));
            }
            Ownership::Missing => true,
        };
        let running = self.mark_running(conversation)?;
        if created {
            conversations
                .insert_titled(
                    user,
                    conversation,
                    Some(input.assistant.as_str()),
                    Some(title_of(message)),
                )
                .await?;
        }
        let history = self
            .store
            .messages()
            .in_conversation(user, conversation, agent.max_history_messages)
            .await?;

        let messages = self.store.messages();
        let now = crate::domain::now();
        let user_message = StoredMessage {
            id: Uuid::now_v7(),
            user_id: user.clone(),
            conversation_id: Some(conversation),
            role: "user".into(),
            content: message.to_owned(),
            tool_calls: Vec::new(),
            metadata: None,
            owner_instance: None,
            created_at: now,
            updated_at: now,
            origins: Default::default(),
        };
        messages.insert(&user_message).await?;
        let metadata = TurnMetadata {
            provider: input.provider.clone(),
            model: input.model.clone(),
            tool_mode: Some(model.tool_mode),
            ..Default::default()
        };
        let reply = StoredMessage {
            id: Uuid::now_v7(),
            role: "assistant".into(),
            content: String::new(),
            metadata: Some(serde_json::to_value(&metadata).unwrap_or(Value::Null)),
            owner_instance: None,
            // Strictly after the user's message, whatever the clock's resolution.
            created_at: now + chrono::Duration::microseconds(1),
            ..user_message.clone()
        };
        messages.insert(&reply).await?;
        conversations.touch(user, conversation).await?;

        Ok(PreparedTurn::new(
            self.clone(),
            turn::TurnSetup {
                user: user.clone(),
                assistant: input.assistant,
                conversation,
                user_message: user_message.id,
                message: reply.id,
                system_prompt: input.system_prompt,
                max_rounds,
                model,
                history,
                user_text: message.to_owned(),
                metadata,
                origin,
                _running: running,
            },
        ))
    }

    /// The assistant's tools as seed 000's `GET /api/chat/tools` lists them.
    pub async fn tools(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<crate::services::AssistantTools> {
        self.upstream.assistant_tools(user, assistant).await
    }

    /// A conversation with its newest messages, oldest first.
    pub async fn conversation(
        &self,
        user: &UserId,
        id: &str,
        limit: u64,
    ) -> Result<(crate::store::StoredConversation, Vec<StoredMessage>)> {
        let not_found = || Error::NotFound(Resource::Conversation, id.to_owned());
        let uuid = Uuid::parse_str(id).map_err(|_| not_found())?;
        let conversation = self
            .store
            .conversations()
            .get(user, uuid)
            .await?
            .ok_or_else(not_found)?;
        let messages = self
            .store
            .messages()
            .in_conversation(user, uuid, limit)
            .await?;
        Ok((conversation, messages))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_one_short_line() {
        assert_eq!(title_of("  hello\n  world "), "hello world");
        let long = "é".repeat(100);
        assert_eq!(title_of(&long).chars().count(), 81);
    }
}
