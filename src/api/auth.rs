//! Who is calling: `Authorization: Bearer <key>`, plus `X-User-Id` for user routes.
//!
//! Handlers take [`UserContext`] or [`AdminContext`] as an argument; a handler without one
//! is public (only health checks are).

use axum::extract::FromRequestParts;
use axum::http::Method;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::AppState;
use super::error::ApiError;
use crate::domain::{CallOrigin, CallVia, UserId};
use crate::error::Error;
use crate::security::{ApiKeyRole, bearer_token};
use crate::services::{GatewayPrincipal, Principal, console_csrf};

pub const USER_ID_HEADER: &str = "x-user-id";

/// A request acting for one end user. Service and admin keys may both act for a user.
#[derive(Debug, Clone)]
pub struct UserContext {
    pub user: UserId,
    /// The key acting for the user: an admin's acts are audit-logged as theirs.
    pub principal: Principal,
}

impl UserContext {
    /// Who asked, as a call's audit row says: the key, marked when it is an admin's.
    pub fn origin(&self, via: CallVia) -> CallOrigin {
        CallOrigin::new(via).with_key(self.principal.key_id, self.principal.admin_key().is_some())
    }
}

/// A request made with an admin key.
#[derive(Debug, Clone)]
pub struct AdminContext {
    /// The admin key the request came with (what an admin's changes are recorded under).
    pub key_id: uuid::Uuid,
}

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

/// The console's session cookie (`api::console`): an admin key sealed by the service.
pub const CONSOLE_COOKIE: &str = "mcp_pool_console";
/// What a console request that changes state sends besides the cookie.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The value of the console cookie, if the request carries one.
pub fn console_cookie(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == CONSOLE_COOKIE)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())
}

/// A request of the console, signed in by its cookie. A cookie alone never changes
/// state: anything but a read needs the session's CSRF token in `X-CSRF-Token`.
async fn console_principal(
    parts: &Parts,
    state: &AppState,
    cookie: &str,
) -> Result<Principal, ApiError> {
    let (principal, _) = state.services.keys.console_principal(cookie).await?;
    let reads = [Method::GET, Method::HEAD, Method::OPTIONS];
    if !reads.contains(&parts.method) && !carries_csrf_token(parts, cookie) {
        return Err(ApiError::CsrfTokenInvalid);
    }
    Ok(principal)
}

/// Whether the request sends the CSRF token of the console session in `cookie`; compared
/// in constant time, so timing tells nothing of how much of a guess was right.
pub(super) fn carries_csrf_token(parts: &Parts, cookie: &str) -> bool {
    let sent = parts
        .headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .as_bytes();
    let expected = console_csrf(cookie);
    let expected = expected.as_bytes();
    sent.len() == expected.len()
        && sent
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

async fn authenticate(parts: &Parts, state: &AppState) -> Result<Principal, ApiError> {
    // A bearer key wins; the console's cookie counts only without one.
    let cookie = (state.settings.console.enabled && !parts.headers.contains_key(AUTHORIZATION))
        .then(|| console_cookie(parts))
        .flatten();
    let principal = match cookie {
        Some(cookie) => console_principal(parts, state, cookie).await?,
        None => state.services.keys.authenticate(bearer(parts)?).await?,
    };
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
        let principal = authenticate(parts, state).await?;
        let raw = parts
            .headers
            .get(USER_ID_HEADER)
            .ok_or(ApiError::MissingUserId)?
            .to_str()
            .map_err(|_| ApiError::InvalidUserId("must be visible ASCII".into()))?;
        let user = UserId::parse(raw).map_err(|e| ApiError::InvalidUserId(e.to_string()))?;
        tracing::Span::current().record("user", user.as_str());
        Ok(UserContext { user, principal })
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
        Ok(AdminContext {
            key_id: principal.key_id,
        })
    }
}
