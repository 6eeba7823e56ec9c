//! What every scenario needs: the service (in this process or as `mcp-pool serve`), the
//! fixture upstream, latency series and process readings.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use mcp_pool::{Application, Settings};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

pub const ADMIN_KEY: &str = "loadtest-admin-key-0123456789";

/// A binary of the service or the fixture next to this one. Under `cargo run` (which sets
/// `CARGO`) a missing one is built first, so one command starts everything.
pub fn sibling_binary(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.with_file_name(name);
    if path.exists() {
        return Ok(path);
    }
    let Ok(cargo) = std::env::var("CARGO") else {
        bail!(
            "{} is missing: run `cargo build --release -p mcp-pool -p mcp-fixture` first",
            path.display()
        );
    };
    // The profile this binary was built with, named by its directory (target/<profile>,
    // or target/<profile>/examples for an example).
    let profile = exe
        .ancestors()
        .skip(1)
        .find(|dir| dir.file_name().is_some_and(|name| name != "examples"))
        .and_then(|dir| dir.file_name())
        .and_then(|dir| dir.to_str())
        .map(|dir| if dir == "debug" { "dev" } else { dir })
        .unwrap_or("dev")
        .to_owned();
    eprintln!("building the mcp-pool binaries ({name} is missing)...");
    let mut build = std::process::Command::new(cargo);
    build.args([
        "build",
        "-p",
        "mcp-pool",
        "-p",
        "mcp-fixture",
        "--profile",
        &profile,
    ]);
    if !build.status()?.success() || !path.exists() {
        bail!("could not build {}", path.display());
    }
    Ok(path)
}

pub fn fixture_binary() -> Result<PathBuf> {
    sibling_binary("mcp-fixture")
}

/// Latency summary of one series, in microseconds.
#[derive(Debug, Clone)]
pub struct Summary {
    pub calls: usize,
    pub throughput: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Summary {
    pub fn to_json(&self) -> Value {
        json!({"calls": self.calls, "calls_per_s": self.throughput,
               "p50_us": self.p50, "p90_us": self.p90, "p99_us": self.p99})
    }
}

pub fn summarize(mut latencies: Vec<Duration>, wall: Duration) -> Summary {
    latencies.sort();
    if latencies.is_empty() {
        return Summary {
            calls: 0,
            throughput: 0.0,
            p50: 0.0,
            p90: 0.0,
            p99: 0.0,
        };
    }
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
pub async fn measure<F, Fut>(calls: usize, concurrency: usize, call: F) -> Result<Summary>
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

pub struct Service {
    pub base: String,
    /// `http://127.0.0.1:<grpc port>`.
    pub grpc: String,
    pub client: reqwest::Client,
    key: String,
    _data: tempfile::TempDir,
    running: Running,
}

/// An HTTP answer that was not a success: its status and JSON body.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {status} {body}")]
pub struct Refused {
    pub path: String,
    pub status: reqwest::StatusCode,
    pub body: Value,
}

impl Refused {
    /// The stable error code of the body, or the status.
    pub fn code(&self) -> String {
        self.body["error"]["code"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| self.status.as_u16().to_string())
    }
}

impl Service {
    pub async fn start() -> Result<Self> {
        Self::start_with(|_| {}).await
    }

    /// The service in this process, on a temporary SQLite database, with limits lifted
    /// and `adjust` applied to its settings.
    pub async fn start_with(adjust: impl FnOnce(&mut Settings)) -> Result<Self> {
        let data = tempfile::tempdir()?;
        let mut settings = Settings::defaults();
        settings.server.port = 0;
        settings.grpc.port = 0;
        settings.storage.data_dir = data.path().to_path_buf();
        settings.security.allow_loopback_urls = true;
        settings.pool.max_connections_per_user = 100_000;
        settings.pool.max_stdio_processes = 100_000;
        settings.limits.max_servers_per_user = 100_000;
        // The load is the point: per-user rate limits off.
        settings.limits.tool_calls_per_minute = 0;
        settings.limits.chats_per_minute = 0;
        settings.auth.bootstrap_admin_key = Some(ADMIN_KEY.to_owned().into());
        adjust(&mut settings);
        let app = Application::build(settings).await?;
        let base = format!("http://127.0.0.1:{}", app.port());
        let grpc = format!("http://127.0.0.1:{}", app.grpc_port().unwrap_or_default());
        let shutdown = app.shutdown_token();
        let server = tokio::spawn(async move {
            if let Err(e) = app.run_until_stopped().await {
                eprintln!("service stopped with an error: {e}");
            }
        });
        Ok(Self {
            base,
            grpc,
            client: Self::http_client()?,
            key: ADMIN_KEY.into(),
            _data: data,
            running: Running::InProcess { shutdown, server },
        })
    }

    /// Where the service keeps its files (its SQLite database, unless told another).
    pub fn data_dir(&self) -> &Path {
        self._data.path()
    }

    /// The key every request of the load tool uses (the bootstrap admin key).
    pub fn key(&self) -> &str {
        &self.key
    }

    fn http_client() -> Result<reqwest::Client> {
        Ok(reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()?)
    }

    /// Runs `mcp-pool serve` (next to this binary) with a temporary data directory.
    pub async fn start_external() -> Result<Self> {
        let data = tempfile::tempdir()?;
        let binary = sibling_binary("mcp-pool")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let grpc_port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = tokio::process::Command::new(&binary)
            .arg("serve")
            .current_dir(data.path())
            .env("MCP_POOL__SERVER__PORT", port.to_string())
            .env("MCP_POOL__GRPC__PORT", grpc_port.to_string())
            .env("MCP_POOL__STORAGE__DATA_DIR", data.path())
            .env("MCP_POOL_ADMIN_KEY", ADMIN_KEY)
            .env("MCP_POOL__SECURITY__ALLOW_LOOPBACK_URLS", "true")
            .env("MCP_POOL__POOL__MAX_CONNECTIONS_PER_USER", "100000")
            .env("MCP_POOL__LIMITS__MAX_SERVERS_PER_USER", "100000")
            .env("MCP_POOL__LIMITS__TOOL_CALLS_PER_MINUTE", "0")
            .env("MCP_POOL__LIMITS__CHATS_PER_MINUTE", "0")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let base = format!("http://127.0.0.1:{port}");
        let grpc = format!("http://127.0.0.1:{grpc_port}");
        let client = Self::http_client()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.get(format!("{base}/readyz")).send().await.is_err() {
            if Instant::now() > deadline {
                bail!("mcp-pool serve did not become ready");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Self {
            base,
            grpc,
            client,
            key: ADMIN_KEY.into(),
            _data: data,
            running: Running::External(child),
        })
    }

    /// Sends `method path` as `user` (the admin key acts for any user); a refusal is a
    /// [`Refused`] error.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        user: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .header("X-User-Id", user);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        if !status.is_success() {
            return Err(Refused {
                path: path.to_owned(),
                status,
                body,
            }
            .into());
        }
        Ok(body)
    }

    pub async fn post(&self, path: &str, user: &str, body: Value) -> Result<Value> {
        self.send(reqwest::Method::POST, path, user, Some(body))
            .await
    }

    pub async fn get(&self, path: &str, user: &str) -> Result<Value> {
        self.send(reqwest::Method::GET, path, user, None).await
    }

    /// Registers the fixture (stdio) as the admin preset `fixture`.
    pub async fn add_fixture_preset(&self) -> Result<()> {
        self.add_fixture_preset_with("fixture", &[]).await
    }

    /// A preset `name` running the stdio fixture with extra `flags` (`--clock-tool`).
    pub async fn add_fixture_preset_with(&self, name: &str, flags: &[&str]) -> Result<()> {
        let fixture = fixture_binary()?;
        let args: Vec<&str> = std::iter::once("stdio")
            .chain(flags.iter().copied())
            .collect();
        self.post(
            "/admin/presets",
            "admin",
            json!({"name": name, "command": fixture, "args": args}),
        )
        .await?;
        Ok(())
    }

    pub async fn create_server(&self, user: &str, body: Value) -> Result<String> {
        let created = self.post("/api/mcp-servers", user, body).await?;
        Ok(created["id"].as_str().context("server id")?.to_owned())
    }

    pub async fn bind(&self, user: &str, assistant: &str, servers: &[&str]) -> Result<()> {
        self.send(
            reqwest::Method::PUT,
            &format!("/api/assistants/{assistant}/mcp-servers"),
            user,
            Some(json!({"serverIds": servers})),
        )
        .await?;
        Ok(())
    }

    /// Binds `server` to `assistant` and makes a gateway token: the gateway's URL and token.
    pub async fn gateway_endpoint(
        &self,
        user: &str,
        assistant: &str,
        server: &str,
    ) -> Result<(String, String)> {
        self.bind(user, assistant, &[server]).await?;
        let created = self
            .post(
                &format!("/api/assistants/{assistant}/gateway-tokens"),
                user,
                json!({"name": "loadtest"}),
            )
            .await?;
        let token = created["token"].as_str().context("gateway token")?;
        Ok((
            format!("{}/mcp/assistants/{assistant}", self.base),
            token.to_owned(),
        ))
    }

    /// Binds `server` to an assistant of its own, makes a gateway token and connects an
    /// rmcp client to `/mcp/assistants/{id}`.
    pub async fn gateway_client(
        &self,
        user: &str,
        assistant: &str,
        server: &str,
    ) -> Result<rmcp::service::RunningService<rmcp::RoleClient, ()>> {
        let (url, token) = self.gateway_endpoint(user, assistant, server).await?;
        let config =
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                url,
            )
            .auth_header(token);
        // Kept-alive connections, as SDK clients use them (rmcp's default client opens one
        // per request, which hid the ~44 ms delayed-ACK stall of a listener without
        // TCP_NODELAY).
        Ok(()
            .serve(StreamableHttpClientTransport::with_client(
                reqwest::Client::new(),
                config,
            ))
            .await?)
    }

    /// `/admin/stats`: connection counts by state.
    pub async fn stats(&self) -> Result<Value> {
        self.get("/admin/stats", "admin").await
    }

    /// Stops the service the way SIGTERM would and waits until its children are gone.
    pub async fn stop(self: Arc<Self>) -> Result<()> {
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

/// The fixture serving streamable HTTP on loopback, and its base URL.
pub async fn start_fixture_http() -> Result<(tokio::process::Child, String)> {
    start_fixture_http_with(&[]).await
}

/// The fixture serving HTTPS (HTTP/2 and HTTP/1.1 by ALPN) on loopback with a certificate
/// for 127.0.0.1 from a CA made here; its base URL, and the CA's PEM file in `dir`.
pub async fn start_fixture_https(dir: &Path) -> Result<(tokio::process::Child, String, PathBuf)> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "mcp-pool loadtest CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;
    let key = rcgen::KeyPair::generate()?;
    let server =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &ca)?;
    let (ca_file, cert_file, key_file) = (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    );
    std::fs::write(&ca_file, ca.pem())?;
    std::fs::write(&cert_file, server.pem())?;
    std::fs::write(&key_file, key.serialize_pem())?;
    let (child, base) = start_fixture_http_with(&[
        "--tls-cert".as_ref(),
        cert_file.as_os_str(),
        "--tls-key".as_ref(),
        key_file.as_os_str(),
    ])
    .await?;
    Ok((child, base, ca_file))
}

async fn start_fixture_http_with(
    args: &[&std::ffi::OsStr],
) -> Result<(tokio::process::Child, String)> {
    let mut child = tokio::process::Command::new(fixture_binary()?)
        .arg("http")
        .args(args)
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

pub fn rss_bytes() -> u64 {
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

/// Open file descriptors of this process (sockets included): a leaked session shows here.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count())
}

/// Live tokio tasks of the current runtime: a session whose worker never ends shows here.
pub fn live_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

/// This process's children: live ones whose command line contains `needle` (stdio
/// upstreams the in-process service started) and whose pid is not in `except` (upstreams
/// the load tool started itself), and zombies of any kind (exited, never reaped).
#[derive(Debug, Clone, Default)]
pub struct Children {
    pub live: usize,
    pub zombies: usize,
    /// Every pid counted, to name them when they should not be there.
    pub pids: Vec<u32>,
}

pub fn child_processes(needle: &str, except: &[u32]) -> Children {
    let me = std::process::id().to_string();
    let mut children = Children::default();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return children;
    };
    for entry in entries.filter_map(Result::ok) {
        let dir = entry.path();
        let pid = dir
            .file_name()
            .and_then(|n| n.to_str()?.parse::<u32>().ok());
        if pid.is_none_or(|pid| except.contains(&pid)) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        let mut fields = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace())
            .into_iter()
            .flatten();
        let (state, ppid) = (fields.next(), fields.next());
        if ppid != Some(me.as_str()) {
            continue;
        }
        if state == Some("Z") {
            children.zombies += 1;
        } else if std::fs::read(dir.join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        {
            children.live += 1;
        } else {
            continue;
        }
        children.pids.extend(pid);
    }
    children
}

/// A TCP proxy to a database server that the soak cuts: while cut, every connection
/// through it is closed and every new one refused at once, as when the server stops.
pub struct CutProxy {
    pub port: u16,
    cut: Arc<std::sync::atomic::AtomicBool>,
    open: Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl CutProxy {
    pub async fn start(target: std::net::SocketAddr) -> Result<Self> {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let proxy = Self {
            port: listener.local_addr()?.port(),
            cut: Default::default(),
            open: Default::default(),
        };
        let (cut, open) = (proxy.cut.clone(), proxy.open.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if cut.load(Ordering::SeqCst) {
                    continue;
                }
                let relay = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                open.lock().expect("relays").push(relay.abort_handle());
            }
        });
        Ok(proxy)
    }

    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for relay in self.open.lock().expect("relays").drain(..) {
            relay.abort();
        }
    }

    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}
