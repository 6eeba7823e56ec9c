//! `sandbox`: what the stdio servers' sandbox costs, side by side with the same servers
//! unsandboxed (`pool.sandbox.mode = "off"`), in one run: the spawn of one server (its
//! first call: spawn, `initialize`, the call), `users` users' first calls at once
//! (`CONNECTORS` in flight), each server's proportional memory (PSS of all its
//! processes, the sandbox's included), and calls/s on a connected server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::harness::{Service, fixture_binary, measure, summarize};

/// First calls in flight at once.
const CONNECTORS: usize = 16;

#[derive(Clone, Copy)]
struct Mode {
    label: &'static str,
    sandbox: bool,
    network: &'static str,
}

const MODES: [Mode; 4] = [
    Mode {
        label: "unsandboxed",
        sandbox: false,
        network: "host",
    },
    Mode {
        label: "sandbox, network host",
        sandbox: true,
        network: "host",
    },
    Mode {
        label: "sandbox, network none",
        sandbox: true,
        network: "none",
    },
    Mode {
        label: "sandbox, network egress",
        sandbox: true,
        network: "egress",
    },
];

struct Figures {
    spawn_p50_ms: f64,
    spawn_p99_ms: f64,
    first_calls_per_s: f64,
    pss_mib: f64,
    calls_per_s: f64,
}

/// The server every user runs: the project's fixture (a Rust binary: the cheapest
/// server to start, so the sandbox's share is largest) or the reference server-everything
/// (Node.js, as most servers are).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Upstream {
    Fixture,
    Everything,
}

impl Upstream {
    /// The preset, and the tool call each user makes.
    fn preset_and_call(self, network: &str) -> Result<(Value, &'static str, Value)> {
        Ok(match self {
            Upstream::Fixture => (
                json!({"name": "server", "command": fixture_binary()?, "args": ["stdio"],
                       "sandbox": {"network": network}}),
                "echo",
                json!({"text": "x"}),
            ),
            Upstream::Everything => {
                let folder = std::env::current_dir()?.join("tests/upstreams");
                let script = folder
                    .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
                anyhow::ensure!(
                    script.exists(),
                    "server-everything is not installed: run tests/setup.sh"
                );
                (
                    json!({"name": "server", "command": "node", "args": [script, "stdio"],
                           "sandbox": {"network": network, "readOnlyPaths": [folder]}}),
                    "echo",
                    json!({"message": "x"}),
                )
            }
        })
    }
}

pub async fn run(
    upstream: Upstream,
    users: usize,
    spawns: usize,
    calls: usize,
    concurrency: usize,
    json_out: bool,
) -> Result<()> {
    let mut rows = Vec::new();
    for mode in MODES {
        let figures = one_mode(upstream, mode, users, spawns, calls, concurrency).await?;
        rows.push((mode, figures));
    }
    let base = &rows[0].1;
    if json_out {
        let all: Vec<Value> = rows
            .iter()
            .map(|(mode, f)| {
                json!({"mode": mode.label, "spawn_p50_ms": f.spawn_p50_ms, "spawn_p99_ms": f.spawn_p99_ms,
                       "first_calls_per_s": f.first_calls_per_s, "pss_mib_per_server": f.pss_mib,
                       "calls_per_s": f.calls_per_s})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    println!(
        "{:<26} {:>12} {:>12} {:>16} {:>14} {:>12}",
        "", "spawn p50", "spawn p99", "first calls/s", "PSS/server", "calls/s"
    );
    for (mode, f) in &rows {
        println!(
            "{:<26} {:>9.1} ms {:>9.1} ms {:>9.1} ({:.2}×) {:>7.2} MiB {:>8.0} ({:.3}×)",
            mode.label,
            f.spawn_p50_ms,
            f.spawn_p99_ms,
            f.first_calls_per_s,
            f.first_calls_per_s / base.first_calls_per_s,
            f.pss_mib,
            f.calls_per_s,
            f.calls_per_s / base.calls_per_s,
        );
    }
    for (mode, f) in rows.iter().skip(1) {
        println!(
            "{}: spawn p50 {:+.1} ms, PSS {:+.2} MiB per server",
            mode.label,
            f.spawn_p50_ms - base.spawn_p50_ms,
            f.pss_mib - base.pss_mib
        );
    }
    Ok(())
}

async fn one_mode(
    upstream: Upstream,
    mode: Mode,
    users: usize,
    spawns: usize,
    calls: usize,
    concurrency: usize,
) -> Result<Figures> {
    let service = Arc::new(
        Service::start_with(|s| {
            s.pool.sandbox.mode = if mode.sandbox {
                mcp_pool::config::SandboxMode::On
            } else {
                mcp_pool::config::SandboxMode::Off
            };
        })
        .await?,
    );
    let (preset, tool, arguments) = upstream.preset_and_call(mode.network)?;
    service.post("/admin/presets", "admin", preset).await?;
    let call = Arc::new(move |service: Arc<Service>, user: String, id: String| {
        let arguments = arguments.clone();
        async move {
            service
                .post(
                    &format!("/api/mcp-servers/{id}/tools/{tool}/call"),
                    &user,
                    json!({ "arguments": arguments }),
                )
                .await
                .map(|_| ())
        }
    });
    // One server at a time: the spawn itself.
    let mut spawn_times = Vec::new();
    for n in 0..spawns {
        let user = format!("spawn-{n}");
        let id = service
            .create_server(&user, json!({"name": "fx", "preset": "server"}))
            .await?;
        let started = Instant::now();
        call(service.clone(), user.clone(), id.clone()).await?;
        spawn_times.push(started.elapsed());
        // Each measured alone: its process gone before the next starts.
        service
            .send(
                reqwest::Method::DELETE,
                &format!("/admin/connections/{user}/{id}"),
                "admin",
                None,
            )
            .await?;
    }
    let spawn = summarize(spawn_times, Duration::from_secs(1));

    // Every user's first call at once.
    let mut servers = Vec::new();
    for n in 0..users {
        let user = format!("user-{n}");
        let id = service
            .create_server(&user, json!({"name": "fx", "preset": "server"}))
            .await?;
        servers.push((user, id));
    }
    let servers = Arc::new(servers);
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..CONNECTORS {
        let (service, servers, call) = (service.clone(), servers.clone(), call.clone());
        workers.push(tokio::spawn(async move {
            for (user, id) in servers.iter().skip(worker).step_by(CONNECTORS) {
                call(service.clone(), user.clone(), id.clone()).await?;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let first_calls_per_s = users as f64 / started.elapsed().as_secs_f64();

    // Their memory, all processes of each (the sandbox's own included).
    let connections = service.get("/admin/connections", "admin").await?;
    let pids: Vec<i32> = connections["connections"]
        .as_array()
        .context("connections")?
        .iter()
        .filter_map(|c| c["pid"].as_i64().map(|p| p as i32))
        .collect();
    let pss_kib: u64 = pids.iter().map(|pid| tree_pss_kib(*pid)).sum();
    let pss_mib = pss_kib as f64 / 1024.0 / pids.len().max(1) as f64;

    // Calls on one connected server.
    let (user, id) = servers[0].clone();
    let caller = service.clone();
    let summary = measure(calls, concurrency, move || {
        call(caller.clone(), user.clone(), id.clone())
    })
    .await?;
    service.stop().await?;
    Ok(Figures {
        spawn_p50_ms: spawn.p50 / 1000.0,
        spawn_p99_ms: spawn.p99 / 1000.0,
        first_calls_per_s,
        pss_mib,
        calls_per_s: summary.throughput,
    })
}

/// The proportional set size of `root` and every process beneath it, in KiB.
fn tree_pss_kib(root: i32) -> u64 {
    let mut children: std::collections::HashMap<i32, Vec<i32>> = Default::default();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rfind(')')
            .and_then(|close| stat[close + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut total = 0;
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        let rollup =
            std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        total += rollup
            .lines()
            .find_map(|line| line.strip_prefix("Pss:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .unwrap_or(0);
        stack.extend(children.get(&pid).into_iter().flatten());
    }
    total
}
