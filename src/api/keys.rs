//! `/admin/keys`: service and admin API keys.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json as JsonResponse, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::AdminContext;
use super::error::ApiError;
use super::extract::{Json, Path};
use crate::security::ApiKeyRole;
use crate::store::ApiKeyRecord;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/admin/keys", get(list).post(create))
        .route("/admin/keys/{id}", delete(revoke))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KeyView {
    id: String,
    name: String,
    role: &'static str,
    /// The first characters of the key, to tell keys apart.
    prefix: String,
    created_at: DateTime<Utc>,
    revoked_at: Option<DateTime<Utc>>,
    /// Only in the answer to a create: the one time the key is shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
}

impl KeyView {
    fn new(record: ApiKeyRecord, key: Option<String>) -> Self {
        Self {
            id: record.id.to_string(),
            name: record.name,
            role: record.role.as_str(),
            prefix: record.key_prefix,
            created_at: record.created_at,
            revoked_at: record.revoked_at,
            key,
        }
    }
}

#[derive(Serialize)]
struct KeyList {
    keys: Vec<KeyView>,
}

#[derive(Deserialize)]
struct CreateKey {
    name: String,
    role: String,
}

async fn list(
    State(state): State<AppState>,
    _admin: AdminContext,
) -> Result<JsonResponse<KeyList>, ApiError> {
    let keys = state.services.keys.list().await?;
    Ok(JsonResponse(KeyList {
        keys: keys.into_iter().map(|k| KeyView::new(k, None)).collect(),
    }))
}

async fn create(
    State(state): State<AppState>,
    _admin: AdminContext,
    Json(body): Json<CreateKey>,
) -> Result<(StatusCode, JsonResponse<KeyView>), ApiError> {
    let role = ApiKeyRole::parse(&body.role)?;
    let (record, secret) = state.services.keys.create(&body.name, role).await?;
    Ok((
        StatusCode::CREATED,
        JsonResponse(KeyView::new(record, Some(secret))),
    ))
}

async fn revoke(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<KeyView>, ApiError> {
    let record = state.services.keys.revoke(&id).await?;
    Ok(JsonResponse(KeyView::new(record, None)))
}
