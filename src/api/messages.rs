//! `/api/messages/{id}/tool-calls`, `/tool-confirm` and `GET /api/messages/{id}` (seed 001).

use axum::Json as JsonResponse;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::AppState;
use super::auth::UserContext;
use super::error::ApiError;
use super::external_id::ExternalId;
use super::extract::{Json, Path, Query};
use crate::confirm::Waited;
use crate::domain::{AssistantId, CallVia, ToolCallRecord};
use crate::error::Error;
use crate::services::ModelToolCall;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(read))
        .routes(routes!(tool_calls))
        .routes(routes!(confirm))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolCallsRequest {
    #[schema(value_type = ExternalId)]
    assistant_id: String,
    /// The conversation is created for the caller when it does not exist.
    #[schema(format = Uuid)]
    conversation_id: Option<String>,
    calls: Vec<ModelToolCall>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct WaitQuery {
    /// Seconds to wait for every call to settle (200) before answering 202.
    wait: Option<u64>,
}

/// An assistant message's tool calls.
#[derive(ToSchema)]
#[allow(dead_code)] // The shape `body` builds, for the OpenAPI document.
struct ToolCalls {
    #[schema(rename = "messageId")]
    message_id: String,
    #[schema(rename = "toolCalls")]
    tool_calls: Vec<ToolCallRecord>,
}

fn body(message: &str, records: &[ToolCallRecord]) -> JsonResponse<Value> {
    JsonResponse(json!({"messageId": message, "toolCalls": records}))
}

/// Runs the model's tool calls for an assistant message: auto-approved tools at once, others
/// parked `pending`; unknown tools and bad arguments become `error` records. 202 with the
/// records, or with `wait` 200 once all settled.
#[utoipa::path(post, path = "/api/messages/{id}/tool-calls", tag = "tool-calls",
    params(("id" = String, Path, description = "The assistant message's id (a UUID)"), WaitQuery), request_body = ToolCallsRequest, responses(
        (status = ACCEPTED, body = ToolCalls, description = "Some calls are still open"),
        (status = OK, body = ToolCalls, description = "Every call settled within `wait`")))]
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
        .submit(
            &ctx.user,
            &id,
            &assistant,
            conversation,
            request.calls,
            ctx.origin(CallVia::Chat),
        )
        .await?;
    let Some(seconds) = query.wait else {
        return Ok((StatusCode::ACCEPTED, body(&id, &records)));
    };
    Ok(match service.wait(&ctx.user, &id, seconds).await? {
        Waited::Settled(records) => (StatusCode::OK, body(&id, &records)),
        Waited::StillOpen(records) => (StatusCode::ACCEPTED, body(&id, &records)),
    })
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfirmRequest {
    tool_call_id: String,
    approved: bool,
}

/// Approves (→ `invoking` → `done`/`error`) or rejects (→ `cancelled`) a parked call:
/// `{messageId, toolCall}`.
#[utoipa::path(post, path = "/api/messages/{id}/tool-confirm", tag = "tool-calls",
    params(("id" = String, Path, description = "The assistant message's id (a UUID)")), request_body = ConfirmRequest, responses((status = OK, body = Value)))]
async fn confirm(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(request): Json<ConfirmRequest>,
) -> Result<JsonResponse<Value>, ApiError> {
    let record = state
        .services
        .tool_calls
        .confirm(
            &ctx.user,
            &id,
            &request.tool_call_id,
            request.approved,
            ctx.principal.admin_key(),
        )
        .await?;
    Ok(JsonResponse(json!({"messageId": id, "toolCall": record})))
}

/// The message with its tool call records.
#[utoipa::path(get, path = "/api/messages/{id}", tag = "tool-calls",
    params(("id" = String, Path, description = "The assistant message's id (a UUID)")), responses((status = OK, body = Value)))]
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
