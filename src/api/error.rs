//! The single place where errors become HTTP: status, stable code and JSON body.
//!
//! Body: `{"error":{"code":"MCP_SERVER_NOT_FOUND","message":"..."}}`. Internal failures are
//! logged in full and answered with a generic message, so database details never leak.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::error::Error;
use crate::invalid::InvalidInput;
use crate::llm::LlmError;
use crate::mcp::McpError;
use crate::oauth::OAuthError;
use crate::pool::PoolError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Domain(#[from] Error),
    #[error("the request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("{0}")]
    InvalidBody(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("the request body is larger than this service accepts")]
    PayloadTooLarge,
    #[error("{0}")]
    BadRequest(String),
    #[error("the X-User-Id header is required")]
    MissingUserId,
    #[error("X-User-Id: {0}")]
    InvalidUserId(String),
    #[error("no route for {0}")]
    RouteNotFound(String),
    #[error("method not allowed on this route")]
    MethodNotAllowed,
    #[error("not ready: {0}")]
    NotReady(String),
    #[error(
        "the service stopped before this request finished; it may or may not have taken effect"
    )]
    ShuttingDown,
    #[error("internal error")]
    Panic,
    #[error("a console request that changes state must carry the session's X-CSRF-Token header")]
    CsrfTokenInvalid,
}

/// The body of every error answer.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub(super) struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct ErrorDetail<'a> {
    /// Stable, upper snake case: what a program branches on (e.g. `MCP_SERVER_NOT_FOUND`).
    #[schema(example = "MCP_SERVER_NOT_FOUND")]
    code: &'a str,
    /// For people: what went wrong and, where it helps, what to do.
    message: String,
    /// One line per problem where there are several (schema violations).
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a [String]>,
    /// `MCP_AUTH_REQUIRED`: the server that needs authorization.
    #[serde(rename = "serverId", skip_serializing_if = "Option::is_none")]
    server_id: Option<uuid::Uuid>,
    /// `MCP_AUTH_REQUIRED`: the URL its owner opens to authorize it.
    #[serde(rename = "authorizationUrl", skip_serializing_if = "Option::is_none")]
    authorization_url: Option<&'a str>,
    /// `MCP_AUTH_REQUIRED`: until when `authorizationUrl` can be completed.
    #[serde(rename = "expiresAt", skip_serializing_if = "Option::is_none")]
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl ApiError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Domain(err) => (domain_status(err), err.code()),
            ApiError::InvalidJson(_) => (StatusCode::BAD_REQUEST, "INVALID_JSON"),
            ApiError::InvalidBody(_) => (StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_ERROR"),
            ApiError::UnsupportedMediaType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UNSUPPORTED_MEDIA_TYPE")
            }
            ApiError::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BAD_REQUEST"),
            ApiError::MissingUserId => (StatusCode::BAD_REQUEST, "MISSING_USER_ID"),
            ApiError::InvalidUserId(_) => (StatusCode::BAD_REQUEST, "INVALID_USER_ID"),
            ApiError::RouteNotFound(_) => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED"),
            ApiError::NotReady(_) => (StatusCode::SERVICE_UNAVAILABLE, "NOT_READY"),
            ApiError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "SHUTTING_DOWN"),
            ApiError::Panic => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
            ApiError::CsrfTokenInvalid => (StatusCode::FORBIDDEN, "CSRF_TOKEN_INVALID"),
        }
    }
}

fn domain_status(err: &Error) -> StatusCode {
    match err {
        Error::Validation(_) => StatusCode::UNPROCESSABLE_ENTITY,
        Error::NotFound(..) => StatusCode::NOT_FOUND,
        Error::Conflict(_) | Error::LimitReached(_) => StatusCode::CONFLICT,
        Error::ForbiddenCommand(_) | Error::UrlNotAllowed(_) | Error::Forbidden(_) => {
            StatusCode::FORBIDDEN
        }
        Error::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        Error::ToolDisabled(_) | Error::AppCallRefused(_) => StatusCode::FORBIDDEN,
        Error::InvalidArguments(_) | Error::InvalidServerJson(_) => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        Error::CatalogEntryDisabled(_)
        | Error::PolicyDenied { .. }
        | Error::PolicyApprovalRequired { .. } => StatusCode::FORBIDDEN,
        Error::RegistryUnavailable(_) => StatusCode::BAD_GATEWAY,
        Error::ServerInactive | Error::AlreadySettled(_) => StatusCode::CONFLICT,
        Error::RateLimited { .. } | Error::QuotaExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
        Error::HeldElsewhere => StatusCode::SERVICE_UNAVAILABLE,
        Error::TooManyTasks(_) => StatusCode::TOO_MANY_REQUESTS,
        Error::TaskNotFinished(_) | Error::TaskEndedWithout(_) => StatusCode::CONFLICT,
        Error::AuthRequired { .. } => StatusCode::CONFLICT,
        Error::OAuth(oauth) => match oauth {
            OAuthError::NotRemote | OAuthError::ClientRequired(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            OAuthError::Discovery(_) | OAuthError::AuthorizationServer(_) => {
                StatusCode::BAD_GATEWAY
            }
            OAuthError::ScopeDenied { .. } => StatusCode::CONFLICT,
            OAuthError::UnknownState => StatusCode::BAD_REQUEST,
            // The fault is the upstream's metadata, not the request.
            OAuthError::EndpointRefused(_) => StatusCode::BAD_GATEWAY,
        },
        Error::Pool(pool) => match pool {
            PoolError::Upstream(McpError::Timeout(_)) => StatusCode::GATEWAY_TIMEOUT,
            PoolError::Upstream(McpError::Refused(_)) => StatusCode::FORBIDDEN,
            PoolError::Upstream(McpError::AuthRequired(_)) => StatusCode::CONFLICT,
            PoolError::Upstream(_) | PoolError::Backoff { .. } => StatusCode::BAD_GATEWAY,
            PoolError::TooManyConnections(_) | PoolError::TooManyProcesses(_) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            PoolError::Stopped => StatusCode::SERVICE_UNAVAILABLE,
            PoolError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        },
        Error::Llm(llm) => match llm {
            LlmError::UnknownProvider(_) | LlmError::ModelNotAllowed { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            LlmError::MissingKey { .. } => StatusCode::SERVICE_UNAVAILABLE,
            LlmError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            LlmError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            LlmError::Auth { .. }
            | LlmError::Status { .. }
            | LlmError::Connect(_)
            | LlmError::Stream(_)
            | LlmError::BadResponse(_) => StatusCode::BAD_GATEWAY,
        },
        Error::Store(StoreError::Unavailable(_)) => StatusCode::SERVICE_UNAVAILABLE,
        Error::Store(_) | Error::Unexpected(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// What `Retry-After` says when the database could not take a request: about how long
/// the store's probe takes to see it back.
const DATABASE_RETRY_SECS: u64 = 2;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = match status {
            // An upstream's fault (the user's MCP server, the model provider): expected in
            // operation, and the caller needs the reason to act on it.
            StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT => {
                tracing::warn!(error = %self, code, "upstream failed");
                self.to_string()
            }
            StatusCode::SERVICE_UNAVAILABLE if matches!(self, ApiError::ShuttingDown) => {
                tracing::warn!(code, "request still running when the shutdown grace ended");
                self.to_string()
            }
            StatusCode::SERVICE_UNAVAILABLE
                if matches!(
                    self,
                    ApiError::Domain(Error::Store(StoreError::Unavailable(_)))
                ) =>
            {
                tracing::warn!(error = %self, ?self, code, "request failed");
                format!(
                    "the database cannot be reached or written right now; nothing was changed, retry in {DATABASE_RETRY_SECS} s"
                )
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                tracing::warn!(error = %self, ?self, code, "request failed");
                "the service is temporarily unavailable".into()
            }
            _ if status.is_server_error() => {
                tracing::error!(error = %self, ?self, code, "request failed");
                "internal error; see the service log".into()
            }
            _ => self.to_string(),
        };
        let details = match &self {
            ApiError::Domain(err) => err.details(),
            _ => None,
        };
        let retry_after = match &self {
            ApiError::Domain(Error::Pool(PoolError::Backoff { retry_in, .. })) => {
                Some(retry_in.as_secs().max(1))
            }
            ApiError::Domain(
                Error::RateLimited { retry_after, .. } | Error::QuotaExceeded { retry_after, .. },
            ) => Some(crate::error::wait_secs(*retry_after)),
            ApiError::Domain(Error::Llm(LlmError::RateLimited {
                retry_after: Some(wait),
                ..
            })) => Some(wait.as_secs().max(1)),
            ApiError::Domain(Error::Store(StoreError::Unavailable(_))) => Some(DATABASE_RETRY_SECS),
            _ => None,
        };
        let auth = match &self {
            ApiError::Domain(Error::AuthRequired {
                server_id,
                authorization_url,
                expires_at,
                ..
            }) => Some((*server_id, authorization_url.as_deref(), *expires_at)),
            _ => None,
        };
        let mut response = (
            status,
            Json(ErrorBody {
                error: ErrorDetail {
                    code,
                    message,
                    details,
                    server_id: auth.map(|a| a.0),
                    authorization_url: auth.and_then(|a| a.1),
                    expires_at: auth.and_then(|a| a.2),
                },
            }),
        )
            .into_response();
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::JsonDataError(e) => ApiError::InvalidBody(e.body_text()),
            JsonRejection::JsonSyntaxError(e) => ApiError::InvalidJson(e.body_text()),
            JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType(
                "send the body as JSON with Content-Type: application/json".into(),
            ),
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge,
            other => ApiError::BadRequest(other.body_text()),
        }
    }
}

impl From<InvalidInput> for ApiError {
    fn from(invalid: InvalidInput) -> Self {
        ApiError::Domain(invalid.into())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::BadRequest(rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::BadRequest(rejection.body_text())
    }
}
