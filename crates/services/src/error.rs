//! The service-level error: what the services report, with a stable code.
//!
//! The lower crates have their own enums (`InvalidInput` of the domain and the URL
//! policy, `StoreError`, `PoolError`/`McpError`, `OAuthError`, `LlmError`) and convert
//! into this one, where they meet; `api::error` decides the HTTP status for each variant,
//! in exactly one place.

use mcp_pool_core::InvalidInput;

use crate::llm::LlmError;
use crate::mcp::McpError;
use crate::pool::PoolError;
use crate::store::StoreError;

/// Kinds of thing a lookup can miss; each has its own stable `*_NOT_FOUND` code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    McpServer,
    Preset,
    ApiKey,
    Tool,
    Connection,
    Message,
    ToolCall,
    Conversation,
    GatewayToken,
    /// An MCP resource (by URI).
    Resource,
    Prompt,
    XiaozhiBridge,
    GatewaySession,
    /// A server's question parked for its user.
    Elicitation,
    /// A server's sampling request parked for its user's approval.
    SamplingRequest,
    /// A tool call run as a task.
    Task,
    /// A row of the audit log.
    AuditRow,
    /// An entry of the server catalog (or one version of it).
    CatalogEntry,
}

impl Resource {
    pub fn code(self) -> &'static str {
        match self {
            Resource::McpServer => "MCP_SERVER_NOT_FOUND",
            Resource::Preset => "PRESET_NOT_FOUND",
            Resource::ApiKey => "API_KEY_NOT_FOUND",
            Resource::Tool => "TOOL_NOT_FOUND",
            Resource::Connection => "CONNECTION_NOT_FOUND",
            Resource::Message => "MESSAGE_NOT_FOUND",
            Resource::ToolCall => "TOOL_CALL_NOT_FOUND",
            Resource::Conversation => "CONVERSATION_NOT_FOUND",
            Resource::GatewayToken => "GATEWAY_TOKEN_NOT_FOUND",
            Resource::Resource => "RESOURCE_NOT_FOUND",
            Resource::Prompt => "PROMPT_NOT_FOUND",
            Resource::XiaozhiBridge => "XIAOZHI_BRIDGE_NOT_FOUND",
            Resource::GatewaySession => "GATEWAY_SESSION_NOT_FOUND",
            Resource::Elicitation => "ELICITATION_NOT_FOUND",
            Resource::SamplingRequest => "SAMPLING_REQUEST_NOT_FOUND",
            Resource::Task => "TASK_NOT_FOUND",
            Resource::AuditRow => "AUDIT_ROW_NOT_FOUND",
            Resource::CatalogEntry => "CATALOG_ENTRY_NOT_FOUND",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Resource::McpServer => "MCP server",
            Resource::Preset => "preset",
            Resource::ApiKey => "API key",
            Resource::Tool => "tool",
            Resource::Connection => "connection",
            Resource::Message => "message",
            Resource::ToolCall => "tool call",
            Resource::Conversation => "conversation",
            Resource::GatewayToken => "gateway token",
            Resource::Resource => "resource",
            Resource::Prompt => "prompt",
            Resource::XiaozhiBridge => "Xiaozhi bridge",
            Resource::GatewaySession => "gateway session",
            Resource::Elicitation => "elicitation",
            Resource::SamplingRequest => "sampling request",
            Resource::Task => "task",
            Resource::AuditRow => "audit row",
            Resource::CatalogEntry => "catalog entry",
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
    /// The tool exists but the user disabled it on this server.
    #[error("tool '{0}' is disabled on this server")]
    ToolDisabled(String),
    /// MCP Apps: a view's call of a tool its server keeps from views, of another server's
    /// tool, or anyone else's call of a tool only a view may call; the words say which.
    #[error("{0}")]
    AppCallRefused(String),
    /// Arguments that do not match the tool's inputSchema; one line per problem.
    #[error("the arguments do not match the tool's input schema")]
    InvalidArguments(Vec<String>),
    #[error("the MCP server is not active; enable it first")]
    ServerInactive,
    /// An operator's policy rule refused the call or the server.
    #[error("refused by policy rule '{rule}'{}", describe(description))]
    PolicyDenied { rule: String, description: String },
    /// An operator's policy rule wants the user's approval, and this call cannot wait for
    /// it (a direct REST or gRPC call).
    #[error(
        "policy rule '{rule}' requires the user's approval of this call{}; submit it as a model's tool call (or through the gateway), where it waits for approval",
        describe(description)
    )]
    PolicyApprovalRequired { rule: String, description: String },
    /// A `server.json` the Registry's schema refuses; one line per problem.
    #[error("server.json is not valid: {}", .0.join("; "))]
    InvalidServerJson(Vec<String>),
    /// A server made from a catalog entry the operator has since disabled.
    #[error("catalog entry '{0}' is disabled by the operator")]
    CatalogEntryDisabled(String),
    /// A Registry API that could not be read: why, in words.
    #[error("the registry could not be read: {0}")]
    RegistryUnavailable(String),
    /// The tool call was already approved, rejected or timed out.
    #[error("tool call '{0}' is already settled")]
    AlreadySettled(String),
    /// A per-user rate limit (`limits.*_per_minute`).
    #[error("too many {what}: at most {per_minute} per minute; try again in {}s", wait_secs(*retry_after))]
    RateLimited {
        what: &'static str,
        per_minute: u32,
        retry_after: std::time::Duration,
    },
    /// An operator's quota on tool calls is used up for this window.
    #[error("quota '{quota}' is used up: at most {limit} {what} a {window}; try again in {}s", wait_secs(*retry_after))]
    QuotaExceeded {
        quota: String,
        limit: u64,
        /// `calls` or `sampling tokens`.
        what: &'static str,
        window: &'static str,
        retry_after: std::time::Duration,
    },
    /// The user has `tasks.max_open_per_user` tasks open.
    #[error("too many open tasks: at most {0} at once; wait for one to end or cancel one")]
    TooManyTasks(u64),
    /// A task's result was asked for before it had one.
    #[error("the task is still {0}; poll GET /api/tasks/{{id}} until it has ended")]
    TaskNotFinished(crate::domain::TaskStatus),
    /// A task's result was asked for, and the task failed or was cancelled: why, in words.
    #[error("{0}")]
    TaskEndedWithout(String),
    /// The message's open calls belong to another live instance that could not be reached.
    #[error(
        "this message's tool calls are held by another instance of the service, which did not answer; try again"
    )]
    HeldElsewhere,
    /// The server needs the user's (further) OAuth authorization; the owner gets the URL.
    #[error("{}", auth_required_message(*insufficient_scope, authorization_url.as_deref()))]
    AuthRequired {
        server_id: uuid::Uuid,
        authorization_url: Option<String>,
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
        insufficient_scope: bool,
    },
    #[error(transparent)]
    OAuth(#[from] crate::oauth::OAuthError),
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Llm(#[from] LlmError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Unexpected(#[from] anyhow::Error),
}

impl From<InvalidInput> for Error {
    fn from(error: InvalidInput) -> Self {
        match error {
            InvalidInput::Value(message) => Error::Validation(message),
            InvalidInput::UrlNotAllowed(message) => Error::UrlNotAllowed(message),
        }
    }
}

impl From<McpError> for Error {
    fn from(error: McpError) -> Self {
        Error::Pool(PoolError::Upstream(error))
    }
}

impl Error {
    /// Extra lines a client can show (e.g. each schema violation).
    pub fn details(&self) -> Option<&[String]> {
        match self {
            Error::InvalidArguments(problems) => Some(problems),
            _ => None,
        }
    }

    /// `{code, message}` of an error reported inside a successful answer or an event
    /// stream (a failing server in a listing, a chat turn that failed mid-stream).
    pub fn summary(&self) -> serde_json::Value {
        serde_json::json!({"code": self.code(), "message": self.to_string()})
    }

    pub fn validation(message: impl Into<String>) -> Self {
        Error::Validation(message.into())
    }

    /// An error several callers share (one cache load's): theirs when there was one
    /// caller, else one that keeps what a caller acts on (an outage stays a 503).
    pub(crate) fn unshare(shared: std::sync::Arc<Error>) -> Error {
        match std::sync::Arc::try_unwrap(shared) {
            Ok(error) => error,
            Err(shared) if shared.is_unavailable() => {
                Error::Store(StoreError::unavailable(shared.to_string()))
            }
            Err(shared) => Error::Unexpected(anyhow::anyhow!("{shared}")),
        }
    }

    /// The database could not take the request now (gone, restarting, full): the same
    /// request may succeed later.
    pub(crate) fn is_unavailable(&self) -> bool {
        matches!(self, Error::Store(StoreError::Unavailable(_)))
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
            Error::ToolDisabled(_) => "TOOL_DISABLED",
            Error::AppCallRefused(_) => "APP_CALL_REFUSED",
            Error::InvalidArguments(_) => "INVALID_ARGUMENTS",
            Error::ServerInactive => "SERVER_INACTIVE",
            Error::InvalidServerJson(_) => "SERVER_JSON_INVALID",
            Error::PolicyDenied { .. } => "POLICY_DENIED",
            Error::PolicyApprovalRequired { .. } => "POLICY_APPROVAL_REQUIRED",
            Error::CatalogEntryDisabled(_) => "CATALOG_ENTRY_DISABLED",
            Error::RegistryUnavailable(_) => "REGISTRY_UNAVAILABLE",
            Error::AlreadySettled(_) => "TOOL_CALL_SETTLED",
            Error::RateLimited { .. } => "RATE_LIMITED",
            Error::QuotaExceeded { .. } => "QUOTA_EXCEEDED",
            Error::HeldElsewhere => "HELD_ELSEWHERE",
            Error::TooManyTasks(_) => "TOO_MANY_TASKS",
            Error::TaskNotFinished(_) => "TASK_NOT_FINISHED",
            Error::TaskEndedWithout(_) => "TASK_HAS_NO_RESULT",
            Error::AuthRequired { .. } => "MCP_AUTH_REQUIRED",
            Error::OAuth(oauth) => oauth.code(),
            Error::Pool(pool) => match pool {
                PoolError::Upstream(McpError::Timeout(_)) => "MCP_TIMEOUT",
                PoolError::Upstream(McpError::Connect(_) | McpError::Transport(_))
                | PoolError::Backoff { .. } => "MCP_CONNECTION_ERROR",
                PoolError::Upstream(McpError::Remote { .. }) => "MCP_SERVER_ERROR",
                PoolError::Upstream(McpError::Protocol(_)) => "MCP_PROTOCOL_ERROR",
                PoolError::Upstream(McpError::ResultTooLarge(_)) => "MCP_RESULT_TOO_LARGE",
                PoolError::Upstream(McpError::Refused(_)) => "URL_NOT_ALLOWED",
                PoolError::Upstream(McpError::AuthRequired(_)) => "MCP_AUTH_REQUIRED",
                PoolError::TooManyConnections(_) => "CONNECTION_LIMIT_REACHED",
                PoolError::TooManyProcesses(_) => "PROCESS_LIMIT_REACHED",
                PoolError::Stopped => "MCP_UNAVAILABLE",
                PoolError::Internal(_) => "INTERNAL_ERROR",
            },
            Error::Llm(llm) => llm.code(),
            Error::Store(StoreError::Unavailable(_)) => "DATABASE_UNAVAILABLE",
            Error::Store(_) | Error::Unexpected(_) => "INTERNAL_ERROR",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A rule's description after its name, when it has one.
fn describe(description: &str) -> String {
    if description.is_empty() {
        String::new()
    } else {
        format!(": {description}")
    }
}

/// Names the URL, so that a model or a gateway client reading only the text can pass it on.
fn auth_required_message(insufficient_scope: bool, url: Option<&str>) -> String {
    let need = if insufficient_scope {
        "the MCP server needs the user's authorization for more scopes (OAuth)"
    } else {
        "the MCP server needs the user's authorization (OAuth)"
    };
    match url {
        Some(url) => format!("{need}; the user opens {url} to authorize it, then retries"),
        None => format!("{need}; authorize it with POST /api/mcp-servers/{{id}}/oauth/authorize"),
    }
}

/// A wait in whole seconds, rounded up and at least 1: a client that waits this long is
/// let through. The message and `Retry-After` both say this number.
pub fn wait_secs(wait: std::time::Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}
