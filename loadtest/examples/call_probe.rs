//! Isolates the pool's client-side call cost: `McpClient::call_tool` (timeouts, progress,
//! cancellation) against rmcp's own `peer.call_tool` on the same fixture over stdio, and
//! the cost of argument validation. Run after `cargo build --release -p mcp-pool -p mcp-fixture`:
//! `cargo run -p loadtest --release --example call_probe`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_pool::mcp::{UpstreamHttp, UpstreamSpec, UpstreamTransport, connect};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

fn p50(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

#[tokio::main]
async fn main() {
    let fixture = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("mcp-fixture");
    let policy = Arc::new(mcp_pool::security::UrlPolicy::from_settings(
        &mcp_pool::Settings::defaults().security,
    ));
    let spec = UpstreamSpec {
        label: "probe".into(),
        transport: UpstreamTransport::Stdio {
            command: fixture.display().to_string(),
            args: vec!["stdio".into()],
            env: Default::default(),
            inherited_env: vec![("PATH".into(), std::env::var("PATH").unwrap())],
            working_dir: std::env::temp_dir(),
            limits: Default::default(),
            sandbox: None,
        },
        connect_timeout: Duration::from_secs(10),
        max_message_bytes: 16 << 20,
        url_policy: policy.clone(),
        http: std::sync::Arc::new(
            UpstreamHttp::new(Duration::from_secs(10), policy, 32, None).expect("http clients"),
        ),
        auth: None,
        roots: Vec::new(),
        owner: None,
        revision: Default::default(),
    };
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let pooled = Arc::new(connect(&spec, tx).await.unwrap());
    let mut command = tokio::process::Command::new(&fixture);
    command.arg("stdio");
    let direct = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let args = serde_json::json!({"text": "hello"}).as_object().cloned();
    let tools = pooled.list_tools(Duration::from_secs(10)).await.unwrap();
    let catalog = mcp_pool::pool::ToolCatalog::new(tools);
    let value = serde_json::json!({"text": "hello"});
    catalog.validate("echo", &value).unwrap();
    let t = Instant::now();
    for _ in 0..100_000 {
        catalog.validate("echo", &value).unwrap();
    }
    println!(
        "validate: {:.2}us per call",
        t.elapsed().as_secs_f64() * 1e6 / 100_000.0
    );
    for round in 0..2 {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for _ in 0..3000 {
            let t = Instant::now();
            pooled
                .call_tool(
                    "echo",
                    args.clone(),
                    Duration::from_secs(60),
                    Duration::from_secs(3600),
                )
                .await
                .unwrap();
            a.push(t.elapsed());
            let t = Instant::now();
            let mut p = CallToolRequestParams::new("echo");
            p.arguments = args.clone();
            direct.call_tool(p).await.unwrap();
            b.push(t.elapsed());
        }
        println!(
            "round {round}: McpClient::call_tool p50 {:.0}us, rmcp peer.call_tool p50 {:.0}us",
            p50(a),
            p50(b)
        );
    }
}
