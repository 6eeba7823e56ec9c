//! `/admin/presets` (manage) and `/api/presets` (what users may choose from).

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
use super::auth::{AdminContext, UserContext};
use super::error::ApiError;
use super::extract::{Json, Path};
use crate::domain::{Preset, Slot};
use crate::services::PresetInput;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_for_user))
        .routes(routes!(list, create))
        .routes(routes!(read, replace, remove))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Slot)]
struct SlotView {
    name: String,
    description: String,
    required: bool,
    default: Option<String>,
    pattern: Option<String>,
}

impl From<Slot> for SlotView {
    fn from(slot: Slot) -> Self {
        Self {
            name: slot.name,
            description: slot.description,
            required: slot.required,
            default: slot.default,
            pattern: slot.pattern,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Preset)]
struct PresetView {
    name: String,
    description: String,
    command: String,
    args: Vec<String>,
    arg_slots: Vec<SlotView>,
    env_slots: Vec<SlotView>,
    /// Fixed env names with masked values.
    env: BTreeMap<String, String>,
    timeout_secs: Option<u32>,
    /// Memory each of its servers may use, in MiB, instead of the pool's default
    /// (absent: the default; 0: no limit).
    memory_limit_mib: Option<u32>,
    /// Processes and threads each of its servers may run, instead of the pool's default.
    max_tasks: Option<u32>,
    /// What its servers' sandboxes share with them and let them reach; absent: the
    /// pool's defaults (`pool.sandbox`).
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<SandboxView>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl From<Preset> for PresetView {
    fn from(preset: Preset) -> Self {
        let spec = preset.spec;
        Self {
            env: spec.env.masked(),
            name: spec.name,
            description: spec.description,
            command: spec.command,
            args: spec.args,
            arg_slots: spec.arg_slots.into_iter().map(SlotView::from).collect(),
            env_slots: spec.env_slots.into_iter().map(SlotView::from).collect(),
            timeout_secs: spec.timeout_secs,
            memory_limit_mib: spec.memory_limit_mib,
            max_tasks: spec.max_tasks,
            sandbox: (!spec.sandbox.is_default()).then(|| SandboxView::from(spec.sandbox)),
            created_at: preset.created_at,
            updated_at: preset.updated_at,
        }
    }
}

/// A preset's sandbox settings.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PresetSandbox)]
struct SandboxView {
    /// `none`, `egress` or `host`; absent: the pool's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    network: Option<&'static str>,
    read_only_paths: Vec<String>,
    writable_paths: Vec<String>,
    allow_hosts: Vec<String>,
}

impl From<crate::domain::SandboxSpec> for SandboxView {
    fn from(spec: crate::domain::SandboxSpec) -> Self {
        Self {
            network: spec.network.map(|n| n.as_str()),
            read_only_paths: spec.read_only_paths,
            writable_paths: spec.writable_paths,
            allow_hosts: spec.allow_hosts,
        }
    }
}

#[derive(Serialize, ToSchema)]
struct PresetList {
    presets: Vec<PresetView>,
}

async fn all_presets(state: &AppState) -> Result<JsonResponse<PresetList>, ApiError> {
    let presets = state.services.presets.list().await?;
    Ok(JsonResponse(PresetList {
        presets: presets.into_iter().map(PresetView::from).collect(),
    }))
}

/// The stdio presets users may choose from.
#[utoipa::path(get, path = "/api/presets", tag = "presets",
    responses((status = OK, body = PresetList)))]
async fn list_for_user(
    State(state): State<AppState>,
    _ctx: UserContext,
) -> Result<JsonResponse<PresetList>, ApiError> {
    all_presets(&state).await
}

/// Every preset (the stdio allow-list).
#[utoipa::path(get, path = "/admin/presets", tag = "presets",
    responses((status = OK, body = PresetList)))]
async fn list(
    State(state): State<AppState>,
    _admin: AdminContext,
) -> Result<JsonResponse<PresetList>, ApiError> {
    all_presets(&state).await
}

/// Adds a preset.
#[utoipa::path(post, path = "/admin/presets", tag = "presets",
    request_body = PresetInput, responses((status = CREATED, body = PresetView)))]
async fn create(
    State(state): State<AppState>,
    _admin: AdminContext,
    Json(input): Json<PresetInput>,
) -> Result<(StatusCode, JsonResponse<PresetView>), ApiError> {
    let preset = state.services.presets.create(input).await?;
    Ok((StatusCode::CREATED, JsonResponse(preset.into())))
}

/// One preset.
#[utoipa::path(get, path = "/admin/presets/{name}", tag = "presets",
    params(("name" = String, Path, description = "The preset's name")), responses((status = OK, body = PresetView)))]
async fn read(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(name): Path<String>,
) -> Result<JsonResponse<PresetView>, ApiError> {
    Ok(JsonResponse(
        state.services.presets.get(&name).await?.into(),
    ))
}

/// Replaces a preset; servers using it restart with the new definition.
#[utoipa::path(put, path = "/admin/presets/{name}", tag = "presets",
    params(("name" = String, Path, description = "The preset's name")), request_body = PresetInput, responses((status = OK, body = PresetView)))]
async fn replace(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(name): Path<String>,
    Json(input): Json<PresetInput>,
) -> Result<JsonResponse<PresetView>, ApiError> {
    Ok(JsonResponse(
        state.services.presets.replace(&name, input).await?.into(),
    ))
}

/// Deletes a preset (409 `CONFLICT` while servers use it).
#[utoipa::path(delete, path = "/admin/presets/{name}", tag = "presets",
    params(("name" = String, Path, description = "The preset's name")), responses((status = NO_CONTENT)))]
async fn remove(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.services.presets.delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
