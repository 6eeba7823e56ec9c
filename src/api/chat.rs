//! `/api/chat`: the agent loop as server-sent events, seed 000's non-streaming
//! `/api/chat/message`, `/api/chat/tools` and `/api/chat/conversations/{id}`.
//!
//! A turn runs in its own task; the response only relays its events. When the client
//! disconnects, the stream (and with it the turn's cancel guard) is dropped, which stops
//! the loop and cancels the calls it left parked.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json as JsonResponse;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::AppState;
use super::auth::UserContext;
use super::error::ApiError;
use super::external_id::ExternalId;
use super::extract::{Json, Path, Query};
use crate::agent::{ChatEvent, ChatInput, ChatOutcome};
use crate::confirm::TOOL_CALL_EVENT;
use crate::domain::AssistantId;
use crate::domain::CallVia;
use crate::error::Error;
use crate::llm::ToolMode;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(chat_stream))
        .routes(routes!(chat_message))
        .routes(routes!(tools))
        .routes(routes!(conversation))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ModelChoice {
    /// A provider configured under `[llm.providers]`.
    provider: String,
    #[schema(min_length = 1, max_length = 256)]
    name: String,
    tool_mode: Option<ToolMode>,
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ChatRequest {
    #[schema(value_type = ExternalId)]
    assistant_id: String,
    /// A UUID: continue this conversation; a new one is created when omitted or unknown.
    #[schema(format = Uuid)]
    conversation_id: Option<String>,
    #[schema(min_length = 1)]
    message: String,
    model: ModelChoice,
    system_prompt: Option<String>,
    /// At most `agent.max_tool_rounds`.
    #[schema(minimum = 1)]
    max_rounds: Option<u32>,
}

impl ChatRequest {
    fn into_input(self) -> Result<ChatInput, Error> {
        let conversation = self
            .conversation_id
            .as_deref()
            .map(|c| {
                Uuid::parse_str(c).map_err(|_| Error::validation("conversationId must be a UUID"))
            })
            .transpose()?;
        Ok(ChatInput {
            assistant: AssistantId::parse(&self.assistant_id)?,
            conversation,
            message: self.message,
            provider: self.model.provider,
            model: self.model.name,
            tool_mode: self.model.tool_mode,
            system_prompt: self.system_prompt,
            max_rounds: self.max_rounds,
        })
    }
}

fn outcome_json(outcome: &ChatOutcome) -> Value {
    json!({
        "conversationId": outcome.conversation_id,
        "userMessageId": outcome.user_message_id,
        "messageId": outcome.message_id,
        "content": outcome.content,
        "toolCalls": outcome.tool_calls,
        "finishReason": outcome.finish_reason,
        "rounds": outcome.rounds,
    })
}

fn to_sse(sequence: u64, event: ChatEvent) -> Event {
    let (name, data) = match event {
        ChatEvent::Started {
            conversation_id,
            user_message_id,
            message_id,
            model,
            tool_mode,
            unavailable,
        } => (
            "message.created",
            json!({
                "conversationId": conversation_id,
                "userMessageId": user_message_id,
                "messageId": message_id,
                "model": model,
                "toolMode": tool_mode,
                "unavailable": unavailable,
            }),
        ),
        ChatEvent::Delta { message_id, text } => (
            "message.delta",
            json!({"messageId": message_id, "text": text}),
        ),
        ChatEvent::ToolCall(data) => (TOOL_CALL_EVENT, data),
        ChatEvent::Notice { name, data } => (name, data),
        ChatEvent::Retrying {
            message_id,
            attempt,
            delay_ms,
            code,
            message,
        } => (
            "llm.retrying",
            json!({
                "messageId": message_id, "attempt": attempt, "delayMs": delay_ms,
                "error": {"code": code, "message": message},
            }),
        ),
        ChatEvent::Completed(outcome) => ("message.completed", outcome_json(&outcome)),
        ChatEvent::Failed { outcome, error } => {
            let mut data = outcome_json(&outcome);
            data["error"] = client_summary(&error);
            ("chat.error", data)
        }
    };
    Event::default()
        .id(sequence.to_string())
        .event(name)
        .data(data.to_string())
}

/// An error as a client may see it: internal details stay in the log.
fn client_summary(error: &Error) -> Value {
    match error {
        Error::Store(_) | Error::Unexpected(_) => {
            tracing::error!(%error, "chat turn failed");
            json!({"code": error.code(), "message": "internal error; see the service log"})
        }
        _ => error.summary(),
    }
}

/// Starts the turn's task; the guard cancels it when dropped.
fn spawn_turn(turn: crate::agent::PreparedTurn) -> (mpsc::UnboundedReceiver<ChatEvent>, DropGuard) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    tokio::spawn(turn.run(sender, cancel.clone()));
    (receiver, cancel.drop_guard())
}

/// Runs the agent loop, streamed as server-sent events (README, Chat).
#[utoipa::path(post, path = "/api/chat", tag = "chat", request_body = ChatRequest,
    responses((status = OK, body = String, content_type = "text/event-stream")))]
async fn chat_stream(
    State(state): State<AppState>,
    ctx: UserContext,
    Json(request): Json<ChatRequest>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let turn = state
        .services
        .chat
        .prepare(&ctx.user, request.into_input()?, ctx.origin(CallVia::Chat))
        .await?;
    let (receiver, guard) = spawn_turn(turn);
    let stream = futures::stream::unfold(
        (receiver, guard, 0u64),
        |(mut receiver, guard, sequence)| async move {
            let event = receiver.recv().await?;
            Some((
                Ok(to_sse(sequence + 1, event)),
                (receiver, guard, sequence + 1),
            ))
        },
    );
    let heartbeat = Duration::from_secs(state.settings.events.heartbeat_secs);
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(heartbeat)))
}

/// The same turn without streaming (seed 000):
/// `{conversationId, userMessageId, messageId, content, toolCalls, finishReason, rounds}`.
#[utoipa::path(post, path = "/api/chat/message", tag = "chat", request_body = ChatRequest,
    responses((status = OK, body = Value)))]
async fn chat_message(
    State(state): State<AppState>,
    ctx: UserContext,
    Json(request): Json<ChatRequest>,
) -> Result<JsonResponse<Value>, ApiError> {
    let turn = state
        .services
        .chat
        .prepare(&ctx.user, request.into_input()?, ctx.origin(CallVia::Chat))
        .await?;
    let (mut receiver, _guard) = spawn_turn(turn);
    while let Some(event) = receiver.recv().await {
        match event {
            ChatEvent::Completed(outcome) => return Ok(JsonResponse(outcome_json(&outcome))),
            ChatEvent::Failed { error, .. } => return Err(error.into()),
            _ => {}
        }
    }
    Err(Error::Unexpected(anyhow::anyhow!("the chat turn ended without an outcome")).into())
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct ToolsQuery {
    #[param(value_type = ExternalId)]
    assistant_id: String,
}

/// Seed 000's tool list for an assistant: `{tools, unavailable}`.
#[utoipa::path(get, path = "/api/chat/tools", tag = "chat", params(ToolsQuery),
    responses((status = OK, body = Value)))]
async fn tools(
    State(state): State<AppState>,
    ctx: UserContext,
    Query(query): Query<ToolsQuery>,
) -> Result<JsonResponse<Value>, ApiError> {
    let assistant = AssistantId::parse(&query.assistant_id)?;
    let listing = state.services.chat.tools(&ctx.user, &assistant).await?;
    let tools: Vec<Value> = listing
        .tools
        .iter()
        .map(|tool| {
            let spec = &tool.server.server.spec;
            json!({
                "serverId": tool.server.server.id,
                "serverName": spec.name.as_str(),
                "toolName": tool.tool.name,
                "displayName": tool.name,
                "description": tool.tool.description,
                "inputSchema": tool.tool.input_schema,
                "autoApprove": spec.auto_approve_tools.iter().any(|t| *t == tool.tool.name),
            })
        })
        .collect();
    let unavailable: Vec<Value> = listing
        .unavailable
        .iter()
        .map(|u| {
            let mut entry = u.error.summary();
            entry["serverId"] = json!(u.server_id);
            entry
        })
        .collect();
    Ok(JsonResponse(json!({
        "assistantId": assistant.as_str(),
        "tools": tools,
        "unavailable": unavailable,
    })))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct HistoryQuery {
    /// The newest this many messages (1 to 1000).
    limit: Option<u64>,
}

/// Most messages one `GET /api/chat/conversations/{id}` returns.
const MAX_HISTORY_PAGE: u64 = 1000;

/// A conversation with its messages, oldest first.
#[utoipa::path(get, path = "/api/chat/conversations/{id}", tag = "chat",
    params(("id" = String, Path, description = "The conversation's id (a UUID)"), HistoryQuery),
    responses((status = OK, body = Value)))]
async fn conversation(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> Result<JsonResponse<Value>, ApiError> {
    let limit = query
        .limit
        .unwrap_or(MAX_HISTORY_PAGE)
        .clamp(1, MAX_HISTORY_PAGE);
    let (conversation, messages) = state
        .services
        .chat
        .conversation(&ctx.user, &id, limit)
        .await?;
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|m| {
            json!({
                "id": m.id,
                "role": m.role,
                "content": m.content,
                "toolCalls": m.tool_calls,
                "metadata": m.metadata,
                "createdAt": m.created_at,
                "updatedAt": m.updated_at,
            })
        })
        .collect();
    Ok(JsonResponse(json!({
        "id": conversation.id,
        "assistantId": conversation.assistant_id,
        "title": conversation.title,
        "createdAt": conversation.created_at,
        "updatedAt": conversation.updated_at,
        "messages": messages,
    })))
}
