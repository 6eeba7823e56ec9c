//! Opening a session to an upstream: spawn or dial, then the initialize handshake, all
//! within the connect timeout.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;
use url::Url;

use super::handler::{PoolClientHandler, UpstreamEvents};
use super::sse::LegacySseTransport;
use super::{McpClient, McpError};

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
    },
    StreamableHttp {
        url: Url,
        headers: BTreeMap<String, String>,
    },
    Sse {
        url: Url,
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

/// Everything needed to open one upstream session.
#[derive(Clone, Debug)]
pub struct UpstreamSpec {
    /// Names the connection in logs (`user/server`), never secrets.
    pub label: String,
    pub transport: UpstreamTransport,
    pub connect_timeout: Duration,
    /// Shared by every HTTP connection: a client per connection cost ~250 KiB each
    /// (its TLS root store and pool), measured with `loadtest actors`.
    pub http: reqwest::Client,
}

/// The HTTP client all remote connections share.
pub fn http_client(connect_timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        // As rmcp's own default client: a kept-alive connection reused after a streamed
        // POST response stalls each call by ~40 ms (measured with loadtest call-overhead).
        .pool_max_idle_per_host(0)
        // The URL was checked by the URL policy; a redirect would bypass that check.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a reqwest client with these options builds")
}

pub async fn connect(
    spec: &UpstreamSpec,
    events: mpsc::UnboundedSender<UpstreamEvents>,
) -> Result<McpClient, McpError> {
    let handler = PoolClientHandler::new(events);
    let attempt = async {
        match &spec.transport {
            UpstreamTransport::Stdio {
                command,
                args,
                env,
                inherited_env,
                working_dir,
            } => {
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
                let mut wrapped = CommandWrap::from(command_line);
                // A group, so npx/uvx grandchildren die with the server.
                wrapped.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
                let (transport, stderr) = TokioChildProcess::builder(wrapped)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| McpError::Connect(format!("cannot start '{command}': {e}")))?;
                tracing::info!(upstream = %spec.label, pid = transport.id(), "stdio server started");
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
                    .await
                    .map_err(|e| McpError::Connect(e.to_string()))
            }
            UpstreamTransport::StreamableHttp { url, headers } => {
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(
                        header_map(headers)?
                            .into_iter()
                            .filter_map(|(k, v)| Some((k?, v)))
                            .collect::<HashMap<_, _>>(),
                    )
                    .reinit_on_expired_session(true);
                let transport =
                    StreamableHttpClientTransport::with_client(spec.http.clone(), config);
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| McpError::Connect(e.to_string()))
            }
            UpstreamTransport::Sse { url, headers } => {
                let transport = LegacySseTransport::connect(
                    spec.http.clone(),
                    url.clone(),
                    header_map(headers)?,
                )
                .await?;
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| McpError::Connect(e.to_string()))
            }
            UpstreamTransport::Embedded(kind) => handler
                .serve(crate::embedded::start(*kind))
                .await
                .map_err(|e| McpError::Connect(e.to_string())),
        }
    };
    let service = tokio::time::timeout(spec.connect_timeout, attempt)
        .await
        .map_err(|_| {
            McpError::Connect(format!(
                "no answer to initialize within {}s",
                spec.connect_timeout.as_secs()
            ))
        })??;
    Ok(McpClient::new(service))
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
