//! `/admin/policies`: the operator's rules over tool calls and servers (CEL), their test
//! form, and `PUT /admin/users/{user}/attributes`: what the backend says about a user, and
//! `GET /admin/users/{user}/quotas`: what they have used of each quota.

use axum::Json as JsonResponse;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::AdminContext;
use super::error::ApiError;
use super::external_id::ExternalId;
use super::extract::{Json, Path};
use crate::domain::{PolicyRule, PolicySet, Quota, UserAttributes, UserId};
use crate::services::policies::{Decision, QuotaUse, SampleCall};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(read, replace))
        .routes(routes!(test))
        .routes(routes!(attributes, set_attributes))
        .routes(routes!(quota_use))
}

/// The rules in force.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct PolicySetView {
    /// Increases by one with every save; 0 before the first.
    version: i64,
    rules: Vec<PolicyRule>,
    quotas: Vec<Quota>,
    updated_at: Option<DateTime<Utc>>,
    /// The admin key that saved them.
    updated_by: Option<String>,
}

impl From<PolicySet> for PolicySetView {
    fn from(set: PolicySet) -> Self {
        Self {
            version: set.version,
            rules: set.rules,
            quotas: set.quotas,
            updated_at: set.updated_at,
            updated_by: set.updated_by,
        }
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RulesInput {
    /// In order: the first rule whose `when` is true decides; absent: none.
    #[serde(default)]
    rules: Vec<PolicyRule>,
    /// Every quota whose `when` is true for a call counts it; absent: none.
    #[serde(default)]
    quotas: Vec<Quota>,
}

/// The policy rules in force, in order.
#[utoipa::path(get, path = "/admin/policies", tag = "admin",
    responses((status = OK, body = PolicySetView)))]
async fn read(
    State(state): State<AppState>,
    _admin: AdminContext,
) -> Result<JsonResponse<PolicySetView>, ApiError> {
    Ok(JsonResponse(state.services.policies.current().into()))
}

/// Replaces the rules (a new version, in force on every instance within a second). A
/// condition that does not compile is 422 naming the rule, its line and column.
#[utoipa::path(put, path = "/admin/policies", tag = "admin",
    request_body = RulesInput, responses((status = OK, body = PolicySetView)))]
async fn replace(
    State(state): State<AppState>,
    admin: AdminContext,
    Json(input): Json<RulesInput>,
) -> Result<JsonResponse<PolicySetView>, ApiError> {
    let saved = state
        .services
        .policies
        .save(input.rules, input.quotas, Some(admin.key_id.to_string()))
        .await?;
    Ok(JsonResponse(saved.into()))
}

#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TestInput {
    /// Rules to try instead of those in force (a draft); absent: those in force.
    rules: Option<Vec<PolicyRule>>,
    /// With `rules`: the draft's quotas (absent: none).
    #[serde(default)]
    quotas: Vec<Quota>,
    /// The call, as rules see it.
    call: SampleCall,
}

/// Which rule would decide a sample call, and how: the console's "test this rule".
#[utoipa::path(post, path = "/admin/policies/test", tag = "admin",
    request_body = TestInput, responses((status = OK, body = Decision)))]
async fn test(
    State(state): State<AppState>,
    _admin: AdminContext,
    Json(input): Json<TestInput>,
) -> Result<JsonResponse<Decision>, ApiError> {
    Ok(JsonResponse(state.services.policies.test(
        input.rules.map(|rules| (rules, input.quotas)),
        &input.call,
    )?))
}

/// What the backend says about a user.
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AttributesView {
    #[serde(default)]
    groups: Vec<String>,
    plan: Option<String>,
}

/// A user's groups and plan (none set: no groups, no plan).
#[utoipa::path(get, path = "/admin/users/{user}/attributes", tag = "admin",
    params(("user" = ExternalId, Path, description = "The user's id")),
    responses((status = OK, body = AttributesView)))]
async fn attributes(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(user): Path<String>,
) -> Result<JsonResponse<AttributesView>, ApiError> {
    let user = UserId::parse(&user).map_err(|e| ApiError::InvalidUserId(e.to_string()))?;
    let attributes = state.services.policies.attributes(&user).await?;
    Ok(JsonResponse(AttributesView {
        groups: attributes.groups.clone(),
        plan: attributes.plan.clone(),
    }))
}

/// Sets a user's groups and plan, which policy rules read (`user.groups`, `user.plan`).
/// Only an admin key may: never the end user.
#[utoipa::path(put, path = "/admin/users/{user}/attributes", tag = "admin",
    params(("user" = ExternalId, Path, description = "The user's id")),
    request_body = AttributesView, responses((status = OK, body = AttributesView)))]
async fn set_attributes(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(user): Path<String>,
    Json(input): Json<AttributesView>,
) -> Result<JsonResponse<AttributesView>, ApiError> {
    let user = UserId::parse(&user).map_err(|e| ApiError::InvalidUserId(e.to_string()))?;
    let attributes =
        UserAttributes::new(input.groups, input.plan).map_err(crate::error::Error::from)?;
    state
        .services
        .policies
        .set_attributes(&user, attributes.clone())
        .await?;
    Ok(JsonResponse(AttributesView {
        groups: attributes.groups,
        plan: attributes.plan,
    }))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct QuotaUseView {
    quotas: Vec<QuotaUse>,
}

/// What a user has used of each quota in its window now (a shared quota: what all it
/// applies to have used).
#[utoipa::path(get, path = "/admin/users/{user}/quotas", tag = "admin",
    params(("user" = ExternalId, Path, description = "The user's id")),
    responses((status = OK, body = QuotaUseView)))]
async fn quota_use(
    State(state): State<AppState>,
    _admin: AdminContext,
    Path(user): Path<String>,
) -> Result<JsonResponse<QuotaUseView>, ApiError> {
    let user = UserId::parse(&user).map_err(|e| ApiError::InvalidUserId(e.to_string()))?;
    let quotas = state.services.policies.usage(&user).await?;
    Ok(JsonResponse(QuotaUseView { quotas }))
}
