//! Typed, layered settings.
//!
//! `config/default.toml` is compiled in (so the binary runs from any directory), then
//! `config/local.toml`, an explicit `--config` file, `MCP_POOL__SECTION__KEY` variables and
//! finally `DATABASE_URL` / `MCP_POOL_ADMIN_KEY`. Every limit the service enforces is a value
//! here, not a constant in code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use secrecy::SecretString;
use serde::Deserialize;

/// The defaults, byte for byte the file in `config/`.
pub(crate) const DEFAULT_CONFIG: &str = include_str!("../../../config/default.toml");

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration could not be loaded: {0}")]
    Load(#[from] config::ConfigError),
    #[error("configuration key `{key}`: {reason}")]
    Invalid { key: &'static str, reason: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub storage: StorageSettings,
    pub database: DatabaseSettings,
    pub pool: PoolSettings,
    pub agent: AgentSettings,
    pub llm: LlmSettings,
    pub confirmation: ConfirmationSettings,
    pub events: EventSettings,
    pub limits: LimitSettings,
    pub security: SecuritySettings,
    pub auth: AuthSettings,
    pub log: LogSettings,
    pub gateway: GatewaySettings,
    pub xiaozhi: XiaozhiSettings,
    pub global_servers: GlobalServersSettings,
    pub cluster: ClusterSettings,
    pub grpc: GrpcSettings,
    pub oauth: OAuthSettings,
    pub elicitation: ElicitationSettings,
    pub sampling: SamplingTimeouts,
    pub console: ConsoleSettings,
    pub tasks: TaskSettings,
    pub audit: AuditSettings,
    pub catalog: CatalogSettings,
    pub tool_search: ToolSearchSettings,
}

/// Tool search (see `domain::tool_search`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSearchSettings {
    /// A directory holding the sentence encoder (`sp.model`, `weights.npz`); empty ranks
    /// by words alone (BM25).
    pub model_dir: String,
}

impl ToolSearchSettings {
    /// The sentence encoder's directory, if one is configured.
    pub fn model_dir(&self) -> Option<&Path> {
        let dir = self.model_dir.trim();
        (!dir.is_empty()).then(|| Path::new(dir))
    }
}

/// The server catalog (see `services::catalog`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogSettings {
    /// Import the built-in entries (all disabled) when the catalog is empty at start.
    pub seed: bool,
    pub registry_timeout_secs: u64,
    /// Registry type (`npm`, `pypi`, `oci`…) → how its packages run.
    pub runtimes: BTreeMap<String, RuntimeSettings>,
}

/// How packages of one registry type run, from what the operator installed ahead of time.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSettings {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// The package as the runtime names it: `{identifier}` and `{version}` replaced.
    pub package: String,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Host paths its servers' sandboxes may read, at the same path (its package cache).
    #[serde(default)]
    pub read_only_paths: Vec<String>,
    /// Host paths its servers' sandboxes may write, at the same path (a cache the
    /// runtime insists on writing to).
    #[serde(default)]
    pub writable_paths: Vec<String>,
    /// The flags an entry's `runtimeArguments` may pass to the runtime; an entry naming
    /// another is refused (a registry's entry is third-party input).
    #[serde(default)]
    pub allowed_runtime_flags: Vec<String>,
    /// Pass `--` before the package, so that nothing after it is read as the runtime's own
    /// option (npx, uvx and docker take it); off for a runtime that does not.
    #[serde(default = "yes")]
    pub end_of_options: bool,
}

fn yes() -> bool {
    true
}

/// The audit log (see `services::audit`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSettings {
    /// Write rows at all (off only to measure what the audit costs, or where another
    /// system keeps the record).
    pub enabled: bool,
    /// Keep each call's arguments and result (redacted and cut) in its row.
    pub record_details: bool,
    /// What a row keeps of arguments, and of a result, at most.
    pub max_detail_bytes: usize,
    /// Rows older than this many days are dropped (0 keeps them all).
    pub retention_days: u64,
    /// How often journaled rows are written to the database.
    pub flush_ms: u64,
}

/// Tool calls run as tasks (see `services::tasks`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSettings {
    /// A gateway client's result that comes within this many milliseconds is answered
    /// inline; a slower call becomes a task.
    pub inline_wait_ms: u64,
    /// Open tasks one user may have at once.
    pub max_open_per_user: u64,
    /// How long a task is kept from its creation.
    pub ttl_secs: u64,
    /// How long a task's call may run.
    pub call_timeout_secs: u64,
    /// The polling interval clients are asked to keep.
    pub poll_interval_ms: u64,
    /// Where a gateway client is sent for a task's call waiting for the user's approval
    /// (a URL-mode question among the task's `inputRequests`); `{message}` becomes the
    /// parked call's message id. Empty: the console's approvals page of this service.
    pub approval_url: String,
}

/// The operators' web console at `/console` (see `api::console`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSettings {
    /// Serve `/console` (and accept its session cookie on the admin API).
    pub enabled: bool,
    /// How long a sign-in lasts.
    pub session_ttl_secs: u64,
    /// Mark the session cookie `Secure` (set it when the service is reached over HTTPS).
    pub secure_cookie: bool,
}

/// Sampling requests of servers whose policy is `ask` (see `services::sampling`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingTimeouts {
    /// A request not approved within this many seconds is refused.
    pub timeout_secs: u64,
    /// The largest prompt (messages, system prompt and tools, as JSON) a server may ask
    /// to sample; a larger one is refused before it reaches a model.
    pub max_prompt_bytes: u64,
}

/// Questions servers ask the users of REST, chat and gRPC calls (see
/// `services::elicitations`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ElicitationSettings {
    /// A question not answered within this many seconds is withdrawn (`cancel`).
    pub timeout_secs: u64,
    /// Questions one user may have open at once (sampling requests awaiting approval are
    /// held to the same number, counted on their own); a server asking past it gets an
    /// MCP error.
    pub max_open_per_user: u64,
    /// The same for one server of a user (all its calls together).
    pub max_open_per_server: u64,
}

/// Per-user OAuth to remote MCP servers (see `oauth`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthSettings {
    /// The externally reachable base URL of this service; the redirect URI and the client
    /// metadata document URL derive from it. Empty: `http://<server.host>:<bound port>`.
    pub public_url: String,
    /// Where the callback sends the browser afterwards (with `serverId` and `status`).
    /// Empty: a small page saying the window can be closed.
    pub return_url: String,
    /// The name this service registers as (dynamic registration, client metadata).
    pub client_name: String,
    /// How long an authorization URL can be completed.
    pub state_ttl_secs: u64,
    /// Authorizations in progress per user.
    pub max_pending_per_user: u64,
    /// Step-up authorizations (403 `insufficient_scope`) in a row before giving up.
    pub max_step_ups: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalServersSettings {
    /// Empty: none.
    pub file: String,
    pub poll_secs: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySettings {
    pub separator: String,
    /// `always`, `on_collision` or `never` (see `domain::tool_name::PrefixMode`).
    pub prefix: String,
    /// A gateway session unused this long is ended, with everything it started.
    pub session_idle_secs: u64,
    pub allowed_hosts: Vec<String>,
    pub max_tokens_per_assistant: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XiaozhiSettings {
    /// Tool names over the bridges: `{server}{separator}{tool}` (`gateway.prefix` applies).
    pub separator: String,
    pub max_result_bytes: usize,
    pub ping_interval_secs: u64,
    pub reconnect_min_secs: u64,
    pub reconnect_max_secs: u64,
}

/// The gRPC interface (see `grpc`), on `server.host`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcSettings {
    pub enabled: bool,
    pub port: u16,
}

/// Several instances on one database (see `cluster`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSettings {
    pub heartbeat_secs: u64,
    pub instance_ttl_secs: u64,
    pub forward_timeout_secs: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    pub host: String,
    pub port: u16,
    pub max_body_bytes: usize,
    pub shutdown_grace_secs: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSettings {
    pub data_dir: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// Empty means the embedded SQLite file; may hold a password, so it is a secret.
    pub url: SecretString,
    pub max_connections: u32,
    /// How long a request waits for a database connection before it is answered 503
    /// `DATABASE_UNAVAILABLE`.
    pub acquire_timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSettings {
    pub connect_timeout_secs: u64,
    pub tool_cache_ttl_secs: u64,
    pub idle_timeout_secs: u64,
    pub default_call_timeout_secs: u32,
    pub max_call_timeout_secs: u32,
    pub max_connections_per_user: u32,
    pub max_stdio_processes: u32,
    /// Memory one stdio server (all its processes) may use, in MiB; 0: no limit. Needs a
    /// cgroup memory controller (`mcp::stdio::cgroup`).
    pub stdio_memory_limit_mib: u64,
    /// Processes and threads one stdio server may run at once (the kernel's pids
    /// controller counts both); 0: no limit.
    pub stdio_max_tasks_per_server: u32,
    /// Largest single message an upstream may send over stdio.
    pub max_message_bytes: usize,
    /// The only variables a stdio child inherits from the service's environment.
    pub inherited_env: Vec<String>,
    /// Remote sessions sharing one HTTP client, so one HTTP/2 connection (`mcp::http`).
    pub sessions_per_http_client: u32,
    /// How stdio servers are isolated from the host and from each other (`sandbox`).
    pub sandbox: SandboxSettings,
}

/// The stdio servers' sandbox (bubblewrap), as `[pool.sandbox]` sets it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSettings {
    pub mode: SandboxMode,
    /// The bubblewrap program, a path or a name looked up on the service's PATH.
    pub bwrap: String,
    /// The network of a server whose preset names none (catalog servers too).
    pub network: crate::domain::NetworkMode,
    /// Size of each server's private /tmp, in MiB.
    pub tmp_size_mib: u32,
    /// Host paths every server may read, at the same path (a runtime outside /usr).
    pub read_only_paths: Vec<String>,
    /// The egress forwarder (`mcp-pool-egress`); empty: the one beside the running
    /// executable, else on the service's PATH.
    pub egress_forwarder: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Every stdio server in a sandbox; none starts where one cannot be made.
    On,
    /// Servers run as the service, with its view of the host (a warning says so).
    Off,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    pub max_tool_rounds: u32,
    pub max_message_bytes: usize,
    pub max_system_prompt_bytes: usize,
    pub max_history_messages: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    pub request_timeout_secs: u64,
    pub stream_idle_timeout_secs: u64,
    pub max_retries: u32,
    pub retry_base_delay_ms: u64,
    pub max_retry_after_secs: u64,
    pub max_tokens: u32,
    pub providers: BTreeMap<String, ProviderSettings>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSettings {
    pub kind: ProviderKind,
    pub base_url: String,
    /// The variable holding the key; empty sends none.
    pub api_key_env: String,
    /// Model names a request may use; empty allows any.
    pub models: Vec<String>,
    /// Models without function calling (prompt mode by default).
    pub prompt_mode_models: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI-compatible chat completions.
    Openai,
    /// Anthropic messages.
    Anthropic,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmationSettings {
    pub timeout_secs: u64,
    /// Longest `?wait=` a tool-calls request may ask for.
    pub max_wait_secs: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSettings {
    /// Recent events kept per user for `Last-Event-ID` resume.
    pub replay_buffer: usize,
    pub heartbeat_secs: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSettings {
    pub max_servers_per_user: u64,
    pub max_secret_entries: usize,
    pub max_value_bytes: usize,
    pub max_tool_list_entries: usize,
    pub max_servers_per_assistant: usize,
    pub max_tool_calls_per_request: usize,
    /// A tool result larger than this is truncated (with a marker) before it is stored.
    pub max_result_bytes: usize,
    /// Per user; 0 means unlimited.
    pub tool_calls_per_minute: u32,
    /// Per user; 0 means unlimited.
    pub chats_per_minute: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecuritySettings {
    /// Base64 of 32 bytes; empty means "use or create `<data_dir>/encryption.key`".
    pub encryption_key: SecretString,
    pub allow_loopback_urls: bool,
    pub allow_private_urls: bool,
    pub allowed_url_hosts: Vec<String>,
    /// PEM certificates remote servers' TLS is also checked against; empty: none.
    pub extra_ca_file: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    pub key_cache_ttl_secs: u64,
    /// Taken from `MCP_POOL_ADMIN_KEY`: the admin key installed on first start.
    #[serde(default)]
    pub bootstrap_admin_key: Option<SecretString>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub filter: String,
    pub format: LogFormat,
    /// Empty: no OpenTelemetry export.
    pub otlp_endpoint: String,
    pub otlp_service_name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Settings {
    /// Loads every layer, reading the process environment.
    pub fn load(explicit_file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut builder = config::Config::builder()
            .add_source(config::File::from_str(
                DEFAULT_CONFIG,
                config::FileFormat::Toml,
            ))
            .add_source(config::File::with_name("config/local").required(false));
        if let Some(path) = explicit_file {
            builder = builder.add_source(config::File::from(path).required(true));
        }
        builder = builder
            .add_source(
                config::Environment::with_prefix("MCP_POOL")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true)
                    .list_separator(",")
                    .with_list_parse_key("security.allowed_url_hosts")
                    .with_list_parse_key("pool.inherited_env")
                    .with_list_parse_key("pool.sandbox.read_only_paths")
                    .with_list_parse_key("gateway.allowed_hosts"),
            )
            .set_override_option("database.url", non_empty_env("DATABASE_URL"))?
            .set_override_option(
                "auth.bootstrap_admin_key",
                non_empty_env("MCP_POOL_ADMIN_KEY"),
            )?;
        let settings: Settings = builder.build()?.try_deserialize()?;
        settings.validate()?;
        Ok(settings)
    }

    /// The compiled-in defaults alone, ignoring files and environment (tests start here).
    pub fn defaults() -> Self {
        config::Config::builder()
            .add_source(config::File::from_str(
                DEFAULT_CONFIG,
                config::FileFormat::Toml,
            ))
            .build()
            .and_then(|c| c.try_deserialize())
            .expect("config/default.toml is valid")
    }

    /// Rejects values that parse but cannot work, naming the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let shared = crate::domain::SandboxSpec {
            read_only_paths: self.pool.sandbox.read_only_paths.clone(),
            ..Default::default()
        };
        shared.validate().map_err(|e| ConfigError::Invalid {
            key: "pool.sandbox.read_only_paths",
            reason: e.to_string(),
        })?;
        for runtime in self.catalog.runtimes.values() {
            let paths = crate::domain::SandboxSpec {
                read_only_paths: runtime.read_only_paths.clone(),
                writable_paths: runtime.writable_paths.clone(),
                ..Default::default()
            };
            paths.validate().map_err(|e| ConfigError::Invalid {
                key: "catalog.runtimes",
                reason: e.to_string(),
            })?;
        }
        if let Some(dir) = self.tool_search.model_dir() {
            for file in ["sp.model", "weights.npz"] {
                if !dir.join(file).is_file() {
                    return Err(ConfigError::Invalid {
                        key: "tool_search.model_dir",
                        reason: format!("{} holds no {file}", dir.display()),
                    });
                }
            }
        }
        let positive: [(&'static str, u64); 38] = [
            (
                "pool.sandbox.tmp_size_mib",
                self.pool.sandbox.tmp_size_mib.into(),
            ),
            ("gateway.session_idle_secs", self.gateway.session_idle_secs),
            ("elicitation.timeout_secs", self.elicitation.timeout_secs),
            (
                "elicitation.max_open_per_user",
                self.elicitation.max_open_per_user,
            ),
            (
                "elicitation.max_open_per_server",
                self.elicitation.max_open_per_server,
            ),
            ("sampling.timeout_secs", self.sampling.timeout_secs),
            ("sampling.max_prompt_bytes", self.sampling.max_prompt_bytes),
            ("oauth.state_ttl_secs", self.oauth.state_ttl_secs),
            (
                "oauth.max_pending_per_user",
                self.oauth.max_pending_per_user,
            ),
            ("cluster.heartbeat_secs", self.cluster.heartbeat_secs),
            (
                "cluster.forward_timeout_secs",
                self.cluster.forward_timeout_secs,
            ),
            ("pool.connect_timeout_secs", self.pool.connect_timeout_secs),
            ("pool.idle_timeout_secs", self.pool.idle_timeout_secs),
            (
                "pool.default_call_timeout_secs",
                self.pool.default_call_timeout_secs.into(),
            ),
            (
                "pool.max_connections_per_user",
                self.pool.max_connections_per_user.into(),
            ),
            (
                "pool.sessions_per_http_client",
                self.pool.sessions_per_http_client.into(),
            ),
            ("pool.max_message_bytes", self.pool.max_message_bytes as u64),
            ("agent.max_tool_rounds", self.agent.max_tool_rounds.into()),
            (
                "agent.max_message_bytes",
                self.agent.max_message_bytes as u64,
            ),
            ("llm.request_timeout_secs", self.llm.request_timeout_secs),
            (
                "llm.stream_idle_timeout_secs",
                self.llm.stream_idle_timeout_secs,
            ),
            ("llm.max_tokens", self.llm.max_tokens.into()),
            (
                "xiaozhi.max_result_bytes",
                self.xiaozhi.max_result_bytes as u64,
            ),
            (
                "xiaozhi.ping_interval_secs",
                self.xiaozhi.ping_interval_secs,
            ),
            (
                "xiaozhi.reconnect_min_secs",
                self.xiaozhi.reconnect_min_secs,
            ),
            ("confirmation.timeout_secs", self.confirmation.timeout_secs),
            ("events.heartbeat_secs", self.events.heartbeat_secs),
            (
                "database.max_connections",
                self.database.max_connections.into(),
            ),
            (
                "database.acquire_timeout_ms",
                self.database.acquire_timeout_ms,
            ),
            ("server.max_body_bytes", self.server.max_body_bytes as u64),
            ("limits.max_value_bytes", self.limits.max_value_bytes as u64),
            ("tasks.max_open_per_user", self.tasks.max_open_per_user),
            ("tasks.ttl_secs", self.tasks.ttl_secs),
            ("tasks.call_timeout_secs", self.tasks.call_timeout_secs),
            ("tasks.poll_interval_ms", self.tasks.poll_interval_ms),
            ("audit.max_detail_bytes", self.audit.max_detail_bytes as u64),
            ("audit.flush_ms", self.audit.flush_ms),
            (
                "catalog.registry_timeout_secs",
                self.catalog.registry_timeout_secs,
            ),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(ConfigError::Invalid {
                    key,
                    reason: "must be greater than 0".into(),
                });
            }
        }
        if self.tasks.call_timeout_secs > self.tasks.ttl_secs {
            return Err(ConfigError::Invalid {
                key: "tasks.call_timeout_secs",
                reason: format!(
                    "must not exceed tasks.ttl_secs ({}): a task's result must outlive its call",
                    self.tasks.ttl_secs
                ),
            });
        }
        if self.pool.default_call_timeout_secs > self.pool.max_call_timeout_secs {
            return Err(ConfigError::Invalid {
                key: "pool.default_call_timeout_secs",
                reason: format!(
                    "must not exceed pool.max_call_timeout_secs ({})",
                    self.pool.max_call_timeout_secs
                ),
            });
        }
        if self.cluster.instance_ttl_secs < 2 * self.cluster.heartbeat_secs {
            return Err(ConfigError::Invalid {
                key: "cluster.instance_ttl_secs",
                reason: format!(
                    "must be at least twice cluster.heartbeat_secs ({}): one late heartbeat must not \
                     make a live instance look dead",
                    self.cluster.heartbeat_secs
                ),
            });
        }
        let approval_url = self.tasks.approval_url.trim();
        if !approval_url.is_empty() && !is_http_url(&approval_url.replace("{message}", "m")) {
            return Err(ConfigError::Invalid {
                key: "tasks.approval_url",
                reason: "not an http(s) URL".into(),
            });
        }
        for (name, provider) in &self.llm.providers {
            if !is_http_url(&provider.base_url) {
                return Err(ConfigError::Invalid {
                    key: "llm.providers.*.base_url",
                    reason: format!("provider '{name}': not an http(s) URL"),
                });
            }
        }
        for (key, separator) in [
            ("gateway.separator", &self.gateway.separator),
            ("xiaozhi.separator", &self.xiaozhi.separator),
        ] {
            if separator.is_empty()
                || separator.len() > 3
                || !separator
                    .chars()
                    .all(|c| matches!(c, '.' | '_' | '-' | '/' | ':'))
            {
                return Err(ConfigError::Invalid {
                    key,
                    reason: "must be 1 to 3 of the characters . _ - / :".into(),
                });
            }
        }
        if crate::domain::tool_name::PrefixMode::parse(&self.gateway.prefix).is_none() {
            return Err(ConfigError::Invalid {
                key: "gateway.prefix",
                reason: "must be always, on_collision or never".into(),
            });
        }
        if !self.log.otlp_endpoint.is_empty() {
            if !cfg!(feature = "otlp") {
                return Err(ConfigError::Invalid {
                    key: "log.otlp_endpoint",
                    reason: "this binary was built without the `otlp` feature".into(),
                });
            }
            let parsed = url::Url::parse(&self.log.otlp_endpoint);
            if !matches!(parsed.as_ref().map(|u| u.scheme()), Ok("http" | "https")) {
                return Err(ConfigError::Invalid {
                    key: "log.otlp_endpoint",
                    reason: "not an http(s) URL".into(),
                });
            }
        }
        if self.server.host.trim().is_empty() {
            return Err(ConfigError::Invalid {
                key: "server.host",
                reason: "must not be empty".into(),
            });
        }
        Ok(())
    }
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `text` is an http(s) URL.
fn is_http_url(text: &str) -> bool {
    matches!(
        url::Url::parse(text).as_ref().map(url::Url::scheme),
        Ok("http" | "https")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_validate() {
        let settings = Settings::defaults();
        settings.validate().unwrap();
        assert_eq!(settings.pool.connect_timeout_secs, 30);
        assert_eq!(settings.pool.tool_cache_ttl_secs, 300);
        assert_eq!(settings.pool.idle_timeout_secs, 1800);
        assert_eq!(settings.agent.max_tool_rounds, 20);
    }

    #[test]
    fn zero_timeout_names_the_key() {
        let mut settings = Settings::defaults();
        settings.pool.idle_timeout_secs = 0;
        let err = settings.validate().unwrap_err().to_string();
        assert!(err.contains("pool.idle_timeout_secs"), "{err}");
    }
}
