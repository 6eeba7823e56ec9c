//! What operators read beyond connections: `/admin/users/{id}` (a user's assistants,
//! bindings, gateway tokens by name and open tool calls), `/admin/audit` (filtered,
//! paged), `/admin/instances` and `/admin/metrics/recent` (the last 15 minutes of tool
//! calls). The console draws these; they are plain admin API for anyone else.

use axum::Json as JsonResponse;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::AdminContext;
use super::error::ApiError;
use super::external_id::ExternalId;
use super::extract::{Path, Query};
use crate::domain::{ToolCallRecord, UserId};
use crate::error::Error;
use crate::metrics::RecentSlot;
use crate::services::operators::{AuditQuery, Paging, UserOverview};
use crate::store::AuditRow;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(users))
        .routes(routes!(user))
        .routes(routes!(servers))
        .routes(routes!(approvals))
        .routes(routes!(audit))
        .routes(routes!(audit_row))
        .routes(routes!(instances))
        .routes(routes!(recent_calls))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct GatewayTokenName {
    id: String,
    name: String,
    created_at: DateTime<Utc>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct AssistantView {
    id: String,
    /// Bound servers, in order.
    server_ids: Vec<String>,
    /// Names only: a token is shown once, when it is made.
    gateway_tokens: Vec<GatewayTokenName>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct OpenMessageView {
    message_id: String,
    conversation_id: Option<String>,
    created_at: DateTime<Utc>,
    /// Only its calls still open (`pending` waits for a decision, `invoking` runs).
    tool_calls: Vec<ToolCallRecord>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct UserView {
    user_id: String,
    assistants: Vec<AssistantView>,
    /// Newest first, at most 100 messages.
    open_tool_calls: Vec<OpenMessageView>,
}

impl UserView {
    fn new(user: &UserId, overview: UserOverview) -> Self {
        Self {
            user_id: user.as_str().to_owned(),
            assistants: overview
                .assistants
                .into_iter()
                .map(|a| AssistantView {
                    id: a.id.as_str().to_owned(),
                    server_ids: a.servers.iter().map(ToString::to_string).collect(),
                    gateway_tokens: a
                        .gateway_tokens
                        .into_iter()
                        .map(|t| GatewayTokenName {
                            id: t.id.to_string(),
                            name: t.name,
                            created_at: t.created_at,
                        })
                        .collect(),
                })
                .collect(),
            open_tool_calls: overview
                .open_messages
                .into_iter()
                .map(|m| OpenMessageView {
                    message_id: m.id.to_string(),
                    conversation_id: m.conversation_id.map(|c| c.to_string()),
                    created_at: m.created_at,
                    tool_calls: m
                        .tool_calls
                        .into_iter()
                        .filter(|c| c.status.is_open())
                        .collect(),
                })
                .collect(),
        }
    }
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListParams {
    /// Only rows holding this text (any case): a user's id; for servers also their name
    /// or URL.
    search: Option<String>,
    /// Servers only: those whose connection on the answering instance is in this state
    /// (`connected`, `connecting`, `disconnected`, `error`, `auth_required`).
    state: Option<String>,
    /// Page number from 0.
    page: Option<u64>,
    /// Rows per page, 1 to 200 (50 when absent).
    page_size: Option<u64>,
}

impl ListParams {
    fn paging(&self) -> Paging {
        Paging {
            page: self.page,
            page_size: self.page_size,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct UserSummaryView {
    user_id: String,
    servers: u64,
    /// Calls waiting for a decision or running.
    open_calls: u64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct UserListView {
    users: Vec<UserSummaryView>,
    page: u64,
    page_size: u64,
    /// Rows in all, counted up to 10,000 (see `totalCapped`).
    total: u64,
    /// There are more than `total` rows: narrow the filter to count them.
    total_capped: bool,
}

/// Users with servers, by id, with how many servers and open calls each has; `search`
/// finds them by part of their id.
#[utoipa::path(get, path = "/admin/users", tag = "admin",
    params(ListParams), responses((status = OK, body = UserListView)))]
async fn users(
    State(state): State<AppState>,
    _admin: AdminContext,
    Query(params): Query<ListParams>,
) -> Result<JsonResponse<UserListView>, ApiError> {
    if params.state.is_some() {
        return Err(Error::validation("state applies to servers, not users").into());
    }
    let paging = params.paging();
    let page = state
        .services
        .operators
        .users(params.search, paging)
        .await?;
    Ok(JsonResponse(UserListView {
        users: page
            .rows
            .into_iter()
            .map(|u| UserSummaryView {
                user_id: u.user_id,
                servers: u.servers,
                open_calls: u.open_calls,
            })
            .collect(),
        page: page.page,
        page_size: page.page_size,
        total: page.total,
        total_capped: page.total_capped,
    }))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ServerSummaryView {
    id: String,
    user_id: String,
    name: String,
    /// `stdio`, `sse`, `streamableHttp` or `embedded`.
    r#type: &'static str,
    is_active: bool,
    /// Where it is: the URL (credentials masked), the command, or the preset.
    target: String,
    /// The catalog entry it was made from.
    #[serde(skip_serializing_if = "Option::is_none")]
    catalog: Option<String>,
    disabled_tools: Vec<String>,
    auto_approve_tools: Vec<String>,
    /// Its user's shared connection on the instance that answered, if one is live:
    /// `state`, `lastError`, `history` as in `/admin/connections`.
    #[schema(value_type = Option<Object>)]
    connection: Option<crate::api::connections::ConnectionView>,
    /// A stdio server's private home on the instance that answered (its sandbox's
    /// `/home/mcp`): the bytes of its files, read up to 100,000 entries. Absent for
    /// other servers and for one that never ran there.
    #[serde(skip_serializing_if = "Option::is_none")]
    home_bytes: Option<u64>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ServerListView {
    servers: Vec<ServerSummaryView>,
    page: u64,
    page_size: u64,
    /// Rows in all, counted up to 10,000 (see `totalCapped`).
    total: u64,
    /// There are more than `total` rows: narrow the filter to count them.
    total_capped: bool,
}

/// Every user's servers, by user then name; `search` finds them by part of their name,
/// their user's id or their URL.
#[utoipa::path(get, path = "/admin/servers", tag = "admin",
    params(ListParams), responses((status = OK, body = ServerListView)))]
async fn servers(
    State(state): State<AppState>,
    _admin: AdminContext,
    Query(params): Query<ListParams>,
) -> Result<JsonResponse<ServerListView>, ApiError> {
    let paging = params.paging();
    let page = state
        .services
        .operators
        .servers(params.search, params.state, paging)
        .await?;
    Ok(JsonResponse(ServerListView {
        servers: page
            .rows
            .into_iter()
            .map(|summary| {
                let server = summary.server;
                let spec = &server.spec;
                ServerSummaryView {
                    id: server.id.to_string(),
                    user_id: server.user_id.as_str().to_owned(),
                    name: spec.name.as_str().to_owned(),
                    r#type: spec.transport.kind().as_str(),
                    is_active: spec.is_active,
                    target: spec.transport.describe(),
                    catalog: spec.catalog.as_ref().map(|c| c.entry.clone()),
                    disabled_tools: spec.disabled_tools.clone(),
                    auto_approve_tools: spec.auto_approve_tools.clone(),
                    connection: summary.connection.map(Into::into),
                    home_bytes: summary.home_bytes,
                }
            })
            .collect(),
        page: page.page,
        page_size: page.page_size,
        total: page.total,
        total_capped: page.total_capped,
    }))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct WaitingCallView {
    user_id: String,
    message_id: String,
    conversation_id: Option<String>,
    /// When it was parked.
    since: DateTime<Utc>,
    tool_call: ToolCallRecord,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ApprovalListView {
    calls: Vec<WaitingCallView>,
    page: u64,
    page_size: u64,
    /// Rows in all, counted up to 10,000 (see `totalCapped`).
    total: u64,
    /// There are more than `total` rows: narrow the filter to count them.
    total_capped: bool,
}

/// Every call waiting for a decision, across users, oldest first. Decide one with
/// `POST /api/messages/{messageId}/tool-confirm` as its user (`X-User-Id`): an admin
/// key's decision is audit-logged as that key's.
#[utoipa::path(get, path = "/admin/approvals", tag = "admin",
    params(ListParams), responses((status = OK, body = ApprovalListView)))]
async fn approvals(
    State(state): State<AppState>,
    _admin: AdminContext,
    Query(params): Query<ListParams>,
) -> Result<JsonResponse<ApprovalListView>, ApiError> {
    if params.search.is_some() || params.state.is_some() {
        return Err(Error::validation("the approval queue takes no search").into());
    }
    let page = state.services.operators.approvals(params.paging()).await?;
    Ok(JsonResponse(ApprovalListView {
        calls: page
            .rows
            .into_iter()
            .map(|call| WaitingCallView {
                user_id: call.user_id.as_str().to_owned(),
                message_id: call.message_id.to_string(),
                conversation_id: call.conversation_id.map(|c| c.to_string()),
                since: call.since,
                tool_call: call.record,
            })
            .collect(),
        page: page.page,
        page_size: page.page_size,
        total: page.total,
        total_capped: page.total_capped,
    }))
}

/// One user as support sees them: assistants with their bound servers and gateway token
/// names, and their open tool calls. Their servers are at `GET /api/mcp-servers` (with
/// `X-User-Id`), secrets masked.
#[utoipa::path(get, path = "/admin/users/{user}", tag = "admin",
    params(("user" = ExternalId, Path, description = "The user's id")),
    responses((status = OK, body = UserView)))]
async fn user(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(user): Path<String>,
) -> Result<JsonResponse<UserView>, ApiError> {
    let user = UserId::parse(&user).map_err(|e| ApiError::InvalidUserId(e.to_string()))?;
    let overview = state.services.operators.user_overview(&user).await?;
    Ok(JsonResponse(UserView::new(&user, overview)))
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct AuditParams {
    /// Only this user's rows.
    user_id: Option<String>,
    /// Only this server's rows (its id).
    server_id: Option<String>,
    /// Only rows of servers of this name.
    server: Option<String>,
    /// Only calls that came in by this door: `rest`, `chat`, `gateway`, `xiaozhi`, `grpc`.
    via: Option<String>,
    /// `json` (a page, the default), or every matching row as `ndjson` or `csv` (a
    /// download; `page` and `pageSize` do not apply).
    format: Option<String>,
    /// Only calls of this tool (its name on the server).
    tool: Option<String>,
    /// `done`, `error`, `cancelled` (calls), `approved`, `rejected` (admin decisions),
    /// `server_changed`, `server_deleted` (an admin's changes), `connect_failed`.
    outcome: Option<String>,
    /// From this time on (RFC 3339).
    from: Option<DateTime<Utc>>,
    /// Before this time (RFC 3339).
    to: Option<DateTime<Utc>>,
    /// Page number from 0.
    page: Option<u64>,
    /// Rows per page, 1 to 200 (50 when absent).
    page_size: Option<u64>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct AuditEntryView {
    id: String,
    user_id: String,
    server_id: Option<String>,
    server_name: String,
    tool_name: String,
    message_id: Option<String>,
    /// `done`, `error`, `cancelled` for a call; `approved`, `rejected` for a decision.
    outcome: String,
    error_code: Option<String>,
    /// Why the call failed, in words.
    error_message: Option<String>,
    latency_ms: Option<i64>,
    /// The admin key that approved or rejected the call for its user.
    decided_by: Option<String>,
    /// The door a call came in by: `rest`, `chat`, `gateway`, `xiaozhi`, `grpc`.
    via: Option<String>,
    /// The API key or gateway token (or Xiaozhi bridge) it came with.
    key_id: Option<String>,
    /// `keyId` is an admin's key acting for the user.
    by_admin: bool,
    /// A server's view (MCP Apps) made the call through its host.
    from_app: bool,
    /// The instance that ran it.
    instance_id: Option<String>,
    created_at: DateTime<Utc>,
    /// Only in `/admin/audit/{id}` and exports: the arguments and result as the
    /// redaction rule left them (README, "Audit log").
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<String>,
}

impl AuditEntryView {
    fn new(row: AuditRow, details: bool) -> Self {
        Self {
            id: row.id.to_string(),
            user_id: row.user_id,
            server_id: row.server_id.map(|s| s.to_string()),
            server_name: row.server_name,
            tool_name: row.tool_name,
            message_id: row.message_id.map(|m| m.to_string()),
            outcome: row.outcome,
            error_code: row.error_code,
            error_message: row.error_message,
            latency_ms: row.latency_ms,
            decided_by: row.decided_by,
            via: row.via,
            key_id: row.key_id,
            by_admin: row.by_admin,
            from_app: row.from_app,
            instance_id: row.instance_id.map(|i| i.to_string()),
            created_at: row.created_at,
            arguments: row.arguments.filter(|_| details),
            result: row.result.filter(|_| details),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct AuditPageView {
    entries: Vec<AuditEntryView>,
    page: u64,
    page_size: u64,
    /// Rows in all, counted up to 10,000 (see `totalCapped`).
    total: u64,
    /// There are more than `total` rows: narrow the filter to count them.
    total_capped: bool,
}

/// The audit log, newest first: every tool call on every path (with who, the door, the
/// outcome and its error) and admins' decisions on users' calls. `format=ndjson` or
/// `format=csv` downloads every matching row instead of a page.
#[utoipa::path(get, path = "/admin/audit", tag = "admin",
    params(AuditParams), responses((status = OK, body = AuditPageView)))]
async fn audit(
    State(state): State<AppState>,
    _admin: AdminContext,
    Query(params): Query<AuditParams>,
) -> Result<Response, ApiError> {
    let query = AuditQuery {
        user_id: params.user_id,
        server_id: params.server_id,
        server: params.server,
        via: params.via,
        tool: params.tool,
        outcome: params.outcome,
        from: params.from,
        to: params.to,
        page: params.page,
        page_size: params.page_size,
    };
    let operators = &state.services.operators;
    let export = match params.format.as_deref() {
        None | Some("json") => None,
        Some("ndjson") => Some(Export::Ndjson),
        Some("csv") => Some(Export::Csv),
        Some(_) => return Err(Error::validation("format must be json, ndjson or csv").into()),
    };
    let Some(export) = export else {
        let page = operators.audit(query).await?;
        return Ok(JsonResponse(AuditPageView {
            entries: page
                .rows
                .into_iter()
                .map(|row| AuditEntryView::new(row, false))
                .collect(),
            page: page.page,
            page_size: page.page_size,
            total: page.total,
            total_capped: page.total_capped,
        })
        .into_response());
    };
    let pages = operators.audit_export(query).await?;
    let rows = pages.map(move |page| {
        let rows = page.map_err(|e| {
            // Headers are gone: the download ends short, and the log says why.
            tracing::error!(error = %e, "an audit export stopped");
            std::io::Error::other(e.to_string())
        })?;
        export.chunk(rows)
    });
    // A CSV export has its header even when no row matches.
    let body = futures::stream::iter(export.header().map(Ok)).chain(rows);
    Ok((
        [
            (CONTENT_TYPE, export.content_type()),
            (CONTENT_DISPOSITION, export.disposition()),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

/// A download of the audit log.
#[derive(Clone, Copy)]
enum Export {
    Ndjson,
    Csv,
}

/// A cell a spreadsheet will not run as a formula: text that begins with `=`, `+`, `-`,
/// `@`, a tab or a carriage return gets a leading `'` (OWASP's CSV injection advice);
/// user ids, tool names, arguments and results are chosen by users and their servers.
fn inert(text: String) -> String {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}")
    } else {
        text
    }
}

/// The columns of a CSV export, in order.
const CSV_COLUMNS: [&str; 19] = [
    "id",
    "createdAt",
    "userId",
    "serverId",
    "serverName",
    "toolName",
    "messageId",
    "outcome",
    "errorCode",
    "errorMessage",
    "latencyMs",
    "decidedBy",
    "via",
    "keyId",
    "byAdmin",
    "fromApp",
    "instanceId",
    "arguments",
    "result",
];

impl Export {
    fn content_type(self) -> &'static str {
        match self {
            Export::Ndjson => "application/x-ndjson",
            Export::Csv => "text/csv; charset=utf-8",
        }
    }

    fn disposition(self) -> &'static str {
        match self {
            Export::Ndjson => "attachment; filename=\"audit.ndjson\"",
            Export::Csv => "attachment; filename=\"audit.csv\"",
        }
    }

    fn header(self) -> Option<Vec<u8>> {
        match self {
            Export::Ndjson => None,
            Export::Csv => {
                let mut csv = csv::Writer::from_writer(Vec::new());
                csv.write_record(CSV_COLUMNS).ok()?;
                csv.into_inner().ok()
            }
        }
    }

    fn chunk(self, rows: Vec<AuditRow>) -> std::io::Result<Vec<u8>> {
        match self {
            Export::Ndjson => {
                let mut out = Vec::new();
                for row in rows {
                    serde_json::to_writer(&mut out, &AuditEntryView::new(row, true))?;
                    out.push(b'\n');
                }
                Ok(out)
            }
            Export::Csv => {
                let mut csv = csv::Writer::from_writer(Vec::new());
                for row in rows {
                    let optional = |v: Option<String>| inert(v.unwrap_or_default());
                    csv.write_record([
                        row.id.to_string(),
                        row.created_at.to_rfc3339(),
                        inert(row.user_id),
                        optional(row.server_id.map(|s| s.to_string())),
                        inert(row.server_name),
                        inert(row.tool_name),
                        optional(row.message_id.map(|m| m.to_string())),
                        row.outcome,
                        optional(row.error_code),
                        optional(row.error_message),
                        optional(row.latency_ms.map(|l| l.to_string())),
                        optional(row.decided_by),
                        optional(row.via),
                        optional(row.key_id),
                        row.by_admin.to_string(),
                        row.from_app.to_string(),
                        optional(row.instance_id.map(|i| i.to_string())),
                        optional(row.arguments),
                        optional(row.result),
                    ])?;
                }
                csv.into_inner()
                    .map_err(|e| std::io::Error::other(e.to_string()))
            }
        }
    }
}

/// One audit row with what it kept of the call's arguments and result.
#[utoipa::path(get, path = "/admin/audit/{id}", tag = "admin",
    params(("id" = String, Path, description = "The row's id")),
    responses((status = OK, body = AuditEntryView), (status = NOT_FOUND, description = "AUDIT_ROW_NOT_FOUND")))]
async fn audit_row(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<AuditEntryView>, ApiError> {
    let row = state.services.operators.audit_row(&id).await?;
    Ok(JsonResponse(AuditEntryView::new(row, true)))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct InstanceView {
    id: String,
    started_at: DateTime<Utc>,
    heartbeat_at: DateTime<Utc>,
    /// Its heartbeat is within `cluster.instance_ttl_secs`.
    live: bool,
    /// The instance that answered this request.
    me: bool,
}

#[derive(Serialize, ToSchema)]
struct InstanceList {
    instances: Vec<InstanceView>,
}

/// The instances sharing the database.
#[utoipa::path(get, path = "/admin/instances", tag = "admin",
    responses((status = OK, body = InstanceList)))]
async fn instances(
    State(state): State<AppState>,
    _admin: AdminContext,
) -> Result<JsonResponse<InstanceList>, ApiError> {
    let instances = state.services.operators.instances().await?;
    Ok(JsonResponse(InstanceList {
        instances: instances
            .into_iter()
            .map(|i| InstanceView {
                id: i.id.to_string(),
                started_at: i.started_at,
                heartbeat_at: i.heartbeat_at,
                live: i.live,
                me: i.me,
            })
            .collect(),
    }))
}

/// The recent-calls window as JSON (also sent on `/admin/events` as `calls`).
pub(super) fn recent_calls_body(slots: &[RecentSlot]) -> Value {
    let slots: Vec<Value> = slots
        .iter()
        .map(|slot| {
            let errors: Map<String, Value> = slot
                .errors
                .iter()
                .map(|(code, count)| ((*code).to_owned(), json!(count)))
                .collect();
            json!({
                "start": DateTime::from_timestamp(slot.start, 0),
                "calls": slot.calls,
                "errors": errors,
                "p50Ms": slot.p50_ms,
                "p99Ms": slot.p99_ms,
            })
        })
        .collect();
    json!({
        "slotSeconds": crate::metrics::SLOT_SECS,
        "slots": slots,
    })
}

/// Tool calls on this instance over the last 15 minutes, in 10-second slots: calls,
/// errors by code (`tool_error`: the tool answered `isError`), p50 and p99 latency.
#[utoipa::path(get, path = "/admin/metrics/recent", tag = "admin",
    responses((status = OK, body = Value)))]
async fn recent_calls(State(state): State<AppState>, _admin: AdminContext) -> JsonResponse<Value> {
    JsonResponse(recent_calls_body(
        &state.services.pool.metrics().recent_calls(),
    ))
}
