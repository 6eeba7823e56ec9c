//! Opening a session to an upstream: spawn or dial, then the handshake, all within the
//! connect timeout. A streamable-HTTP server is asked `server/discover` first, so that one
//! speaking 2026-07-28 is spoken to in it (it may offer such clients more, and 2026-07-28
//! has no `initialize`); one that does not know the method is opened with `initialize`
//! (2025-11-25 and older): in the same session where it answered with a JSON-RPC error,
//! in a new one where it refused the probe otherwise. Stdio and legacy-SSE servers are
//! opened with `initialize`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientInitializeError, ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;
use tracing::Instrument as _;

use super::auth::ChallengeSlot;
use super::handler::{PoolClientHandler, UpstreamEvents};
use super::sse::LegacySseTransport;
use super::stdio::{StdioCommand, StdioTransport};
use super::url_free::{StreamFailures, UrlFreeErrors};
use super::{McpClient, McpError};
use crate::domain::SecretUrl;

/// Longest stderr line of a child that is logged whole.
const MAX_STDERR_LINE: usize = 2048;

#[derive(Clone)]
pub enum UpstreamTransport {
    Stdio {
        command: String,
        args: Vec<String>,
        /// The server's own env (preset fixed values and the user's slots).
        env: BTreeMap<String, String>,
        /// Variables taken from the service's environment (PATH, HOME, LANG), nothing else.
        inherited_env: Vec<(String, String)>,
        working_dir: PathBuf,
        /// What the server may use (its cgroup's limits, where it gets one).
        limits: super::stdio::StdioLimits,
        /// Its sandbox: the pool's, and what this server's holds (`working_dir` is its
        /// home). `None`: none (the pool's sandbox is off; probes of the load tool).
        sandbox: Option<(
            std::sync::Arc<crate::sandbox::Sandbox>,
            crate::sandbox::SandboxPlan,
        )>,
    },
    StreamableHttp {
        url: SecretUrl,
        headers: BTreeMap<String, String>,
    },
    Sse {
        url: SecretUrl,
        headers: BTreeMap<String, String>,
    },
    /// A server of this process, over an in-memory pipe.
    Embedded(crate::domain::EmbeddedKind),
}

impl std::fmt::Debug for UpstreamTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamTransport::Stdio { command, args, .. } => {
                write!(f, "stdio({command} {})", args.join(" "))
            }
            UpstreamTransport::StreamableHttp { url, .. } => write!(f, "streamableHttp({url})"),
            UpstreamTransport::Sse { url, .. } => write!(f, "sse({url})"),
            UpstreamTransport::Embedded(kind) => write!(f, "embedded({})", kind.as_str()),
        }
    }
}

/// Which revision a streamable-HTTP session is opened in (other transports open with
/// `initialize` either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SessionRevision {
    /// The newest the server offers: `server/discover` first, `initialize` where the server
    /// does not know it.
    #[default]
    Newest,
    /// `initialize` (2025-11-25) where the server offers it, for clients of that revision:
    /// a server of both revisions shows them what it does not show 2026-07-28 clients
    /// (tools that ask by server-to-client request, resource subscriptions).
    Initialize,
}

/// Everything needed to open one upstream session.
#[derive(Clone, Debug)]
pub struct UpstreamSpec {
    /// Names the connection in logs (`user/server`), never secrets.
    pub label: String,
    pub transport: UpstreamTransport,
    pub connect_timeout: Duration,
    /// Largest message the server may send (one stdio line); a larger answer fails its
    /// request at once.
    pub max_message_bytes: usize,
    /// The URL policy the HTTP client dials through; asked again to explain a failed
    /// connect, since the refusal itself does not survive rmcp's error types.
    pub url_policy: std::sync::Arc<crate::security::UrlPolicy>,
    /// Where an HTTP session gets its client (shared in groups, see `mcp::http`).
    pub http: std::sync::Arc<super::UpstreamHttp>,
    /// The user's OAuth tokens for an HTTP server; `None` for other transports.
    pub auth: Option<std::sync::Arc<dyn super::auth::UpstreamAuth>>,
    /// What `roots/list` answers when the call's client has no roots of its own.
    pub roots: Vec<crate::domain::RootEntry>,
    /// Asked what the server asks outside any one call: the connection's user (`None`
    /// for a global server, shared by every user).
    pub owner: Option<std::sync::Arc<dyn super::downstream::Downstream>>,
    pub revision: SessionRevision,
}

impl std::fmt::Debug for dyn super::downstream::Downstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Downstream")
    }
}

impl std::fmt::Debug for dyn super::auth::UpstreamAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UpstreamAuth")
    }
}

pub async fn connect(
    spec: &UpstreamSpec,
    events: mpsc::UnboundedSender<UpstreamEvents>,
) -> Result<McpClient, McpError> {
    let new_handler = || {
        PoolClientHandler::new(
            events.clone(),
            &spec.label,
            &spec.roots,
            spec.owner.clone(),
            spec.url_policy.clone(),
        )
    };
    let handler = new_handler();
    let challenges = ChallengeSlot::default();
    let manager = match &spec.auth {
        Some(auth) => auth.manager().await?,
        None => None,
    };
    // rmcp's session task takes the span it was started in for its whole life: a root
    // span naming the connection, not the request that happened to open it.
    let session = tracing::info_span!(parent: None, "upstream_session", upstream = %spec.label);
    // A stdio server's process, once started.
    let started = std::sync::OnceLock::new();
    let attempt = async {
        match &spec.transport {
            UpstreamTransport::Stdio {
                command,
                args,
                env,
                inherited_env,
                working_dir,
                limits,
                sandbox,
            } => {
                // Whether to sandbox was decided with the plan (`None` where the pool's
                // sandbox is off).
                let sandboxed = sandbox.is_some();
                let (mut command_line, egress) = match sandbox {
                    Some((sandbox, plan)) => {
                        let mut whole: BTreeMap<String, String> =
                            inherited_env.iter().cloned().collect();
                        whole.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
                        let made = sandbox
                            .command(
                                command,
                                args,
                                whole.into_iter().collect(),
                                plan,
                                &spec.url_policy,
                            )
                            .map_err(McpError::Connect)?;
                        (made.command, made.egress)
                    }
                    None => {
                        std::fs::create_dir_all(working_dir).map_err(|e| {
                            McpError::Connect(format!("cannot create the working directory: {e}"))
                        })?;
                        let mut command_line = tokio::process::Command::new(command);
                        command_line
                            .args(args)
                            .env_clear()
                            .envs(inherited_env.iter().cloned())
                            .envs(env)
                            .current_dir(working_dir);
                        (command_line, None)
                    }
                };
                command_line.stderr(Stdio::piped());
                let (transport, stderr) = StdioTransport::spawn(StdioCommand {
                    command: command_line,
                    max_message_bytes: spec.max_message_bytes,
                    limits: *limits,
                    egress,
                    sandboxed,
                })
                .map_err(|e| McpError::Connect(format!("cannot start '{command}': {e}")))?;
                tracing::info!(upstream = %spec.label, pid = transport.pid(), "stdio server started");
                let process = super::client::StdioProcess {
                    group: transport.pid() as i32,
                    limits: transport.limits(),
                    exit: transport.exit_note(),
                };
                let exit = process.exit.clone();
                let _ = started.set(process);
                if let Some(stderr) = stderr {
                    let label = spec.label.clone();
                    tokio::spawn(async move {
                        let mut lines = tokio::io::BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            let line: String = line.chars().take(MAX_STDERR_LINE).collect();
                            tracing::info!(upstream = %label, "stderr: {line}");
                        }
                    });
                }
                handler
                    .serve(transport)
                    .instrument(session.clone())
                    .await
                    .map_err(|e| McpError::Connect(exit.get().cloned().unwrap_or(e.to_string())))
            }
            UpstreamTransport::StreamableHttp { url, headers } => {
                let failures = StreamFailures::default();
                let slots = (&challenges, &failures);
                // Both attempts on one client: a second lease could open a connection of
                // its own for what is one session.
                let client = spec.http.lease(url.expose());
                let (first, fallback) = match spec.revision {
                    SessionRevision::Newest => (newest_first(), ClientLifecycleMode::Initialize),
                    SessionRevision::Initialize => (ClientLifecycleMode::Initialize, newest_only()),
                };
                let first = (client.clone(), first);
                let served = serve_http(spec, url, headers, handler, manager, slots, first)
                    .instrument(session.clone())
                    .await?;
                let served = match served {
                    // Servers of older revisions refuse the probe in every way (an HTTP 400
                    // or 404 without a JSON-RPC answer, an error without the request's id,
                    // a closed stream), servers of 2026-07-28 alone refuse `initialize`;
                    // only a refusal for want of authorization is final.
                    Err(_) if !challenges.is_set() => {
                        tracing::info!(upstream = %spec.label, first = ?spec.revision, "the server refuses the first handshake: trying the other");
                        let manager = match &spec.auth {
                            Some(auth) => auth.manager().await?,
                            None => None,
                        };
                        // What failed before belongs to the first attempt.
                        failures.take();
                        let second = (client, fallback);
                        serve_http(spec, url, headers, new_handler(), manager, slots, second)
                            .instrument(session.clone())
                            .await?
                    }
                    served => served,
                };
                // rmcp says only that the connection closed; a response stream that failed
                // says why.
                served.map_err(|e| McpError::Connect(initialize_failure(&e, failures.take())))
            }
            UpstreamTransport::Sse { url, headers } => {
                let mut headers = header_map(headers)?;
                // The legacy transport takes a token per connection: one that expires
                // mid-session fails a request, and the reconnect takes a fresh one.
                if let Some(manager) = &manager {
                    match manager.get_access_token().await {
                        Ok(token) => {
                            let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(
                                |_| McpError::Connect("an unusable access token".into()),
                            )?;
                            headers.insert(reqwest::header::AUTHORIZATION, value);
                        }
                        Err(rmcp::transport::auth::AuthError::AuthorizationRequired) => {}
                        Err(e) => {
                            return Err(McpError::Connect(format!("token refresh failed: {e}")));
                        }
                    }
                }
                let transport = LegacySseTransport::connect(
                    spec.http.lease(url.expose()),
                    url,
                    headers,
                    challenges.clone(),
                    spec.max_message_bytes,
                )
                .await?;
                handler
                    .serve(transport)
                    .instrument(session.clone())
                    .await
                    .map_err(|e| McpError::Connect(initialize_failure(&e, None)))
            }
            UpstreamTransport::Embedded(kind) => handler
                .serve(crate::embedded::start(*kind))
                .instrument(session.clone())
                .await
                .map_err(|e| McpError::Connect(initialize_failure(&e, None))),
        }
    };
    let service = match tokio::time::timeout(spec.connect_timeout, attempt).await {
        Ok(Ok(service)) => service,
        Ok(Err(error)) => {
            let error = explain_refusal(spec, challenges.explain(error)).await;
            return Err(naming_target(spec, error));
        }
        Err(_) => {
            let error = McpError::Connect(format!(
                "timed out: no answer to initialize within {}s",
                spec.connect_timeout.as_secs()
            ));
            return Err(naming_target(spec, error));
        }
    };
    let changes = super::listen::ChangeListener::start(&service, events, &spec.label);
    Ok(McpClient::new(
        service,
        challenges,
        changes,
        started.into_inner(),
    ))
}

type ClientSession = rmcp::service::RunningService<rmcp::RoleClient, PoolClientHandler>;

/// One streamable-HTTP session on `client` opened with `lifecycle` (the outer error:
/// unusable headers).
async fn serve_http(
    spec: &UpstreamSpec,
    url: &SecretUrl,
    headers: &BTreeMap<String, String>,
    handler: PoolClientHandler,
    manager: Option<rmcp::transport::auth::AuthorizationManager>,
    (challenges, failures): (&ChallengeSlot, &StreamFailures),
    (client, lifecycle): (super::LeasedClient, ClientLifecycleMode),
) -> Result<Result<ClientSession, ClientInitializeError>, McpError> {
    let config = StreamableHttpClientTransportConfig::with_uri(url.expose().as_str())
        .custom_headers(
            header_map(headers)?
                .into_iter()
                .filter_map(|(k, v)| Some((k?, v)))
                .collect::<HashMap<_, _>>(),
        )
        .reinit_on_expired_session(true)
        // A server's answer is held only up to the pool's message limit, as over stdio.
        .max_sse_event_size(spec.max_message_bytes)
        .max_json_response_size(spec.max_message_bytes);
    let client = UrlFreeErrors {
        client,
        challenges: challenges.clone(),
        failures: failures.clone(),
    };
    Ok(match manager {
        // rmcp's `AuthClient` puts the token on each request, refreshes it shortly
        // before it expires, and once more on a 401.
        Some(manager) => {
            let client = rmcp::transport::auth::AuthClient::new(client, manager);
            let transport = StreamableHttpClientTransport::with_client(client, config);
            handler.serve_with_lifecycle(transport, lifecycle).await
        }
        None => {
            let transport = StreamableHttpClientTransport::with_client(client, config);
            handler.serve_with_lifecycle(transport, lifecycle).await
        }
    })
}

/// `server/discover` with 2026-07-28, and `initialize` with 2025-11-25 in the same session
/// where the server answered the probe with a JSON-RPC error of a revision without it.
fn newest_first() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    }
}

/// `server/discover` with 2026-07-28, for a server that refused `initialize`.
fn newest_only() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// Why initialize failed, for a person: rmcp names the transport that failed by its Rust
/// type (`Transport [rmcp::transport::worker::WorkerTransport<…>]`), which says nothing to
/// its reader and pushed the cause (connection refused, a TLS failure, an HTTP status)
/// out of the excerpt; what failed and each cause below it say what happened. `failure`
/// is what the transport saw (`StreamFailures`), which rmcp's error leaves out.
fn initialize_failure(error: &ClientInitializeError, failure: Option<String>) -> String {
    match (error, failure) {
        (ClientInitializeError::TransportError { context, .. }, Some(failure)) => {
            format!("{context}: {failure}")
        }
        (ClientInitializeError::TransportError { error, context }, None) => {
            format!("{context}: {}", super::error_chain(&*error.error))
        }
        (other, Some(failure)) => format!("{}: {failure}", super::error_chain(other)),
        (other, None) => super::error_chain(other),
    }
}

/// A remote server's failed connect names where it dialled (host and port: never the
/// path or query, which may hold secrets), so a person reading it knows which server.
fn naming_target(spec: &UpstreamSpec, error: McpError) -> McpError {
    let (UpstreamTransport::StreamableHttp { url, .. } | UpstreamTransport::Sse { url, .. }) =
        &spec.transport
    else {
        return error;
    };
    let url = url.expose();
    let target = match (url.host_str(), url.port_or_known_default()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        _ => return error,
    };
    match error {
        McpError::Connect(reason) if !reason.contains(&target) => {
            McpError::Connect(format!("{target}: {reason}"))
        }
        other => other,
    }
}

/// A failed HTTP connect whose host the URL policy refuses now is reported as that
/// refusal (the dial was refused by the resolver; rmcp's error no longer says why).
async fn explain_refusal(spec: &UpstreamSpec, error: McpError) -> McpError {
    let (UpstreamTransport::StreamableHttp { url, .. } | UpstreamTransport::Sse { url, .. }) =
        &spec.transport
    else {
        return error;
    };
    match spec
        .url_policy
        .resolve(url.expose().host_str().unwrap_or_default())
        .await
    {
        Err(crate::security::url_guard::ResolveError::Refused(refused)) => {
            McpError::Refused(refused.to_string())
        }
        _ => error,
    }
}

fn header_map(headers: &BTreeMap<String, String>) -> Result<HeaderMap, McpError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|_| McpError::Connect(format!("invalid header name {name}")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| McpError::Connect(format!("invalid value for header {name}")))?;
        map.insert(name, value);
    }
    Ok(map)
}
