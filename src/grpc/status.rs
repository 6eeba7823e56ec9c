//! Errors as gRPC statuses: the one place that decides a status code. The message is the
//! error's text; metadata `error-code` carries the same stable code as the REST API.

use tonic::{Code, Status};

use crate::error::Error;
use crate::llm::LlmError;
use crate::mcp::McpError;
use crate::pool::PoolError;
use crate::store::StoreError;

pub const ERROR_CODE_KEY: &str = "error-code";
/// With `MCP_AUTH_REQUIRED`: the URL the user opens to authorize the server.
pub const AUTHORIZATION_URL_KEY: &str = "authorization-url";

pub fn from_error(error: &Error) -> Status {
    let code = match error {
        Error::Validation(_) | Error::InvalidArguments(_) | Error::InvalidServerJson(_) => {
            Code::InvalidArgument
        }
        Error::CatalogEntryDisabled(_)
        | Error::PolicyDenied { .. }
        | Error::PolicyApprovalRequired { .. } => Code::PermissionDenied,
        Error::RegistryUnavailable(_) => Code::Unavailable,
        Error::NotFound(..) => Code::NotFound,
        Error::Conflict(_) => Code::AlreadyExists,
        Error::ServerInactive | Error::AlreadySettled(_) => Code::FailedPrecondition,
        Error::LimitReached(_)
        | Error::RateLimited { .. }
        | Error::QuotaExceeded { .. }
        | Error::TooManyTasks(_) => Code::ResourceExhausted,
        Error::TaskNotFinished(_) | Error::TaskEndedWithout(_) => Code::FailedPrecondition,
        Error::ForbiddenCommand(_)
        | Error::UrlNotAllowed(_)
        | Error::Forbidden(_)
        | Error::ToolDisabled(_)
        | Error::AppCallRefused(_) => Code::PermissionDenied,
        Error::Unauthorized(_) => Code::Unauthenticated,
        Error::HeldElsewhere => Code::Unavailable,
        // The user must act (authorize); the `authorization-url` metadata says where.
        Error::AuthRequired { .. } => Code::FailedPrecondition,
        Error::OAuth(oauth) => match oauth {
            crate::oauth::OAuthError::NotRemote | crate::oauth::OAuthError::ClientRequired(_) => {
                Code::FailedPrecondition
            }
            crate::oauth::OAuthError::ScopeDenied { .. } => Code::PermissionDenied,
            crate::oauth::OAuthError::UnknownState => Code::InvalidArgument,
            _ => Code::Unavailable,
        },
        Error::Pool(pool) => match pool {
            PoolError::Upstream(McpError::Timeout(_)) => Code::DeadlineExceeded,
            PoolError::Upstream(McpError::Refused(_)) => Code::PermissionDenied,
            PoolError::Upstream(McpError::AuthRequired(_)) => Code::FailedPrecondition,
            PoolError::TooManyConnections(_) | PoolError::TooManyProcesses(_) => {
                Code::ResourceExhausted
            }
            PoolError::Internal(_) => Code::Internal,
            PoolError::Upstream(_) | PoolError::Backoff { .. } | PoolError::Stopped => {
                Code::Unavailable
            }
        },
        Error::Llm(llm) => match llm {
            LlmError::UnknownProvider(_) | LlmError::ModelNotAllowed { .. } => {
                Code::InvalidArgument
            }
            LlmError::RateLimited { .. } => Code::ResourceExhausted,
            LlmError::Timeout(_) => Code::DeadlineExceeded,
            _ => Code::Unavailable,
        },
        Error::Store(StoreError::Unavailable(_)) => Code::Unavailable,
        Error::Store(_) | Error::Unexpected(_) => Code::Internal,
    };
    let message = match code {
        // Nothing internal leaks; the log has the details.
        Code::Internal => {
            tracing::error!(error = %error, "internal error answering a gRPC call");
            "internal error".to_owned()
        }
        _ => error.to_string(),
    };
    let mut status = Status::new(code, message);
    if let Ok(value) = error.code().parse() {
        status.metadata_mut().insert(ERROR_CODE_KEY, value);
    }
    if let Error::AuthRequired {
        authorization_url: Some(url),
        ..
    } = error
        && let Ok(value) = url.parse()
    {
        status.metadata_mut().insert(AUTHORIZATION_URL_KEY, value);
    }
    status
}
