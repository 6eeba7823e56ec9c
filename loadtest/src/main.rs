//! `cargo run -p loadtest --release -- <scenario>`: figures for BENCHMARKS.md.
//!
//! Everything runs on loopback and is started here: the fixture MCP server (the
//! `mcp-fixture` binary next to this one: `cargo build --release --bins` first) and the
//! service itself, in-process, with a temporary SQLite database.
//!
//! - `call-overhead`: the same `echo` call made directly with an rmcp client and through
//!   the pool's HTTP API, over stdio and streamable HTTP, at each concurrency
//!   (`--external`: the service runs as its own `mcp-pool serve` process).
//! - `actors`: N connected (user, server) actors on one HTTP upstream; RSS before/after.
//! - `confirmations`: N parked tool calls (RSS per call), then approvals timed one by one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use mcp_pool::{Application, Settings};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Scenario {
    CallOverhead {
        #[arg(long, default_value_t = 4000)]
        calls: usize,
        #[arg(long, value_delimiter = ',', default_values_t = vec![1, 64])]
        concurrency: Vec<usize>,
        /// Run the service as its own process (`mcp-pool serve`) instead of in this one.
        #[arg(long)]
        external: bool,
    },
    Actors {
        #[arg(long, default_value_t = 1000)]
        count: usize,
    },
    Confirmations {
        /// Calls parked at once (64 per message).
        #[arg(long, default_value_t = 100_000)]
        parked: usize,
        /// How many of them are then approved one by one, timing each approval.
        #[arg(long, default_value_t = 2000)]
        approve: usize,
        /// Calls per message (a message's records are stored together).
        #[arg(long, default_value_t = 64)]
        per_message: usize,
    },
}

const ADMIN_KEY: &str = "loadtest-admin-key-0123456789";

fn fixture_binary() -> Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name("mcp-fixture");
    if !path.exists() {
        bail!(
            "{} is missing: run `cargo build --release --bins` first",
            path.display()
        );
    }
    Ok(path)
}

/// Latency summary of one series, in microseconds.
#[derive(Debug, Clone)]
struct Summary {
    calls: usize,
    throughput: f64,
    p50: f64,
    p90: f64,
    p99: f64,
}

fn summarize(mut latencies: Vec<Duration>, wall: Duration) -> Summary {
    latencies.sort();
    let at = |q: f64| {
        latencies[((latencies.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e6
    };
    Summary {
        calls: latencies.len(),
        throughput: latencies.len() as f64 / wall.as_secs_f64(),
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
    }
}

/// Runs `calls` invocations of `call` spread over `concurrency` workers.
async fn measure<F, Fut>(calls: usize, concurrency: usize, call: F) -> Result<Summary>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let call = Arc::new(call);
    // Warm up connections and caches.
    for _ in 0..concurrency.min(16) {
        call().await?;
    }
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..concurrency {
        let call = call.clone();
        let share = calls / concurrency + usize::from(worker < calls % concurrency);
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(share);
            for _ in 0..share {
                let begun = Instant::now();
                call().await?;
                latencies.push(begun.elapsed());
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut all = Vec::with_capacity(calls);
    for worker in workers {
        all.extend(worker.await??);
    }
    Ok(summarize(all, started.elapsed()))
}

/// How the measured service runs.
enum Running {
    /// In this process, sharing its runtime with the load generator.
    InProcess {
        shutdown: tokio_util::sync::CancellationToken,
        server: tokio::task::JoinHandle<()>,
    },
    /// The real `mcp-pool serve` binary in its own process.
    External(tokio::process::Child),
}

struct Service {
    base: String,
    client: reqwest::Client,
    key: String,
    _data: tempfile::TempDir,
    running: Running,
}

impl Service {
    async fn start() -> Result<Self> {
        let data = tempfile::tempdir()?;
        let mut settings = Settings::defaults();
        settings.server.port = 0;
        settings.storage.data_dir = data.path().to_path_buf();
        settings.security.allow_loopback_urls = true;
        settings.pool.max_connections_per_user = 100_000;
        settings.pool.max_stdio_processes = 100_000;
        settings.limits.max_servers_per_user = 100_000;
        settings.auth.bootstrap_admin_key = Some(ADMIN_KEY.to_owned().into());
        let app = Application::build(settings).await?;
        let base = format!("http://127.0.0.1:{}", app.port());
        let shutdown = app.shutdown_token();
        let server = tokio::spawn(async move {
            if let Err(e) = app.run_until_stopped().await {
                eprintln!("service stopped with an error: {e}");
            }
        });
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()?;
        let service = Self {
            base,
            client,
            key: ADMIN_KEY.into(),
            _data: data,
            running: Running::InProcess { shutdown, server },
        };
        Ok(service)
    }

    /// Runs `mcp-pool serve` (next to this binary) with a temporary data directory.
    async fn start_external() -> Result<Self> {
        let data = tempfile::tempdir()?;
        let binary = std::env::current_exe()?.with_file_name("mcp-pool");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = tokio::process::Command::new(&binary)
            .arg("serve")
            .current_dir(data.path())
            .env("MCP_POOL__SERVER__PORT", port.to_string())
            .env("MCP_POOL__STORAGE__DATA_DIR", data.path())
            .env("MCP_POOL_ADMIN_KEY", ADMIN_KEY)
            .env("MCP_POOL__SECURITY__ALLOW_LOOPBACK_URLS", "true")
            .env("MCP_POOL__POOL__MAX_CONNECTIONS_PER_USER", "100000")
            .env("MCP_POOL__LIMITS__MAX_SERVERS_PER_USER", "100000")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.get(format!("{base}/readyz")).send().await.is_err() {
            if Instant::now() > deadline {
                bail!("mcp-pool serve did not become ready");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Self {
            base,
            client,
            key: ADMIN_KEY.into(),
            _data: data,
            running: Running::External(child),
        })
    }

    async fn post(&self, path: &str, user: &str, body: Value) -> Result<Value> {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .header("X-User-Id", user)
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let body: Value = response.json().await?;
        if !status.is_success() {
            bail!("{path}: {status} {body}");
        }
        Ok(body)
    }

    /// Binds `server` to an assistant of its own, makes a gateway token and connects an
    /// rmcp client to `/mcp/assistants/{id}`.
    async fn gateway_client(
        &self,
        assistant: &str,
        server: &str,
    ) -> Result<rmcp::service::RunningService<rmcp::RoleClient, ()>> {
        self.client
            .put(format!(
                "{}/api/assistants/{assistant}/mcp-servers",
                self.base
            ))
            .bearer_auth(&self.key)
            .header("X-User-Id", "bench")
            .json(&json!({"serverIds": [server]}))
            .send()
            .await?
            .error_for_status()?;
        let created = self
            .post(
                &format!("/api/assistants/{assistant}/gateway-tokens"),
                "bench",
                json!({"name": "loadtest"}),
            )
            .await?;
        let token = created["token"].as_str().context("gateway token")?;
        let config =
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                format!("{}/mcp/assistants/{assistant}", self.base),
            )
            .auth_header(token);
        Ok(
            ().serve(StreamableHttpClientTransport::from_config(config))
                .await?,
        )
    }

    async fn create_server(&self, user: &str, body: Value) -> Result<String> {
        let created = self.post("/api/mcp-servers", user, body).await?;
        Ok(created["id"].as_str().context("server id")?.to_owned())
    }
}

impl Service {
    /// Stops the service the way SIGTERM would and waits until its children are gone.
    async fn stop(self: Arc<Self>) -> Result<()> {
        let service = Arc::into_inner(self).context("the service is still shared")?;
        match service.running {
            Running::InProcess { shutdown, server } => {
                shutdown.cancel();
                server.await?;
            }
            Running::External(mut child) => {
                if let Some(pid) = child.id() {
                    // SIGTERM: the service stops its connections and children itself.
                    tokio::process::Command::new("kill")
                        .arg(pid.to_string())
                        .status()
                        .await?;
                }
                child.wait().await?;
            }
        }
        Ok(())
    }
}

async fn start_fixture_http() -> Result<(tokio::process::Child, String)> {
    let mut child = tokio::process::Command::new(fixture_binary()?)
        .arg("http")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().context("stdout")?).lines();
    let line = lines
        .next_line()
        .await?
        .context("fixture announces its address")?;
    Ok((child, line.trim_start_matches("listening on ").to_owned()))
}

fn echo_params() -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new("echo");
    params.arguments = json!({"text": "hello"}).as_object().cloned();
    params
}

async fn call_overhead(
    calls: usize,
    levels: Vec<usize>,
    external: bool,
    as_json: bool,
) -> Result<()> {
    let service = Arc::new(if external {
        Service::start_external().await?
    } else {
        Service::start().await?
    });
    let fixture = fixture_binary()?;
    let (_http_child, http_base) = start_fixture_http().await?;
    reqwest::Client::new()
        .post(format!("{}/admin/presets", service.base))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({"name": "fixture", "command": fixture, "args": ["stdio"]}))
        .send()
        .await?
        .error_for_status()?;

    let mut rows = Vec::new();
    for transport in ["stdio", "streamableHttp"] {
        let direct = match transport {
            "stdio" => {
                let mut command = tokio::process::Command::new(&fixture);
                command.arg("stdio");
                Arc::new(().serve(TokioChildProcess::new(command)?).await?)
            }
            _ => Arc::new(
                ().serve(StreamableHttpClientTransport::from_uri(format!(
                    "{http_base}/mcp"
                )))
                .await?,
            ),
        };
        let server_body = match transport {
            "stdio" => {
                json!({"name": "fx-stdio", "preset": "fixture", "autoApproveTools": ["echo"]})
            }
            _ => {
                json!({"name": "fx-http", "baseUrl": format!("{http_base}/mcp"), "autoApproveTools": ["echo"]})
            }
        };
        let server_name = server_body["name"].as_str().unwrap_or_default().to_owned();
        let server = service.create_server("bench", server_body).await?;
        let path = Arc::new(format!("/api/mcp-servers/{server}/tools/echo/call"));
        let gateway = Arc::new(service.gateway_client(transport, &server).await?);
        let gateway_tool = Arc::new(format!("{server_name}.echo"));
        for &concurrency in &levels {
            let peer = direct.clone();
            let direct_summary = measure(calls, concurrency, move || {
                let peer = peer.clone();
                async move {
                    peer.call_tool(echo_params()).await?;
                    Ok(())
                }
            })
            .await?;
            let (svc, path2) = (service.clone(), path.clone());
            let pool_summary = measure(calls, concurrency, move || {
                let (svc, path) = (svc.clone(), path2.clone());
                async move {
                    svc.post(&path, "bench", json!({"arguments": {"text": "hello"}}))
                        .await?;
                    Ok(())
                }
            })
            .await?;
            let svc = service.clone();
            let floor = measure(calls, concurrency, move || {
                let svc = svc.clone();
                async move {
                    svc.client
                        .get(format!("{}/healthz", svc.base))
                        .send()
                        .await?
                        .error_for_status()?;
                    Ok(())
                }
            })
            .await?;
            let (peer, tool) = (gateway.clone(), gateway_tool.clone());
            let gateway_summary = measure(calls, concurrency, move || {
                let (peer, tool) = (peer.clone(), tool.clone());
                async move {
                    let mut params = echo_params();
                    params.name = tool.to_string().into();
                    peer.call_tool(params).await?;
                    Ok(())
                }
            })
            .await?;
            rows.push((
                transport,
                concurrency,
                direct_summary,
                pool_summary,
                floor,
                gateway_summary,
            ));
        }
    }
    service.stop().await?;

    if as_json {
        let json_rows: Vec<Value> = rows
            .iter()
            .map(|(t, c, d, p, f, g)| {
                json!({
                    "gateway": {"p50_us": g.p50, "p90_us": g.p90, "p99_us": g.p99, "calls_per_s": g.throughput},
                    "gateway_added_p50_us": g.p50 - d.p50,
                    "gateway_ratio_p50": g.p50 / d.p50,
                    "transport": t, "concurrency": c, "calls": d.calls,
                    "http_floor": {"p50_us": f.p50, "p99_us": f.p99},
                    "direct": {"p50_us": d.p50, "p90_us": d.p90, "p99_us": d.p99, "calls_per_s": d.throughput},
                    "pool": {"p50_us": p.p50, "p90_us": p.p90, "p99_us": p.p99, "calls_per_s": p.throughput},
                    "added_p50_us": p.p50 - d.p50,
                    "ratio_p50": p.p50 / d.p50,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&json_rows)?);
    } else {
        println!(
            "call-overhead: `echo` on the fixture, direct rmcp client vs the pool's HTTP call route vs the gateway (rmcp client on /mcp/assistants/{{id}})"
        );
        println!(
            "{:<15} {:>5} | {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9} | {:>10} {:>6} | {:>11} | {:>9} {:>9} {:>9} {:>10} {:>6}",
            "transport",
            "conc",
            "dir p50",
            "dir p90",
            "dir p99",
            "dir c/s",
            "pool p50",
            "pool p90",
            "pool p99",
            "pool c/s",
            "added p50",
            "ratio",
            "healthz p50",
            "gw p50",
            "gw p99",
            "gw c/s",
            "gw added",
            "ratio"
        );
        for (t, c, d, p, f, g) in &rows {
            println!(
                "{:<15} {:>5} | {:>7.0}us {:>7.0}us {:>7.0}us {:>9.0} | {:>7.0}us {:>7.0}us {:>7.0}us {:>9.0} | {:>8.0}us {:>6.2} | {:>9.0}us | {:>7.0}us {:>7.0}us {:>9.0} {:>8.0}us {:>6.2}",
                t,
                c,
                d.p50,
                d.p90,
                d.p99,
                d.throughput,
                p.p50,
                p.p90,
                p.p99,
                p.throughput,
                p.p50 - d.p50,
                p.p50 / d.p50,
                f.p50,
                g.p50,
                g.p99,
                g.throughput,
                g.p50 - d.p50,
                g.p50 / d.p50
            );
        }
    }
    Ok(())
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

async fn actors(count: usize, as_json: bool) -> Result<()> {
    let service = Arc::new(Service::start().await?);
    let (_http_child, http_base) = start_fixture_http().await?;
    let mut servers = Vec::with_capacity(count);
    for i in 0..count {
        let user = format!("user{i}");
        let id = service
            .create_server(
                &user,
                json!({"name": "fx", "baseUrl": format!("{http_base}/mcp")}),
            )
            .await?;
        servers.push((user, id));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_bytes();
    let started = Instant::now();
    let servers = Arc::new(servers);
    let mut workers = Vec::new();
    for worker in 0..32 {
        let (service, servers) = (service.clone(), servers.clone());
        workers.push(tokio::spawn(async move {
            for (user, id) in servers.iter().skip(worker).step_by(32) {
                service
                    .post(&format!("/api/mcp-servers/{id}/connect"), user, json!({}))
                    .await?;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let spawn_time = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_bytes();
    let per_actor = (after.saturating_sub(before)) as f64 / count as f64;
    drop(servers);
    service.stop().await?;
    if as_json {
        println!(
            "{}",
            json!({"actors": count, "rss_before": before, "rss_after": after, "bytes_per_actor": per_actor, "connect_all_ms": spawn_time.as_millis()})
        );
    } else {
        println!("actors: {count} connected (user, server) actors on one streamable-HTTP upstream");
        println!(
            "  RSS before {:.1} MiB, after {:.1} MiB",
            before as f64 / 1048576.0,
            after as f64 / 1048576.0
        );
        println!(
            "  {:.1} KiB per connected idle actor (actor + rmcp session + HTTP client)",
            per_actor / 1024.0
        );
        println!(
            "  connecting all took {:.2}s ({:.0}/s)",
            spawn_time.as_secs_f64(),
            count as f64 / spawn_time.as_secs_f64()
        );
    }
    Ok(())
}

async fn confirmations(
    parked: usize,
    approve: usize,
    per_message: usize,
    as_json: bool,
) -> Result<()> {
    let service = Arc::new(Service::start().await?);
    let fixture = fixture_binary()?;
    reqwest::Client::new()
        .post(format!("{}/admin/presets", service.base))
        .bearer_auth(ADMIN_KEY)
        .json(&json!({"name": "fixture", "command": fixture, "args": ["stdio"]}))
        .send()
        .await?
        .error_for_status()?;
    let server = service
        .create_server("bench", json!({"name": "fx", "preset": "fixture"}))
        .await?;
    service
        .client
        .put(format!("{}/api/assistants/a1/mcp-servers", service.base))
        .bearer_auth(ADMIN_KEY)
        .header("X-User-Id", "bench")
        .json(&json!({"serverIds": [server]}))
        .send()
        .await?
        .error_for_status()?;
    // Warm the connection and tool list so parking measures parking.
    service
        .post(
            &format!("/api/mcp-servers/{server}/connect"),
            "bench",
            json!({}),
        )
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_bytes();
    let started = Instant::now();
    let per_message = per_message.clamp(1, 64);
    let messages: Vec<String> = (0..parked.div_ceil(per_message))
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let messages = Arc::new(messages);
    let mut workers = Vec::new();
    for worker in 0..16 {
        let (service, messages) = (service.clone(), messages.clone());
        workers.push(tokio::spawn(async move {
            for (index, message) in messages.iter().enumerate().skip(worker).step_by(16) {
                let count = per_message.min(parked - index * per_message);
                let calls: Vec<Value> = (0..count)
                    .map(|i| json!({"id": format!("c{i}"), "name": "mcp__fx__echo", "arguments": {"text": "x"}}))
                    .collect();
                service
                    .post(&format!("/api/messages/{message}/tool-calls"), "bench", json!({"assistantId": "a1", "calls": calls}))
                    .await?;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let park_time = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_bytes();
    let mut latencies = Vec::with_capacity(approve);
    let approve_started = Instant::now();
    for n in 0..approve {
        let message = &messages[n % messages.len()];
        let call = format!("c{}", n / messages.len());
        let begun = Instant::now();
        service
            .post(
                &format!("/api/messages/{message}/tool-confirm"),
                "bench",
                json!({"toolCallId": call, "approved": true}),
            )
            .await?;
        latencies.push(begun.elapsed());
    }
    let approvals = summarize(latencies, approve_started.elapsed());
    let per_call = after.saturating_sub(before) as f64 / parked as f64;
    if as_json {
        println!(
            "{}",
            json!({"parked": parked, "park_ms": park_time.as_millis(), "rss_before": before, "rss_after": after,
                   "bytes_per_parked_call": per_call,
                   "approve": {"count": approvals.calls, "p50_us": approvals.p50, "p90_us": approvals.p90, "p99_us": approvals.p99}})
        );
    } else {
        println!(
            "confirmations: {parked} calls parked in {} messages",
            messages.len()
        );
        println!(
            "  parking took {:.2}s ({:.0} calls/s)",
            park_time.as_secs_f64(),
            parked as f64 / park_time.as_secs_f64()
        );
        println!(
            "  RSS before {:.1} MiB, after {:.1} MiB: {:.0} bytes per parked call",
            before as f64 / 1048576.0,
            after as f64 / 1048576.0,
            per_call
        );
        println!(
            "  approve (HTTP round trip: stored as invoking, execution started): p50 {:.0}us p90 {:.0}us p99 {:.0}us over {}",
            approvals.p50, approvals.p90, approvals.p99, approvals.calls
        );
    }
    drop(messages);
    service.stop().await
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.scenario {
        Scenario::CallOverhead {
            calls,
            concurrency,
            external,
        } => call_overhead(calls, concurrency, external, cli.json).await,
        Scenario::Actors { count } => actors(count, cli.json).await,
        Scenario::Confirmations {
            parked,
            approve,
            per_message,
        } => confirmations(parked, approve, per_message, cli.json).await,
    }
}
