//! `/admin/presets` (manage) and `/api/presets` (what users may choose from).

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json as JsonResponse, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::AppState;
use super::auth::{AdminContext, UserContext};
use super::error::ApiError;
use super::extract::{Json, Path};
use crate::domain::{Preset, Slot};
use crate::services::PresetInput;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/presets", get(list_for_user))
        .route("/admin/presets", get(list).post(create))
        .route(
            "/admin/presets/{name}",
            get(read).put(replace).delete(remove),
        )
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
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

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
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
            created_at: preset.created_at,
            updated_at: preset.updated_at,
        }
    }
}

#[derive(Serialize)]
struct PresetList {
    presets: Vec<PresetView>,
}

async fn all_presets(state: &AppState) -> Result<JsonResponse<PresetList>, ApiError> {
    let presets = state.services.presets.list().await?;
    Ok(JsonResponse(PresetList {
        presets: presets.into_iter().map(PresetView::from).collect(),
    }))
}

async fn list_for_user(
    State(state): State<AppState>,
    _ctx: UserContext,
) -> Result<JsonResponse<PresetList>, ApiError> {
    all_presets(&state).await
}

async fn list(
    State(state): State<AppState>,
    _admin: AdminContext,
) -> Result<JsonResponse<PresetList>, ApiError> {
    all_presets(&state).await
}

async fn create(
    State(state): State<AppState>,
    _admin: AdminContext,
    Json(input): Json<PresetInput>,
) -> Result<(StatusCode, JsonResponse<PresetView>), ApiError> {
    let preset = state.services.presets.create(input).await?;
    Ok((StatusCode::CREATED, JsonResponse(preset.into())))
}

async fn read(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(name): Path<String>,
) -> Result<JsonResponse<PresetView>, ApiError> {
    Ok(JsonResponse(
        state.services.presets.get(&name).await?.into(),
    ))
}

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

async fn remove(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.services.presets.delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
