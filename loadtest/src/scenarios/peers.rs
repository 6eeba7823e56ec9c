//! `peers`: mcp-pool beside the peers a new user would try on the same upstream (the
//! fixture's `echo` over stdio), measured in one run, interleaved:
//! - the gateway (`/mcp/assistants/{id}`) vs mcp-proxy 0.13.0 (an MCP gateway in Python),
//!   both through one MCP session over kept-alive connections: rmcp's client by default,
//!   or (`--mcp-client http`) the JSON-RPC posted by the REST paths' kind of client;
//! - the REST call route vs mcpo (MCP → REST in Python), both through a kept-alive
//!   reqwest client.
//!
//! The peers come from PyPI into a venv this scenario creates once
//! (`target/loadtest-peers` by default). mcp-pool runs as its own process
//! (`mcp-pool serve`), like the peers.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::harness::{Service, Summary, fixture_binary, measure};

const USER: &str = "bench";

/// What PyPI gives the venv: the peers, pinned as measured (mcpo needs `mcp<2` and a
/// FastAPI before 0.130).
const PEER_PACKAGES: [&str; 4] = [
    "mcp-proxy==0.13.0",
    "mcpo==0.0.20",
    "mcp<2",
    "fastapi<0.130",
];

/// A peer's process; its whole process group goes when dropped (they spawn the fixture).
struct Peer {
    child: tokio::process::Child,
    base: String,
}

impl Drop for Peer {
    fn drop(&mut self) {
        // The group leader's pid is the group id (`process_group(0)` below).
        if let Some(pid) = self.child.id().and_then(|pid| i32::try_from(pid).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Creates the venv with the peers unless it has them already.
async fn ensure_venv(venv: &Path) -> Result<()> {
    if venv.join("bin/mcp-proxy").exists() && venv.join("bin/mcpo").exists() {
        return Ok(());
    }
    eprintln!(
        "peers: installing {} into {}",
        PEER_PACKAGES.join(" "),
        venv.display()
    );
    let status = tokio::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(venv)
        .status()
        .await?;
    anyhow::ensure!(status.success(), "python3 -m venv failed");
    let status = tokio::process::Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(PEER_PACKAGES)
        .status()
        .await?;
    anyhow::ensure!(status.success(), "pip install of the peers failed");
    Ok(())
}

/// Starts `program args…` in its own process group and waits until `probe` answers.
async fn start_peer(
    program: PathBuf,
    args: Vec<String>,
    base: String,
    probe: &str,
) -> Result<Peer> {
    let child = tokio::process::Command::new(&program)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    let peer = Peer { child, base };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(response) = client.get(format!("{}{probe}", peer.base)).send().await
            && response.status().as_u16() < 500
        {
            return Ok(peer);
        }
        if Instant::now() > deadline {
            bail!("{} did not start listening", program.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An rmcp client with one MCP session over kept-alive connections.
async fn mcp_client(
    url: String,
    token: Option<&str>,
) -> Result<rmcp::service::RunningService<rmcp::RoleClient, ()>> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(token) = token {
        config = config.auth_header(token);
    }
    Ok(()
        .serve(StreamableHttpClientTransport::with_client(
            reqwest::Client::new(),
            config,
        ))
        .await?)
}

fn echo(name: &str) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = json!({"text": "hello"}).as_object().cloned();
    params
}

/// How the MCP paths (the gateway, mcp-proxy) are called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum McpClientKind {
    /// rmcp's client: what a Rust SDK user runs (its own tasks per message).
    Rmcp,
    /// The JSON-RPC posted by hand on a kept-alive connection and the answer read from the
    /// body, nothing else, like the REST paths' client (and the wrk runs).
    Http,
}

/// One MCP session (2025-06-18) over a kept-alive reqwest client, spoken by hand: a call
/// is one POST, its answer the body's JSON or the SSE event that carries it.
struct HttpSession {
    client: reqwest::Client,
    url: String,
    token: Option<String>,
    session: Option<String>,
    next_id: AtomicU64,
}

impl HttpSession {
    async fn open(url: String, token: Option<&str>) -> Result<Self> {
        let mut session = HttpSession {
            client: reqwest::Client::new(),
            url,
            token: token.map(str::to_owned),
            session: None,
            next_id: AtomicU64::new(1),
        };
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "loadtest", "version": "0"}}});
        let response = session.post(&initialize).send().await?.error_for_status()?;
        session.session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|id| id.to_str().ok())
            .map(str::to_owned);
        answer(response, 0).await.context("initialize")?;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        session
            .post(&initialized)
            .send()
            .await?
            .error_for_status()?;
        Ok(session)
    }

    fn post(&self, message: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .json(message);
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        request
    }

    /// `tools/call`; fails unless the tool answered without `isError`.
    async fn call(&self, name: &str, arguments: &Value) -> Result<()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}});
        let response = self.post(&request).send().await?.error_for_status()?;
        let result = answer(response, id).await?;
        anyhow::ensure!(
            result["isError"] != json!(true),
            "the call failed: {result}"
        );
        Ok(())
    }
}

/// The result of the JSON-RPC answer to request `id`, from a JSON or an SSE body.
async fn answer(response: reqwest::Response, id: u64) -> Result<Value> {
    let sse = response
        .headers()
        .get("content-type")
        .and_then(|c| c.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let body = response.text().await?;
    let messages: Vec<Value> = if sse {
        body.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .filter(|data| !data.is_empty())
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?
    } else {
        vec![serde_json::from_str(&body)?]
    };
    let message = messages
        .into_iter()
        .find(|message| message["id"] == json!(id))
        .with_context(|| format!("no answer to request {id} in {body}"))?;
    match message.get("result") {
        Some(result) => Ok(result.clone()),
        None => bail!("request {id} failed: {message}"),
    }
}

/// An MCP session of either kind.
enum McpCaller {
    Rmcp(rmcp::service::RunningService<rmcp::RoleClient, ()>),
    Http(HttpSession),
}

impl McpCaller {
    async fn open(kind: McpClientKind, url: String, token: Option<&str>) -> Result<Self> {
        Ok(match kind {
            McpClientKind::Rmcp => McpCaller::Rmcp(mcp_client(url, token).await?),
            McpClientKind::Http => McpCaller::Http(HttpSession::open(url, token).await?),
        })
    }

    /// The fixture's `echo` as `name`.
    async fn echo(&self, name: &str) -> Result<()> {
        match self {
            McpCaller::Rmcp(peer) => {
                let result = peer.call_tool(echo(name)).await?;
                anyhow::ensure!(result.is_error != Some(true), "the call failed");
            }
            McpCaller::Http(session) => session.call(name, &json!({"text": "hello"})).await?,
        }
        Ok(())
    }
}

/// The four paths, in the order each round runs them.
const PATHS: [&str; 4] = ["gateway", "mcp-proxy", "rest", "mcpo"];

/// The median, NaN for a path that did not run (its cells print as NaN, JSON null).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// How the service is called and set up.
pub struct Options {
    pub mcp_client: McpClientKind,
    /// Policy rules the service evaluates on every call (`PUT /admin/policies`'s body).
    pub policy_rules: Option<PathBuf>,
}

pub async fn run(
    calls: usize,
    levels: Vec<usize>,
    rounds: usize,
    venv: PathBuf,
    only: Vec<String>,
    options: Options,
    as_json: bool,
) -> Result<()> {
    let Options {
        mcp_client,
        policy_rules,
    } = options;
    for path in &only {
        if !PATHS.contains(&path.as_str()) {
            bail!("unknown path {path}: the paths are {}", PATHS.join(", "));
        }
    }
    let runs = |path: &str| only.is_empty() || only.iter().any(|p| p == path);
    if runs("mcp-proxy") || runs("mcpo") {
        ensure_venv(&venv).await?;
    }
    let fixture = fixture_binary()?.display().to_string();
    let service = Arc::new(Service::start_external().await?);
    service.add_fixture_preset().await?;
    if let Some(path) = &policy_rules {
        let rules: Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
        let saved = service
            .send(reqwest::Method::PUT, "/admin/policies", USER, Some(rules))
            .await?;
        eprintln!(
            "peers: {} policy rules in force (version {})",
            saved["rules"].as_array().map_or(0, Vec::len),
            saved["version"]
        );
    }
    let server = service
        .create_server(
            USER,
            json!({"name": "fx", "preset": "fixture", "autoApproveTools": ["echo"]}),
        )
        .await?;
    let (gateway_url, gateway_token) = service.gateway_endpoint(USER, "peers", &server).await?;
    let gateway = Arc::new(McpCaller::open(mcp_client, gateway_url, Some(&gateway_token)).await?);
    let rest_path = Arc::new(format!("/api/mcp-servers/{server}/tools/echo/call"));

    let proxy_port = free_port()?;
    let proxy = match runs("mcp-proxy") {
        false => None,
        true => Some(
            start_peer(
                venv.join("bin/mcp-proxy"),
                vec![
                    "--port".into(),
                    proxy_port.to_string(),
                    "--host".into(),
                    "127.0.0.1".into(),
                    "--log-level".into(),
                    "WARNING".into(),
                    fixture.clone(),
                    "stdio".into(),
                ],
                format!("http://127.0.0.1:{proxy_port}"),
                "/status",
            )
            .await?,
        ),
    };
    let proxy_client = match &proxy {
        Some(proxy) => Some(Arc::new(
            McpCaller::open(mcp_client, format!("{}/mcp", proxy.base), None).await?,
        )),
        None => None,
    };
    let mcpo_port = free_port()?;
    let mcpo = match runs("mcpo") {
        false => None,
        true => Some(
            start_peer(
                venv.join("bin/mcpo"),
                vec![
                    "--host".into(),
                    "127.0.0.1".into(),
                    "--port".into(),
                    mcpo_port.to_string(),
                    "--log-level".into(),
                    "WARNING".into(),
                    "--".into(),
                    fixture,
                    "stdio".into(),
                ],
                format!("http://127.0.0.1:{mcpo_port}"),
                "/openapi.json",
            )
            .await?,
        ),
    };
    let mcpo_url = Arc::new(
        mcpo.as_ref()
            .map(|mcpo| format!("{}/echo", mcpo.base))
            .unwrap_or_default(),
    );
    let http = reqwest::Client::new();

    // results[level][path] = one summary per round.
    let mut results: Vec<Vec<Vec<Summary>>> = vec![vec![Vec::new(); PATHS.len()]; levels.len()];
    for _round in 0..rounds {
        for (level_index, &concurrency) in levels.iter().enumerate() {
            for (path_index, path) in PATHS.iter().enumerate() {
                if !runs(path) {
                    continue;
                }
                let summary = match *path {
                    "gateway" | "mcp-proxy" => {
                        let (peer, name) = if *path == "gateway" {
                            (gateway.clone(), "fx__echo")
                        } else {
                            (proxy_client.clone().context("mcp-proxy runs")?, "echo")
                        };
                        measure(calls, concurrency, move || {
                            let peer = peer.clone();
                            async move { peer.echo(name).await }
                        })
                        .await?
                    }
                    "rest" => {
                        let (svc, route) = (service.clone(), rest_path.clone());
                        measure(calls, concurrency, move || {
                            let (svc, route) = (svc.clone(), route.clone());
                            async move {
                                svc.post(&route, USER, json!({"arguments": {"text": "hello"}}))
                                    .await?;
                                Ok(())
                            }
                        })
                        .await?
                    }
                    _ => {
                        let (client, url) = (http.clone(), mcpo_url.clone());
                        measure(calls, concurrency, move || {
                            let (client, url) = (client.clone(), url.clone());
                            async move {
                                client
                                    .post(url.as_str())
                                    .json(&json!({"text": "hello"}))
                                    .send()
                                    .await?
                                    .error_for_status()?;
                                Ok(())
                            }
                        })
                        .await?
                    }
                };
                results[level_index][path_index].push(summary);
            }
        }
    }
    drop(proxy_client);
    drop(proxy);
    drop(mcpo);
    service.stop().await?;

    // Medians over the rounds, per level and path.
    let mut rows = Vec::new();
    for (level_index, &concurrency) in levels.iter().enumerate() {
        let cell = |path: usize| {
            let runs = &results[level_index][path];
            let mut throughput: Vec<f64> = runs.iter().map(|s| s.throughput).collect();
            let mut p50: Vec<f64> = runs.iter().map(|s| s.p50).collect();
            let mut p99: Vec<f64> = runs.iter().map(|s| s.p99).collect();
            (median(&mut throughput), median(&mut p50), median(&mut p99))
        };
        let cells: Vec<(f64, f64, f64)> = (0..PATHS.len()).map(cell).collect();
        rows.push((concurrency, cells));
    }
    // The name given on the command line (`rmcp`, `http`).
    let client_name =
        clap::ValueEnum::to_possible_value(&mcp_client).map(|value| value.get_name().to_owned());
    if as_json {
        let json: Vec<Value> = rows
            .iter()
            .map(|(concurrency, cells)| {
                let mut row = json!({"concurrency": concurrency, "mcp_client": client_name});
                for (path, (throughput, p50, p99)) in PATHS.iter().zip(cells) {
                    row[*path] = json!({"calls_per_s": throughput, "p50_us": p50, "p99_us": p99});
                }
                row["gateway_over_mcp_proxy"] = json!(cells[0].0 / cells[1].0);
                row["rest_over_mcpo"] = json!(cells[2].0 / cells[3].0);
                row["gateway_over_rest"] = json!(cells[0].0 / cells[2].0);
                row
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    println!(
        "peers: {calls} calls per cell, median of {rounds} interleaved rounds; fixture `echo` \
         over stdio behind each; MCP client {}; calls/s and p50/p99 in µs",
        client_name.as_deref().unwrap_or("?")
    );
    println!(
        "{:>4} | {:>18} | {:>18} | {:>18} | {:>18} | {:>9} {:>9} {:>9}",
        "conc", "gateway", "mcp-proxy", "REST", "mcpo", "gw/proxy", "rest/mcpo", "gw/rest"
    );
    for (concurrency, cells) in &rows {
        // A path left out (`--only`) shows as `-`, and so do the ratios it is part of.
        let cell = |c: &(f64, f64, f64)| {
            if c.0.is_nan() {
                "-".to_owned()
            } else {
                format!("{:>6.0} {:>5.0} {:>5.0}", c.0, c.1, c.2)
            }
        };
        let ratio = |a: usize, b: usize| {
            let ratio = cells[a].0 / cells[b].0;
            if ratio.is_nan() {
                "-".to_owned()
            } else {
                format!("{ratio:.2}×")
            }
        };
        println!(
            "{:>4} | {:>18} | {:>18} | {:>18} | {:>18} | {:>9} {:>9} {:>9}",
            concurrency,
            cell(&cells[0]),
            cell(&cells[1]),
            cell(&cells[2]),
            cell(&cells[3]),
            ratio(0, 1),
            ratio(2, 3),
            ratio(0, 2),
        );
    }
    Ok(())
}
