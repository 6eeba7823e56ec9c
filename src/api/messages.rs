//! `/api/messages/{id}/tool-calls`, `/tool-confirm` and `GET /api/messages/{id}` (seed 001).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json as JsonResponse, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::AppState;
use super::auth::UserContext;
use super::error::ApiError;
use super::extract::{Json, Path, Query};
use crate::confirm::Waited;
use crate::domain::{AssistantId, ToolCallRecord};
use crate::error::Error;
use crate::services::ModelToolCall;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/messages/{id}", get(read))
        .route("/api/messages/{id}/tool-calls", post(tool_calls))
        .route("/api/messages/{id}/tool-confirm", post(confirm))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolCallsRequest {
    assistant_id: String,
    conversation_id: Option<String>,
    calls: Vec<ModelToolCall>,
}

#[derive(Deserialize)]
struct WaitQuery {
    wait: Option<u64>,
}

fn body(message: &str, records: &[ToolCallRecord]) -> JsonResponse<Value> {
    JsonResponse(json!({"messageId": message, "toolCalls": records}))
}

async fn tool_calls(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Query(query): Query<WaitQuery>,
    Json(request): Json<ToolCallsRequest>,
) -> Result<(StatusCode, JsonResponse<Value>), ApiError> {
    let assistant = AssistantId::parse(&request.assistant_id)?;
    let conversation = request
        .conversation_id
        .as_deref()
        .map(|c| Uuid::parse_str(c).map_err(|_| Error::validation("conversationId must be a UUID")))
        .transpose()?;
    let service = &state.services.tool_calls;
    let records = service
        .submit(&ctx.user, &id, &assistant, conversation, request.calls)
        .await?;
    let Some(seconds) = query.wait else {
        return Ok((StatusCode::ACCEPTED, body(&id, &records)));
    };
    Ok(match service.wait(&ctx.user, &id, seconds).await? {
        Waited::Settled(records) => (StatusCode::OK, body(&id, &records)),
        Waited::StillOpen(records) => (StatusCode::ACCEPTED, body(&id, &records)),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfirmRequest {
    tool_call_id: String,
    approved: bool,
}

async fn confirm(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(request): Json<ConfirmRequest>,
) -> Result<JsonResponse<Value>, ApiError> {
    let record = state
        .services
        .tool_calls
        .confirm(&ctx.user, &id, &request.tool_call_id, request.approved)
        .await?;
    Ok(JsonResponse(json!({"messageId": id, "toolCall": record})))
}

async fn read(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    let message = state.services.tool_calls.message(&ctx.user, &id).await?;
    Ok(JsonResponse(json!({
        "id": message.id,
        "conversationId": message.conversation_id,
        "role": message.role,
        "content": message.content,
        "toolCalls": message.tool_calls,
        "createdAt": message.created_at,
        "updatedAt": message.updated_at,
    })))
}
