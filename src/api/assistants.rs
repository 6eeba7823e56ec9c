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
        .routes(routes!(tool_overrides, set_tool_overrides))
        .routes(routes!(tool_exposure, set_tool_exposure))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ToolsQuery {
    /// `openai`, `anthropic` or `mcp` (the default).
    #[param(pattern = "^(openai|anthropic|mcp)$")]
    format: Option<String>,
    /// Ranks the tools against this request (tool search) and lists only those that
    /// answer it, best first.
    query: Option<String>,
    /// With `query`: how many tools at most (1 to 100, default 10).
    limit: Option<u64>,
}

/// How many tools a search lists unless `limit` says otherwise.
const DEFAULT_SEARCH_LIMIT: usize = 10;

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
/// in a model API's shape; servers that fail are listed under `unavailable`. With
/// `query`, only the tools that answer it, best first (tool search).
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
    let search = match &query.query {
        Some(text) => Some((
            crate::services::checked_query(text)?.to_owned(),
            crate::services::checked_limit(query.limit, DEFAULT_SEARCH_LIMIT)?,
        )),
        None if query.limit.is_some() => {
            return Err(Error::validation("limit needs a query to rank the tools by").into());
        }
        None => None,
    };
    let upstream = &state.services.upstream;
    let listing = upstream.assistant_tools(&ctx.user, &assistant).await?;
    // The tools listed: all, or those a search found, best first.
    let listed: Vec<&AssistantTool> = match &search {
        None => listing.tools.iter().collect(),
        Some((text, limit)) => upstream
            .rank_tools(
                &ctx.user,
                &assistant,
                crate::services::Audience::Model,
                &listing,
                text,
                *limit,
            )
            .await?
            .into_iter()
            .map(|found| &listing.tools[found.position])
            .collect(),
    };
    let tools: Vec<Value> = listed.iter().map(|t| tool_in_format(&format, t)).collect();
    // MCP Apps: the view of each tool that has one, by the name the model calls it, so a
    // host knows what renders a call's result and whether the view may call the tool.
    let apps: serde_json::Map<String, Value> = listed
        .iter()
        .filter_map(|t| {
            let ui = t.ui();
            let uri = ui.resource_uri?;
            Some((
                t.name.clone(),
                json!({"serverId": t.server.server.id, "resourceUri": uri, "visibility": ui.visibility()}),
            ))
        })
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
    let mut answer = json!({
        "assistantId": assistant.as_str(),
        "format": format,
        "tools": tools,
        "apps": apps,
        "unavailable": unavailable,
    });
    if let Some((text, _)) = search {
        answer["query"] = json!(text);
    }
    Ok(JsonResponse(answer))
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

/// One tool's override for an assistant (curation); the tool by its server and its name
/// there.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolOverrideBody {
    server_id: String,
    tool: String,
    /// The name models (and gateway clients) call it by: 1 to 64 of `[A-Za-z0-9_-]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// The description models read instead of the server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// Not offered, nor callable through the assistant.
    #[serde(default)]
    hidden: bool,
    /// Always in the model's list (search mode).
    #[serde(default)]
    pinned: bool,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ToolOverridesRequest {
    overrides: Vec<ToolOverrideBody>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ToolOverridesView {
    assistant_id: String,
    overrides: Vec<ToolOverrideBody>,
}

impl ToolOverridesView {
    fn new(assistant: &AssistantId, overrides: &crate::domain::ToolOverrides) -> Self {
        Self {
            assistant_id: assistant.as_str().to_owned(),
            overrides: overrides
                .entries()
                .iter()
                .map(|o| ToolOverrideBody {
                    server_id: o.server_id.to_string(),
                    tool: o.tool.clone(),
                    name: o.name.clone(),
                    description: o.description.clone(),
                    hidden: o.hidden,
                    pinned: o.pinned,
                })
                .collect(),
        }
    }
}

/// The assistant's tool curation: renamed, re-described, hidden and pinned tools.
#[utoipa::path(get, path = "/api/assistants/{id}/tool-overrides", tag = "assistants",
    params(("id" = ExternalId, Path, description = "The assistant's id (the backend's)")), responses((status = OK, body = ToolOverridesView)))]
async fn tool_overrides(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<ToolOverridesView>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let overrides = state
        .services
        .assistants
        .tool_overrides(&ctx.user, &assistant)
        .await?;
    Ok(JsonResponse(ToolOverridesView::new(&assistant, &overrides)))
}

/// Replaces the assistant's tool curation (an empty list clears it).
#[utoipa::path(put, path = "/api/assistants/{id}/tool-overrides", tag = "assistants",
    params(("id" = ExternalId, Path, description = "The assistant's id (the backend's)")), request_body = ToolOverridesRequest, responses((status = OK, body = ToolOverridesView)))]
async fn set_tool_overrides(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(body): Json<ToolOverridesRequest>,
) -> Result<JsonResponse<ToolOverridesView>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let mut entries = Vec::with_capacity(body.overrides.len());
    for (i, o) in body.overrides.into_iter().enumerate() {
        let server_id = Uuid::parse_str(&o.server_id).map_err(|_| {
            Error::validation(format!(
                "overrides[{i}].serverId: '{}' is not a server id",
                o.server_id
            ))
        })?;
        entries.push(crate::domain::ToolOverride {
            server_id,
            tool: o.tool,
            name: o.name,
            description: o.description,
            hidden: o.hidden,
            pinned: o.pinned,
        });
    }
    let overrides = state
        .services
        .assistants
        .set_tool_overrides(&ctx.user, &assistant, entries)
        .await?;
    Ok(JsonResponse(ToolOverridesView::new(&assistant, &overrides)))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolExposureRequest {
    /// `all` (every tool) or `search` (`search_tools`, `call_tool` and the pinned tools).
    tool_exposure: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ToolExposureView {
    assistant_id: String,
    tool_exposure: &'static str,
}

/// How the gateway and the agent loop offer the assistant's tools to a model: every tool
/// (`all`), or `search_tools`, `call_tool` and the pinned tools (`search`).
#[utoipa::path(get, path = "/api/assistants/{id}/tool-exposure", tag = "assistants",
    params(("id" = ExternalId, Path, description = "The assistant's id (the backend's)")), responses((status = OK, body = ToolExposureView)))]
async fn tool_exposure(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<ToolExposureView>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let exposure = state
        .services
        .assistants
        .tool_exposure(&ctx.user, &assistant)
        .await?;
    Ok(JsonResponse(ToolExposureView {
        assistant_id: assistant.as_str().to_owned(),
        tool_exposure: exposure.as_str(),
    }))
}

/// Sets how the assistant's tools are offered to models (`{"toolExposure": "search"}`).
#[utoipa::path(put, path = "/api/assistants/{id}/tool-exposure", tag = "assistants",
    params(("id" = ExternalId, Path, description = "The assistant's id (the backend's)")), request_body = ToolExposureRequest, responses((status = OK, body = ToolExposureView)))]
async fn set_tool_exposure(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(body): Json<ToolExposureRequest>,
) -> Result<JsonResponse<ToolExposureView>, ApiError> {
    let assistant = AssistantId::parse(&id)?;
    let exposure = state
        .services
        .assistants
        .set_tool_exposure(&ctx.user, &assistant, &body.tool_exposure)
        .await?;
    Ok(JsonResponse(ToolExposureView {
        assistant_id: assistant.as_str().to_owned(),
        tool_exposure: exposure.as_str(),
    }))
}
