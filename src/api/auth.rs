//! Who is calling: `Authorization: Bearer <key>`, plus `X-User-Id` for user routes.
//!
//! Handlers take [`UserContext`] or [`AdminContext`] as an argument; a handler without one
//! is public (only health checks are).

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::AppState;
use super::error::ApiError;
use crate::domain::UserId;
use crate::error::Error;
use crate::security::{ApiKeyRole, bearer_token};
use crate::services::{GatewayPrincipal, Principal};

pub const USER_ID_HEADER: &str = "x-user-id";

/// A request acting for one end user. Service and admin keys may both act for a user.
#[derive(Debug, Clone)]
pub struct UserContext {
    pub user: UserId,
}

/// A request made with an admin key.
#[derive(Debug, Clone)]
pub struct AdminContext;

/// The token of `Authorization: Bearer <token>`.
fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let header = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| Error::Unauthorized("missing Authorization: Bearer <token>".into()))?;
    Ok(header.to_str().ok().and_then(bearer_token).ok_or_else(|| {
        Error::Unauthorized("the Authorization header must be 'Bearer <token>'".into())
    })?)
}

/// The principal of a gateway request: a gateway token of the assistant in the path.
pub async fn gateway_principal(
    parts: &Parts,
    state: &AppState,
    assistant: &str,
) -> Result<GatewayPrincipal, ApiError> {
    let principal = state.services.gateway.authenticate(bearer(parts)?).await?;
    if principal.assistant.as_str() != assistant {
        return Err(Error::Forbidden("this gateway token is for another assistant".into()).into());
    }
    tracing::Span::current().record("user", principal.user.as_str());
    Ok(principal)
}

async fn authenticate(parts: &Parts, state: &AppState) -> Result<Principal, ApiError> {
    let token = bearer(parts)?;
    let principal = state.services.keys.authenticate(token).await?;
    // Logs say which key made each request; the key itself is never logged.
    tracing::Span::current().record("key_id", tracing::field::display(principal.key_id));
    Ok(principal)
}

impl FromRequestParts<AppState> for UserContext {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        authenticate(parts, state).await?;
        let raw = parts
            .headers
            .get(USER_ID_HEADER)
            .ok_or(ApiError::MissingUserId)?
            .to_str()
            .map_err(|_| ApiError::InvalidUserId("must be visible ASCII".into()))?;
        let user = UserId::parse(raw).map_err(|e| ApiError::InvalidUserId(e.to_string()))?;
        tracing::Span::current().record("user", user.as_str());
        Ok(UserContext { user })
    }
}

impl FromRequestParts<AppState> for AdminContext {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let principal = authenticate(parts, state).await?;
        if principal.role != ApiKeyRole::Admin {
            return Err(Error::Forbidden("this route needs an admin key".into()).into());
        }
        Ok(AdminContext)
    }
}
