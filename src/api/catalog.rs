//! `/api/catalog` (what users may make servers from) and `/admin/catalog` (import, enable,
//! pin, fix values, see who uses an entry). An entry's name holds one `/` (reverse DNS,
//! the Registry's rule), so it is two path segments here.

use std::collections::BTreeMap;

use axum::Json as JsonResponse;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::{AdminContext, UserContext};
use super::error::ApiError;
use super::extract::{Json, Path, Query};
use crate::domain::Field;
use crate::error::Error;
use crate::services::operators::Paging;
use crate::services::{EntryDetail, EntryUpdate, ImportedEntry, RegistrySync, SyncReport};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_for_user))
        .routes(routes!(read_for_user))
        .routes(routes!(list, import))
        .routes(routes!(import_registry))
        .routes(routes!(read, update, remove))
        .routes(routes!(servers))
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListParams {
    /// Entries holding this text (any case) in their name, title, description or tags.
    search: Option<String>,
    /// Entries with this tag (`npm`, `pypi`, `remote`, or the publisher's).
    tag: Option<String>,
    /// Page number from 0.
    page: Option<u64>,
    /// Entries per page, 1 to 200 (50 when absent).
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

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct PageParams {
    page: Option<u64>,
    page_size: Option<u64>,
}

/// A catalog entry as a user sees it: what it is and what to fill in.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct EntryView {
    name: String,
    title: String,
    description: String,
    /// `package` (runs here as a local process) or `remote`.
    kind: &'static str,
    /// The version a server made now runs.
    version: String,
    /// What to send as `values` when creating a server from it.
    fields: Vec<Field>,
    #[serde(skip_serializing_if = "Option::is_none")]
    website_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    repository: Option<String>,
}

/// An entry as the operator sees it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct AdminEntryView {
    #[serde(flatten)]
    entry: EntryView,
    enabled: bool,
    latest_version: String,
    pinned_version: Option<String>,
    /// Values fixed for everyone, masked.
    fixed: BTreeMap<String, String>,
    patterns: BTreeMap<String, String>,
    /// Why the entry cannot run here (no configured runtime for its packages), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
    /// Users' servers made from it.
    servers: u64,
    updated_at: DateTime<Utc>,
}

/// One entry with every imported version and the document of the one in force.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct AdminEntryDetail {
    #[serde(flatten)]
    entry: AdminEntryView,
    versions: Vec<String>,
    /// The `server.json` of `version`, as imported.
    document: Value,
}

fn entry_view(detail: &EntryDetail) -> EntryView {
    let text = |pointer: &str| {
        detail
            .document
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    EntryView {
        name: detail.entry.name.clone(),
        title: detail.entry.title.clone(),
        description: detail.entry.description.clone(),
        kind: detail.entry.kind.as_str(),
        version: detail.version.clone(),
        fields: detail.fields.clone().unwrap_or_default(),
        website_url: text("/websiteUrl"),
        repository: text("/repository/url"),
    }
}

fn admin_view(detail: &EntryDetail, servers: u64) -> AdminEntryView {
    AdminEntryView {
        entry: entry_view(detail),
        enabled: detail.entry.enabled,
        latest_version: detail.entry.latest_version.clone(),
        pinned_version: detail.entry.pinned_version.clone(),
        fixed: detail.entry.fixed.masked(),
        patterns: detail.entry.patterns.clone(),
        problem: detail.fields.as_ref().err().cloned(),
        servers,
        updated_at: detail.entry.updated_at,
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct EntryList {
    entries: Vec<EntryView>,
    page: u64,
    page_size: u64,
    total: u64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct AdminEntryList {
    entries: Vec<AdminEntryView>,
    page: u64,
    page_size: u64,
    total: u64,
}

fn entry_name(namespace: &str, server: &str) -> String {
    format!("{namespace}/{server}")
}

/// The enabled entries, by name; `search` and `tag` narrow them.
#[utoipa::path(get, path = "/api/catalog", tag = "catalog",
    params(ListParams), responses((status = OK, body = EntryList)))]
async fn list_for_user(
    State(state): State<AppState>,
    _ctx: UserContext,
    Query(params): Query<ListParams>,
) -> Result<JsonResponse<EntryList>, ApiError> {
    let paging = params.paging();
    let page = state
        .services
        .catalog
        .search(params.search, params.tag, true, paging)
        .await?;
    Ok(JsonResponse(EntryList {
        entries: page.items.iter().map(entry_view).collect(),
        page: page.page,
        page_size: page.page_size,
        total: page.total,
    }))
}

/// One enabled entry.
#[utoipa::path(get, path = "/api/catalog/{namespace}/{server}", tag = "catalog",
    params(("namespace" = String, Path, description = "The entry's name before its `/`"),
           ("server" = String, Path, description = "The entry's name after its `/`")),
    responses((status = OK, body = EntryView)))]
async fn read_for_user(
    State(state): State<AppState>,
    _ctx: UserContext,
    Path((namespace, server)): Path<(String, String)>,
) -> Result<JsonResponse<EntryView>, ApiError> {
    let detail = state
        .services
        .catalog
        .detail(&entry_name(&namespace, &server), true)
        .await?;
    Ok(JsonResponse(entry_view(&detail)))
}

/// Every entry, enabled or not, with how many servers each has.
#[utoipa::path(get, path = "/admin/catalog", tag = "catalog",
    params(ListParams), responses((status = OK, body = AdminEntryList)))]
async fn list(
    State(state): State<AppState>,
    _admin: AdminContext,
    Query(params): Query<ListParams>,
) -> Result<JsonResponse<AdminEntryList>, ApiError> {
    let catalog = &state.services.catalog;
    let paging = params.paging();
    let page = catalog
        .search(params.search, params.tag, false, paging)
        .await?;
    let usage = catalog.usage().await?;
    Ok(JsonResponse(AdminEntryList {
        entries: page
            .items
            .iter()
            .map(|d| admin_view(d, usage.get(&d.entry.name).copied().unwrap_or(0)))
            .collect(),
        page: page.page,
        page_size: page.page_size,
        total: page.total,
    }))
}

/// One `server.json` document (checked against the Registry's schema on import).
#[derive(Deserialize, ToSchema)]
struct Document(serde_json::Map<String, Value>);

/// Several documents, imported together or not at all.
#[derive(Deserialize)]
struct Documents(Vec<Document>);

impl utoipa::PartialSchema for Documents {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::ArrayBuilder;
        ArrayBuilder::new()
            .items(<Document as utoipa::PartialSchema>::schema())
            .min_items(Some(1))
            .into()
    }
}

impl ToSchema for Documents {}

/// What `POST /admin/catalog` takes: one `server.json`, or an array of them.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
enum ImportInput {
    Many(Documents),
    One(Document),
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ImportReport {
    imported: Vec<ImportedEntry>,
}

/// Imports `server.json` documents: each is validated against the Registry's schema, and
/// one invalid document imports none (422 `SERVER_JSON_INVALID` says which, where and
/// why). New entries are disabled until enabled.
#[utoipa::path(post, path = "/admin/catalog", tag = "catalog",
    request_body = ImportInput, responses((status = CREATED, body = ImportReport)))]
async fn import(
    State(state): State<AppState>,
    _admin: AdminContext,
    Json(input): Json<ImportInput>,
) -> Result<(StatusCode, JsonResponse<ImportReport>), ApiError> {
    let documents: Vec<Value> = match input {
        ImportInput::Many(Documents(many)) => {
            many.into_iter().map(|d| Value::Object(d.0)).collect()
        }
        ImportInput::One(one) => vec![Value::Object(one.0)],
    };
    if documents.is_empty() {
        return Err(Error::validation("give a server.json, or an array of at least one").into());
    }
    let imported = state.services.catalog.import(documents).await?;
    Ok((StatusCode::CREATED, JsonResponse(ImportReport { imported })))
}

/// Reads a Registry API (`GET /v0.1/servers`, page by page with its cursor, optionally
/// only what changed since `updatedSince`) and imports what it lists; documents the
/// schema refuses are skipped and listed, deleted ones ignored. 502
/// `REGISTRY_UNAVAILABLE` when it cannot be read.
#[utoipa::path(post, path = "/admin/catalog/registry", tag = "catalog",
    request_body = RegistrySync, responses((status = CREATED, body = SyncReport)))]
async fn import_registry(
    State(state): State<AppState>,
    _admin: AdminContext,
    Json(sync): Json<RegistrySync>,
) -> Result<(StatusCode, JsonResponse<SyncReport>), ApiError> {
    let report = state.services.catalog.sync(sync).await?;
    Ok((StatusCode::CREATED, JsonResponse(report)))
}

async fn admin_detail(state: &AppState, name: &str) -> Result<AdminEntryDetail, ApiError> {
    let catalog = &state.services.catalog;
    let detail = catalog.detail(name, false).await?;
    let servers = catalog.usage().await?.get(name).copied().unwrap_or(0);
    Ok(AdminEntryDetail {
        entry: admin_view(&detail, servers),
        versions: catalog.versions(name).await?,
        document: detail.document,
    })
}

/// One entry: the operator's choices, every version, the document in force.
#[utoipa::path(get, path = "/admin/catalog/{namespace}/{server}", tag = "catalog",
    params(("namespace" = String, Path, description = "The entry's name before its `/`"),
           ("server" = String, Path, description = "The entry's name after its `/`")),
    responses((status = OK, body = AdminEntryDetail)))]
async fn read(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path((namespace, server)): Path<(String, String)>,
) -> Result<JsonResponse<AdminEntryDetail>, ApiError> {
    Ok(JsonResponse(
        admin_detail(&state, &entry_name(&namespace, &server)).await?,
    ))
}

/// Enables or disables an entry, pins a version (`null` follows the latest), fixes values
/// for everyone and sets patterns users' values must match. Enabling an entry that cannot
/// run here (no configured runtime for its packages, no remote) is 422.
#[utoipa::path(patch, path = "/admin/catalog/{namespace}/{server}", tag = "catalog",
    params(("namespace" = String, Path, description = "The entry's name before its `/`"),
           ("server" = String, Path, description = "The entry's name after its `/`")),
    request_body = EntryUpdate, responses((status = OK, body = AdminEntryDetail)))]
async fn update(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path((namespace, server)): Path<(String, String)>,
    Json(input): Json<EntryUpdate>,
) -> Result<JsonResponse<AdminEntryDetail>, ApiError> {
    let name = entry_name(&namespace, &server);
    state.services.catalog.update(&name, input).await?;
    Ok(JsonResponse(admin_detail(&state, &name).await?))
}

/// Deletes an entry and its versions (409 `CONFLICT` while servers use it).
#[utoipa::path(delete, path = "/admin/catalog/{namespace}/{server}", tag = "catalog",
    params(("namespace" = String, Path, description = "The entry's name before its `/`"),
           ("server" = String, Path, description = "The entry's name after its `/`")),
    responses((status = NO_CONTENT)))]
async fn remove(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path((namespace, server)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    state
        .services
        .catalog
        .delete(&entry_name(&namespace, &server))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct EntryUser {
    user_id: String,
    server_id: String,
    server_name: String,
    /// The version the user pinned, if any.
    catalog_version: Option<String>,
    is_active: bool,
    created_at: DateTime<Utc>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct EntryUsers {
    servers: Vec<EntryUser>,
    page: u64,
    page_size: u64,
    total: u64,
}

/// Which users' servers are made from an entry, oldest first.
#[utoipa::path(get, path = "/admin/catalog/{namespace}/{server}/servers", tag = "catalog",
    params(("namespace" = String, Path, description = "The entry's name before its `/`"),
           ("server" = String, Path, description = "The entry's name after its `/`"),
           PageParams),
    responses((status = OK, body = EntryUsers)))]
async fn servers(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path((namespace, server)): Path<(String, String)>,
    Query(params): Query<PageParams>,
) -> Result<JsonResponse<EntryUsers>, ApiError> {
    let page = state
        .services
        .catalog
        .users(
            &entry_name(&namespace, &server),
            Paging {
                page: params.page,
                page_size: params.page_size,
            },
        )
        .await?;
    Ok(JsonResponse(EntryUsers {
        servers: page
            .items
            .into_iter()
            .map(|s| EntryUser {
                user_id: s.user_id.to_string(),
                server_id: s.id.to_string(),
                server_name: s.spec.name.as_str().to_owned(),
                catalog_version: s.spec.catalog.and_then(|c| c.version),
                is_active: s.spec.is_active,
                created_at: s.created_at,
            })
            .collect(),
        page: page.page,
        page_size: page.page_size,
        total: page.total,
    }))
}
