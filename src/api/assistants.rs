//! `/api/assistants/{id}/mcp-servers`: which of the caller's servers an assistant uses.

use axum::extract::State;
use axum::routing::get;
use axum::{Json as JsonResponse, Router};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::AppState;
use super::auth::UserContext;
use super::error::ApiError;
use super::extract::{Json, Path};
use crate::domain::AssistantId;

pub fn routes() -> Router<AppState> {
    Router::new().route("/api/assistants/{id}/mcp-servers", get(read).put(replace))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Bindings {
    assistant_id: String,
    server_ids: Vec<String>,
}

impl Bindings {
    fn new(assistant: &AssistantId, ids: Vec<Uuid>) -> Self {
        Self {
            assistant_id: assistant.as_str().to_owned(),
            server_ids: ids.into_iter().map(|id| id.to_string()).collect(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BindRequest {
    #[serde(alias = "mcpServerIds")]
    server_ids: Vec<String>,
}

async fn read(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<Bindings>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let ids = state
        .services
        .assistants
        .bound_servers(&ctx.user, &assistant)
        .await?;
    Ok(JsonResponse(Bindings::new(&assistant, ids)))
}

async fn replace(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(body): Json<BindRequest>,
) -> Result<JsonResponse<Bindings>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let ids = state
        .services
        .assistants
        .bind(&ctx.user, &assistant, body.server_ids)
        .await?;
    Ok(JsonResponse(Bindings::new(&assistant, ids)))
}
