//! `/api/mcp-servers`: the caller's MCP server definitions.

use std::collections::BTreeMap;

use axum::Json as JsonResponse;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::UserContext;
use super::error::ApiError;
use super::extract::{Json, Path};
use crate::domain::{McpServer, Transport};
use crate::services::ServerInput;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(read, update, remove))
}

/// A server as users see it: secrets masked, only the fields of its transport present.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Server)]
pub struct ServerView {
    id: String,
    name: String,
    /// `stdio`, `sse`, `streamableHttp` or `embedded`.
    #[serde(rename = "type")]
    transport: &'static str,
    is_active: bool,
    /// The user name, password and query values show as `********`; sent back unchanged,
    /// they keep their stored values.
    #[serde(skip_serializing_if = "Option::is_none")]
    base_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<BTreeMap<String, String>>,
    /// The pre-registered OAuth client (`clientSecret` shown as `********`) and scopes.
    #[serde(skip_serializing_if = "Option::is_none")]
    oauth: Option<crate::services::OAuthInput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preset: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preset_args: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    embedded: Option<&'static str>,
    timeout_secs: Option<u32>,
    disabled_tools: Vec<String>,
    auto_approve_tools: Vec<String>,
    sampling: crate::domain::SamplingSettings,
    roots: Vec<crate::domain::RootEntry>,
    /// `user` or `conversation`.
    session_scope: &'static str,
    /// The catalog entry the server was made from; its transport follows the entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    catalog: Option<String>,
    /// The entry's version the user pinned (absent: the entry's current one).
    #[serde(skip_serializing_if = "Option::is_none")]
    catalog_version: Option<String>,
    /// The values of the entry's inputs, secret ones as `••••••`.
    #[serde(skip_serializing_if = "Option::is_none")]
    values: Option<BTreeMap<String, String>>,
    /// A team server's group: the operator defines it, every member uses it with their
    /// own connection and credentials, and only the operator changes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    team: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<McpServer> for ServerView {
    fn from(server: McpServer) -> Self {
        let spec = server.spec;
        let mut view = ServerView {
            id: server.id.to_string(),
            name: spec.name.as_str().to_owned(),
            transport: spec.transport.kind().as_str(),
            is_active: spec.is_active,
            base_url: None,
            headers: None,
            oauth: None,
            preset: None,
            preset_args: None,
            command: None,
            args: None,
            env: None,
            embedded: None,
            timeout_secs: spec.timeout_secs,
            disabled_tools: spec.disabled_tools,
            auto_approve_tools: spec.auto_approve_tools,
            sampling: spec.sampling,
            roots: spec.roots,
            session_scope: spec.session_scope.as_str(),
            catalog: None,
            catalog_version: None,
            values: None,
            team: server.team,
            created_at: server.created_at,
            updated_at: server.updated_at,
        };
        if let Some(using) = spec.catalog {
            // Only what the entry resolved to: its inputs are set with `values`.
            let using = *using;
            let mut values = using.values;
            values.extend(using.secrets.masked());
            view.catalog = Some(using.entry);
            view.catalog_version = using.version;
            view.values = Some(values);
            match spec.transport {
                Transport::Sse(endpoint) | Transport::StreamableHttp(endpoint) => {
                    view.base_url = Some(endpoint.url.masked());
                    view.oauth = (!endpoint.oauth.is_empty())
                        .then(|| crate::services::OAuthInput::masked(&endpoint.oauth));
                }
                Transport::Stdio(launch) => {
                    view.command = Some(launch.command);
                    view.args = Some(launch.args);
                }
                Transport::Embedded(_) => {}
            }
            return view;
        }
        match spec.transport {
            Transport::Sse(endpoint) | Transport::StreamableHttp(endpoint) => {
                view.base_url = Some(endpoint.url.masked());
                view.headers = Some(endpoint.headers.masked());
                view.oauth = (!endpoint.oauth.is_empty())
                    .then(|| crate::services::OAuthInput::masked(&endpoint.oauth));
            }
            Transport::Embedded(kind) => view.embedded = Some(kind.as_str()),
            Transport::Stdio(launch) => {
                view.env = Some(launch.env.masked());
                view.preset = Some(launch.preset);
                view.preset_args = Some(launch.preset_args);
                view.command = Some(launch.command);
                view.args = Some(launch.args);
            }
        }
        view
    }
}

#[derive(Serialize, ToSchema)]
struct ServerList {
    servers: Vec<ServerView>,
}

/// The caller's servers, secrets masked.
#[utoipa::path(get, path = "/api/mcp-servers", tag = "servers",
    responses((status = OK, body = ServerList)))]
async fn list(
    State(state): State<AppState>,
    ctx: UserContext,
) -> Result<JsonResponse<ServerList>, ApiError> {
    let servers = state.services.servers.list(&ctx.user).await?;
    Ok(JsonResponse(ServerList {
        servers: servers.into_iter().map(ServerView::from).collect(),
    }))
}

/// Creates a server; the transport is inferred from the URL when `type` is omitted.
#[utoipa::path(post, path = "/api/mcp-servers", tag = "servers",
    request_body = ServerInput, responses((status = CREATED, body = ServerView)))]
async fn create(
    State(state): State<AppState>,
    ctx: UserContext,
    Json(input): Json<ServerInput>,
) -> Result<(StatusCode, JsonResponse<ServerView>), ApiError> {
    let server = state.services.servers.create(&ctx.user, input).await?;
    Ok((StatusCode::CREATED, JsonResponse(server.into())))
}

/// One server.
#[utoipa::path(get, path = "/api/mcp-servers/{id}", tag = "servers",
    params(("id" = String, Path, description = "The server's id")), responses((status = OK, body = ServerView)))]
async fn read(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<ServerView>, ApiError> {
    Ok(JsonResponse(
        state.services.servers.view(&ctx.user, &id).await?.into(),
    ))
}

/// Fields sent replace, fields omitted are kept; `"********"` keeps a stored secret.
#[utoipa::path(put, path = "/api/mcp-servers/{id}", tag = "servers",
    params(("id" = String, Path, description = "The server's id")), request_body = ServerInput, responses((status = OK, body = ServerView)))]
async fn update(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
    Json(input): Json<ServerInput>,
) -> Result<JsonResponse<ServerView>, ApiError> {
    Ok(JsonResponse(
        state
            .services
            .servers
            .update(&ctx.user, &id, input, ctx.principal.admin_key())
            .await?
            .into(),
    ))
}

/// Deletes the server, stops its connection and unbinds it from every assistant.
#[utoipa::path(delete, path = "/api/mcp-servers/{id}", tag = "servers",
    params(("id" = String, Path, description = "The server's id")), responses((status = NO_CONTENT)))]
async fn remove(
    State(state): State<AppState>,
    ctx: UserContext,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state
        .services
        .servers
        .delete(&ctx.user, &id, ctx.principal.admin_key())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
