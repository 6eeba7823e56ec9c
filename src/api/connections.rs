//! `/admin/connections`: every live (user, server) connection, stop and refresh;
//! `/admin/stats`: the service's counts at a glance.

use axum::Json as JsonResponse;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::AdminContext;
use super::error::ApiError;
use super::external_id::ExternalId;
use super::extract::{Path, Query};
use crate::pool::{ConnectionInfo, census};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(stats))
        .routes(routes!(stop))
        .routes(routes!(refresh))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Connection)]
pub struct ConnectionView {
    user_id: String,
    server_id: String,
    server_name: String,
    /// The chat conversation or gateway session with a session of its own (servers
    /// whose `sessionScope` is `conversation`); absent for the user's shared one.
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<String>,
    /// A second session in 2025-11-25 beside the newest one of a server that speaks both,
    /// for gateway clients of that revision; absent for the others.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    older_clients: bool,
    transport: &'static str,
    /// `disconnected`, `connecting`, `connected`, `error` or `auth_required`.
    state: &'static str,
    connected_at: Option<DateTime<Utc>>,
    last_active_at: DateTime<Utc>,
    last_error: Option<String>,
    /// `{name, version}` as the server reported them.
    #[schema(value_type = Option<Object>)]
    server_info: Option<Value>,
    /// The last 20 changes of state, oldest first: `{state, at, cause}` (`cause` says
    /// why in words when it failed).
    #[schema(value_type = Vec<Object>)]
    history: Vec<Value>,
    /// A connected stdio server's processes now, in its process group or not (what
    /// `pool.max_stdio_processes` counts); only in the list, absent for other servers.
    #[serde(skip_serializing_if = "Option::is_none")]
    processes: Option<usize>,
    /// Their resident memory (RSS) in bytes; only in the list, absent for other servers.
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_bytes: Option<u64>,
    /// A connected stdio server's memory limit in bytes, where its cgroup enforces one
    /// (`pool.stdio_memory_limit_mib`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_limit_bytes: Option<u64>,
    /// Its limit on processes and threads together, where its cgroup enforces one.
    #[serde(skip_serializing_if = "Option::is_none")]
    task_limit: Option<u32>,
    /// A connected stdio server's process on the host (its process group's leader:
    /// bubblewrap when sandboxed, whose pid namespace holds the server); absent otherwise.
    #[serde(rename = "pid", skip_serializing_if = "Option::is_none")]
    process_group: Option<i32>,
}

impl ConnectionView {
    /// With what its stdio server runs, when it is one.
    fn with_usage(
        mut self,
        usage: &std::collections::BTreeMap<i32, crate::mcp::GroupUsage>,
    ) -> Self {
        if let Some(now) = self.process_group.and_then(|group| usage.get(&group)) {
            self.processes = Some(now.processes);
            self.memory_bytes = Some(now.memory_bytes);
        }
        self
    }
}

impl From<ConnectionInfo> for ConnectionView {
    fn from(info: ConnectionInfo) -> Self {
        let status = info.status;
        Self {
            user_id: info.key.user.as_str().to_owned(),
            server_id: info.key.server.to_string(),
            server_name: info.server_name,
            scope: info.key.scope.as_deref().map(str::to_owned),
            older_clients: info.key.revision == crate::mcp::SessionRevision::Initialize,
            transport: info.transport,
            state: status.state.as_str(),
            connected_at: status.connected_at,
            last_active_at: info.last_active_at,
            last_error: status.last_error,
            server_info: status
                .server_name
                .map(|name| json!({"name": name, "version": status.server_version})),
            history: status
                .history
                .iter()
                .map(|change| json!({"state": change.state.as_str(), "at": change.at, "cause": change.cause}))
                .collect(),
            processes: None,
            memory_bytes: None,
            memory_limit_bytes: status.limits.memory_bytes,
            task_limit: status.limits.processes,
            process_group: status.process_group,
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Only this user's connections.
    user_id: Option<String>,
    /// Only connections in this state (disconnected, connecting, connected, error).
    state: Option<String>,
}

/// Every live (user, server) connection.
#[utoipa::path(get, path = "/admin/connections", tag = "admin",
    params(ListQuery), responses((status = OK, body = Value)))]
async fn list(
    State(state): State<AppState>,
    _admin: AdminContext,
    Query(query): Query<ListQuery>,
) -> JsonResponse<Value> {
    let usage = state.services.upstream.process_usage();
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
        .map(|info| ConnectionView::from(info).with_usage(&usage))
        .collect();
    JsonResponse(json!({ "count": connections.len(), "connections": connections }))
}

/// Counts: connections by state and stdio, confirmation actors (messages with open tool
/// calls) and parked calls; whether stdio servers start isolated (`sandbox`).
#[utoipa::path(get, path = "/admin/stats", tag = "admin",
    responses((status = OK, body = Value)))]
async fn stats(State(state): State<AppState>, _admin: AdminContext) -> JsonResponse<Value> {
    JsonResponse(stats_body(&state))
}

/// The `/admin/stats` body (also sent on `/admin/events` as `stats`).
pub(super) fn stats_body(state: &AppState) -> Value {
    let census = census(&state.services.upstream.connections());
    let sandbox = state.services.upstream.sandbox_status();
    json!({
        "connections": {
            "total": census.total,
            "connected": census.connected,
            "connecting": census.connecting,
            "disconnected": census.disconnected,
            "error": census.error,
            "authRequired": census.auth_required,
            "stdio": census.stdio,
        },
        "confirmations": {
            "activeMessages": state.services.confirmations.active_messages(),
            "parkedCalls": state.services.confirmations.parked_calls(),
        },
        // Whether stdio servers start isolated here (`pool.sandbox`), and why not.
        "sandbox": {
            "mode": sandbox.mode,
            "isolated": sandbox.isolated,
            "problem": sandbox.problem,
        },
        // Whether this instance knows of others it tells about changes (PostgreSQL).
        "cluster": {
            "instance": state.services.cluster.me().to_string(),
            "hasCompany": state.services.cluster.has_company(),
        },
    })
}

/// Stops the connection now (its process is killed before the answer).
#[utoipa::path(delete, path = "/admin/connections/{user}/{server}", tag = "admin",
    params(("user" = ExternalId, Path, description = "The user's id"), ("server" = String, Path, description = "The server's id")), responses((status = NO_CONTENT)))]
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

/// Drops the connection's cached lists and any reconnect backoff.
#[utoipa::path(post, path = "/admin/connections/{user}/{server}/refresh", tag = "admin",
    params(("user" = ExternalId, Path, description = "The user's id"), ("server" = String, Path, description = "The server's id")), responses((status = OK, body = ConnectionView)))]
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
