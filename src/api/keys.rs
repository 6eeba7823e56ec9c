//! `/admin/keys`: service and admin API keys.

use axum::Json as JsonResponse;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::AdminContext;
use super::error::ApiError;
use super::extract::{Json, Path};
use crate::security::ApiKeyRole;
use crate::store::ApiKeyRecord;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(revoke))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = ApiKey)]
struct KeyView {
    id: String,
    name: String,
    /// `service` or `admin`.
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

#[derive(Serialize, ToSchema)]
struct KeyList {
    keys: Vec<KeyView>,
}

#[derive(Deserialize, ToSchema)]
struct CreateKey {
    #[schema(min_length = 1, max_length = 128)]
    name: String,
    /// `service` or `admin`.
    #[schema(pattern = "^(service|admin)$")]
    role: String,
}

/// Every key, by prefix only.
#[utoipa::path(get, path = "/admin/keys", tag = "admin",
    responses((status = OK, body = KeyList)))]
async fn list(
    State(state): State<AppState>,
    _admin: AdminContext,
) -> Result<JsonResponse<KeyList>, ApiError> {
    let keys = state.services.keys.list().await?;
    Ok(JsonResponse(KeyList {
        keys: keys.into_iter().map(|k| KeyView::new(k, None)).collect(),
    }))
}

/// Creates a key; the key itself is in this answer only.
#[utoipa::path(post, path = "/admin/keys", tag = "admin",
    request_body = CreateKey, responses((status = CREATED, body = KeyView)))]
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

/// Revokes a key (the last admin key cannot be revoked).
#[utoipa::path(delete, path = "/admin/keys/{id}", tag = "admin",
    params(("id" = String, Path, description = "The key's id")),
    responses((status = OK, body = KeyView)))]
async fn revoke(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(id): Path<String>,
) -> Result<JsonResponse<KeyView>, ApiError> {
    let record = state.services.keys.revoke(&id).await?;
    Ok(JsonResponse(KeyView::new(record, None)))
}
