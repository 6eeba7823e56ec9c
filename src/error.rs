//! The service-level error: what the domain and services report, with a stable code.
//!
//! Lower boundaries (store, later pool/mcp/llm) have their own enums and convert into this
//! one; `api::error` decides the HTTP status for each variant, in exactly one place.

use crate::store::StoreError;

/// Kinds of thing a lookup can miss; each has its own stable `*_NOT_FOUND` code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    McpServer,
    Preset,
    ApiKey,
}

impl Resource {
    pub fn code(self) -> &'static str {
        match self {
            Resource::McpServer => "MCP_SERVER_NOT_FOUND",
            Resource::Preset => "PRESET_NOT_FOUND",
            Resource::ApiKey => "API_KEY_NOT_FOUND",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Resource::McpServer => "MCP server",
            Resource::Preset => "preset",
            Resource::ApiKey => "API key",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Input that is well-formed JSON but not acceptable.
    #[error("{0}")]
    Validation(String),
    #[error("{} '{}' not found", .0.label(), .1)]
    NotFound(Resource, String),
    #[error("{0}")]
    Conflict(String),
    /// A per-user quota (servers per user, bindings per assistant) would be exceeded.
    #[error("{0}")]
    LimitReached(String),
    /// A user tried to choose what program the service runs.
    #[error("{0}")]
    ForbiddenCommand(String),
    /// A remote server URL points somewhere the policy does not allow.
    #[error("{0}")]
    UrlNotAllowed(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl Error {
    pub fn validation(message: impl Into<String>) -> Self {
        Error::Validation(message.into())
    }

    /// The stable, documented code clients switch on.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Validation(_) => "VALIDATION_ERROR",
            Error::NotFound(resource, _) => resource.code(),
            Error::Conflict(_) => "CONFLICT",
            Error::LimitReached(_) => "LIMIT_REACHED",
            Error::ForbiddenCommand(_) => "FORBIDDEN_COMMAND",
            Error::UrlNotAllowed(_) => "URL_NOT_ALLOWED",
            Error::Unauthorized(_) => "UNAUTHORIZED",
            Error::Forbidden(_) => "FORBIDDEN",
            Error::Store(StoreError::Unavailable(_)) => "DATABASE_UNAVAILABLE",
            Error::Store(_) | Error::Unexpected(_) => "INTERNAL_ERROR",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
