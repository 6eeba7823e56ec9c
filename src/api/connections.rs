//! `/admin/connections`: every live (user, server) connection, stop and refresh;
//! `/admin/stats`: the service's counts at a glance.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json as JsonResponse, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::AppState;
use super::auth::AdminContext;
use super::error::ApiError;
use super::extract::{Path, Query};
use crate::pool::{ConnectionCensus, ConnectionInfo};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/admin/connections", get(list))
        .route("/admin/stats", get(stats))
        .route("/admin/connections/{user}/{server}", delete(stop))
        .route("/admin/connections/{user}/{server}/refresh", post(refresh))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionView {
    user_id: String,
    server_id: String,
    server_name: String,
    transport: &'static str,
    state: &'static str,
    connected_at: Option<DateTime<Utc>>,
    last_active_at: DateTime<Utc>,
    last_error: Option<String>,
    server_info: Option<Value>,
}

impl From<ConnectionInfo> for ConnectionView {
    fn from(info: ConnectionInfo) -> Self {
        let status = info.status;
        Self {
            user_id: info.key.user.as_str().to_owned(),
            server_id: info.key.server.to_string(),
            server_name: info.server_name,
            transport: info.transport,
            state: status.state.as_str(),
            connected_at: status.connected_at,
            last_active_at: info.last_active_at,
            last_error: status.last_error,
            server_info: status
                .server_name
                .map(|name| json!({"name": name, "version": status.server_version})),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    /// Only this user's connections.
    user_id: Option<String>,
    /// Only connections in this state (disconnected, connecting, connected, error).
    state: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    _admin: AdminContext,
    Query(query): Query<ListQuery>,
) -> JsonResponse<Value> {
    let connections: Vec<ConnectionView> = state
        .services
        .upstream
        .connections()
        .into_iter()
        .filter(|c| {
            query
                .user_id
                .as_deref()
                .is_none_or(|u| c.key.user.as_str() == u)
        })
        .filter(|c| {
            query
                .state
                .as_deref()
                .is_none_or(|s| c.status.state.as_str() == s)
        })
        .map(ConnectionView::from)
        .collect();
    JsonResponse(json!({ "count": connections.len(), "connections": connections }))
}

async fn stats(State(state): State<AppState>, _admin: AdminContext) -> JsonResponse<Value> {
    let census = ConnectionCensus::of(&state.services.upstream.connections());
    JsonResponse(json!({
        "connections": {
            "total": census.total,
            "connected": census.connected,
            "connecting": census.connecting,
            "error": census.error,
            "stdio": census.stdio,
        },
        "confirmations": {
            "activeMessages": state.services.confirmations.active_messages(),
        },
    }))
}

async fn stop(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path((user, server)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    state
        .services
        .upstream
        .stop_connection(&user, &server)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn refresh(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path((user, server)): Path<(String, String)>,
) -> Result<JsonResponse<ConnectionView>, ApiError> {
    let info = state
        .services
        .upstream
        .refresh_connection(&user, &server)
        .await?;
    Ok(JsonResponse(info.into()))
}
