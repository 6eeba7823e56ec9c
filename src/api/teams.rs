//! `/admin/teams/{group}/servers`: team servers, defined by the operator for a group.
//! Every member of the group (`PUT /admin/users/{user}/attributes`) sees them in
//! `GET /api/mcp-servers`, binds and calls them, each with their own connection and their
//! own OAuth tokens; only an admin key changes them.

use axum::Json as JsonResponse;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::AdminContext;
use super::error::ApiError;
use super::extract::{Json, Path};
use super::servers::ServerView;
use crate::domain::{UserId, check_group};
use crate::services::ServerInput;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(update, remove))
}

/// The owner of `group`'s team servers, the group's name checked.
fn team(group: &str) -> Result<UserId, ApiError> {
    check_group(group).map_err(crate::error::Error::from)?;
    Ok(UserId::of_team(group))
}

#[derive(Serialize, ToSchema)]
struct TeamServerList {
    servers: Vec<ServerView>,
}

/// The group's team servers, secrets masked.
#[utoipa::path(get, path = "/admin/teams/{group}/servers", tag = "admin",
    params(("group" = String, Path, description = "The group's name")),
    responses((status = OK, body = TeamServerList)))]
async fn list(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(group): Path<String>,
) -> Result<JsonResponse<TeamServerList>, ApiError> {
    let servers = state.services.servers.list(&team(&group)?).await?;
    Ok(JsonResponse(TeamServerList {
        servers: servers.into_iter().map(ServerView::from).collect(),
    }))
}

/// Defines a team server (the body of `POST /api/mcp-servers`).
#[utoipa::path(post, path = "/admin/teams/{group}/servers", tag = "admin",
    params(("group" = String, Path, description = "The group's name")),
    request_body = ServerInput, responses((status = CREATED, body = ServerView)))]
async fn create(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(group): Path<String>,
    Json(input): Json<ServerInput>,
) -> Result<(StatusCode, JsonResponse<ServerView>), ApiError> {
    let server = state.services.servers.create(&team(&group)?, input).await?;
    Ok((StatusCode::CREATED, JsonResponse(server.into())))
}

/// Changes a team server; every member's connection to it closes, and a new origin or
/// path forgets every member's tokens.
#[utoipa::path(put, path = "/admin/teams/{group}/servers/{id}", tag = "admin",
    params(("group" = String, Path, description = "The group's name"),
        ("id" = String, Path, description = "The server's id")),
    request_body = ServerInput, responses((status = OK, body = ServerView)))]
async fn update(
    State(state): State<AppState>,
    admin: AdminContext,
    Path((group, id)): Path<(String, String)>,
    Json(input): Json<ServerInput>,
) -> Result<JsonResponse<ServerView>, ApiError> {
    let server = state
        .services
        .servers
        .update(&team(&group)?, &id, input, Some(admin.key_id))
        .await?;
    Ok(JsonResponse(server.into()))
}

/// Deletes a team server: every member's connection stops and their tokens are revoked.
#[utoipa::path(delete, path = "/admin/teams/{group}/servers/{id}", tag = "admin",
    params(("group" = String, Path, description = "The group's name"),
        ("id" = String, Path, description = "The server's id")),
    responses((status = NO_CONTENT)))]
async fn remove(
    State(state): State<AppState>,
    admin: AdminContext,
    Path((group, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    state
        .services
        .servers
        .delete(&team(&group)?, &id, Some(admin.key_id))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
