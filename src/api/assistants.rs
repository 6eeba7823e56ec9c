//! `/api/assistants/{id}/mcp-servers`: which of the caller's servers an assistant uses.

use axum::Json as JsonResponse;
use axum::extract::State;
use serde::{Deserialize, Serialize};
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
use crate::domain::AssistantId;
use crate::error::Error;
use crate::services::AssistantTool;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(read, replace))
        .routes(routes!(tools))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ToolsQuery {
    /// `openai`, `anthropic` or `mcp` (the default).
    #[param(pattern = "^(openai|anthropic|mcp)$")]
    format: Option<String>,
}

/// One tool in the shape a model API expects.
fn tool_in_format(format: &str, tool: &AssistantTool) -> Value {
    let description = tool.tool.description.as_deref();
    let schema = Value::Object((*tool.tool.input_schema).clone());
    match format {
        "openai" => json!({
            "type": "function",
            "function": {"name": tool.name, "description": description, "parameters": schema},
        }),
        "anthropic" => {
            json!({"name": tool.name, "description": description, "input_schema": schema})
        }
        // The tool as its server declared it (every field, in its order), named as the
        // model will call it.
        _ => {
            let mut declared = serde_json::to_value(&tool.tool).unwrap_or_else(|_| json!({}));
            if let Some(fields) = declared.as_object_mut() {
                fields.insert("name".into(), Value::String(tool.name.clone()));
            }
            declared
        }
    }
}

/// The enabled tools of the assistant's active servers, named `mcp__{server}__{tool}`,
/// in a model API's shape; servers that fail are listed under `unavailable`.
#[utoipa::path(get, path = "/api/assistants/{id}/tools", tag = "assistants",
    params(("id" = ExternalId, Path, description = "The assistant's id (the backend's)"), ToolsQuery), responses((status = OK, body = Value)))]
async fn tools(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Query(query): Query<ToolsQuery>,
) -> Result<JsonResponse<Value>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let format = query.format.unwrap_or_else(|| "mcp".into());
    if !matches!(format.as_str(), "openai" | "anthropic" | "mcp") {
        return Err(Error::validation(format!(
            "format '{format}' is not one of openai, anthropic, mcp"
        ))
        .into());
    }
    let listing = state
        .services
        .upstream
        .assistant_tools(&ctx.user, &assistant)
        .await?;
    let tools: Vec<Value> = listing
        .tools
        .iter()
        .map(|t| tool_in_format(&format, t))
        .collect();
    let unavailable: Vec<Value> = listing
        .unavailable
        .into_iter()
        .map(|u| {
            let mut entry = u.error.summary();
            entry["serverId"] = json!(u.server_id);
            entry
        })
        .collect();
    Ok(JsonResponse(json!({
        "assistantId": assistant.as_str(),
        "format": format,
        "tools": tools,
        "unavailable": unavailable,
    })))
}

#[derive(Serialize, ToSchema)]
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

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct BindRequest {
    /// The caller's server ids, in the order the assistant should list them.
    #[serde(alias = "mcpServerIds")]
    server_ids: Vec<String>,
}

/// The servers bound to the assistant, in the user's order.
#[utoipa::path(get, path = "/api/assistants/{id}/mcp-servers", tag = "assistants",
    params(("id" = ExternalId, Path, description = "The assistant's id (the backend's)")), responses((status = OK, body = Bindings)))]
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

/// Replaces the bindings (only the caller's servers).
#[utoipa::path(put, path = "/api/assistants/{id}/mcp-servers", tag = "assistants",
    params(("id" = ExternalId, Path, description = "The assistant's id (the backend's)")), request_body = BindRequest, responses((status = OK, body = Bindings)))]
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
