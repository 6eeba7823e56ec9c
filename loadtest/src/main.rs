//! `cargo run -p loadtest --release -- <scenario>`: figures for BENCHMARKS.md.
//!
//! Everything runs on loopback and is started here: the fixture MCP server (the
//! `mcp-fixture` binary next to this one, built first when missing under `cargo run`),
//! the service itself (in-process on a temporary SQLite database, or `--external` as its
//! own `mcp-pool serve` process) and, for `chat`, a scripted LLM.

// Test and load clients dial what they are told: the outbound-client rule (clippy.toml)
// is for the service.
#![allow(clippy::disallowed_methods)]

mod harness;
mod scenarios;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// The allocator the `mcp-pool` binary ships with, since the service runs in this process.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(about = "Measures mcp-pool side by side with direct MCP calls (figures, not assertions)")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Scenario {
    /// The same call directly, through the HTTP API and through the gateway.
    CallOverhead {
        /// Calls per cell (upstream × path × concurrency).
        #[arg(long, default_value_t = 4000)]
        calls: usize,
        /// Concurrent callers, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = vec![1, 16, 64])]
        concurrency: Vec<usize>,
        /// Run the service as its own process (`mcp-pool serve`) instead of in this one.
        #[arg(long)]
        external: bool,
    },
    /// N users × M servers held as connected actors, then reaped when idle.
    Actors {
        #[arg(long, default_value_t = 10_000)]
        users: usize,
        #[arg(long, default_value_t = 1)]
        servers_per_user: usize,
        /// The idle timeout the service runs with (longer than connecting them all takes).
        #[arg(long, default_value_t = 30)]
        idle_secs: u64,
        /// Connect-then-reap rounds: RSS that keeps growing round after round is a leak.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// The fixture serves HTTPS offering HTTP/2 (a test CA): sessions share
        /// connections in groups of `pool.sessions_per_http_client` instead of holding one
        /// each, so more actors than descriptors can be held.
        #[arg(long)]
        tls: bool,
    },
    /// Many parked tool calls, then approvals timed one by one.
    Confirmations {
        /// Calls parked at once.
        #[arg(long, default_value_t = 100_000)]
        parked: usize,
        /// How many of them are then approved at each concurrency level, timing each
        /// approval and the call's arrival at the upstream.
        #[arg(long, default_value_t = 2000)]
        approve: usize,
        /// Calls per message (a message's records are stored together).
        #[arg(long, default_value_t = 64)]
        per_message: usize,
        /// Approvers at once, one level after the other.
        #[arg(long, value_delimiter = ',', default_value = "1,64")]
        concurrency: Vec<usize>,
        /// A database for the service instead of a temporary SQLite file (e.g. a
        /// PostgreSQL one: its tables are created; earlier runs' rows are left alone).
        #[arg(long)]
        database_url: Option<String>,
    },
    /// Two instances on one PostgreSQL database: approvals on the instance holding the
    /// parked call and on the other one (forwarded).
    Cluster {
        /// A PostgreSQL database the two instances share (its tables are created).
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/test")]
        database_url: String,
        /// Approvals timed per path.
        #[arg(long, default_value_t = 1000)]
        approve: usize,
    },
    /// The agent loop against a scripted LLM: chats and rounds per second.
    Chat {
        #[arg(long, default_value_t = 2000)]
        chats: usize,
        /// Concurrent chats, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = vec![1, 16])]
        concurrency: Vec<usize>,
    },
    /// The gateway beside mcp-proxy and the REST route beside mcpo (both from PyPI, in a
    /// venv this creates), on the same stdio upstream, interleaved rounds.
    Peers {
        /// Calls per cell (path × concurrency × round).
        #[arg(long, default_value_t = 3000)]
        calls: usize,
        /// Concurrent callers, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = vec![1, 16, 64])]
        concurrency: Vec<usize>,
        /// Rounds; each cell reports the median.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Where the peers' venv is created (once) and kept.
        #[arg(long, default_value = "target/loadtest-peers")]
        venv: std::path::PathBuf,
        /// Only these paths (comma-separated; default all): gateway, mcp-proxy, rest, mcpo.
        /// With neither peer, no venv is made (e.g. to profile the service alone).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// How the gateway and mcp-proxy are called: `rmcp` (the Rust SDK's client, a
        /// task per message) or `http` (the JSON-RPC posted on a kept-alive connection and
        /// the answer read from the body, as the wrk runs did), so the MCP paths
        /// can be compared with the REST paths' plain HTTP client.
        #[arg(long, value_enum, default_value_t = scenarios::peers::McpClientKind::Rmcp)]
        mcp_client: scenarios::peers::McpClientKind,
        /// Policy rules (`{"rules": [...]}`, as `PUT /admin/policies` takes) the service
        /// evaluates on every call, e.g. `loadtest/policies-50.json`.
        #[arg(long)]
        policy_rules: Option<std::path::PathBuf>,
    },
    /// The operators' lists (users, servers, approvals, audit) at scale: seeds users and
    /// audit rows, then times each list and filter the console asks for.
    OperatorLists {
        #[arg(long, default_value_t = 100_000)]
        users: usize,
        #[arg(long, default_value_t = 1_000_000)]
        audit_rows: usize,
        /// Requests per query, one at a time.
        #[arg(long, default_value_t = 50)]
        samples: usize,
        /// A PostgreSQL server (its admin database's URL) on which a database of its own
        /// is created; a temporary SQLite file otherwise.
        #[arg(long)]
        database: Option<String>,
    },
    /// Tool search on the labelled set of tests/tool-search (real servers, labelled
    /// requests): recall@1/5/10 through the REST search, and the tokens of the model's
    /// tool list with every tool and in search mode; writes the set's tools.json.
    ToolSearch {
        /// The set's folder (servers.json, queries.json; its servers installed by
        /// tests/tool-search/setup.sh).
        #[arg(long, default_value = "tests/tool-search")]
        set: std::path::PathBuf,
        /// Ranks by meaning too, with the sentence encoder in this folder (the service's
        /// `tool_search.model_dir`; tests/setup.sh installs one in tests/models).
        #[arg(long)]
        model_dir: Option<String>,
    },
    /// The stdio servers' sandbox beside the same servers unsandboxed: spawn latency,
    /// many users' first calls, memory (PSS) per server, calls/s once connected.
    Sandbox {
        /// The server each user runs.
        #[arg(long, value_enum, default_value_t = scenarios::sandbox::Upstream::Fixture)]
        server: scenarios::sandbox::Upstream,
        /// Users whose first calls run at once (16 in flight).
        #[arg(long, default_value_t = 200)]
        users: usize,
        /// Servers spawned one at a time, for the spawn's latency.
        #[arg(long, default_value_t = 40)]
        spawns: usize,
        /// Calls on one connected server.
        #[arg(long, default_value_t = 4000)]
        calls: usize,
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
    },
    /// Mixed load with faults for a while, outcomes by error code, then a leak check.
    Soak {
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        #[arg(long, default_value_t = 8)]
        users: usize,
        #[arg(long, default_value_t = 32)]
        workers: usize,
        /// Only these operations (comma-separated; default all): echo, echo-http,
        /// embedded, list-tools, slow, timeout, crash, approve.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Cuts the database for this many seconds, a third of the way in (needs
        /// `--database`): reports the outcomes during the cut, the time until the service
        /// is ready again, and whether every acknowledged approval ran exactly once.
        #[arg(long, requires = "database")]
        cut_database: Option<u64>,
        /// A PostgreSQL server (its admin database's URL, e.g.
        /// postgres://postgres@127.0.0.1:5432/postgres) on which the soak creates its own
        /// database, reached through a proxy it can cut.
        #[arg(long)]
        database: Option<String>,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    // The in-process service logs like the real one when RUST_LOG asks (the faults the
    // scenarios inject would otherwise bury the tables).
    let _telemetry = mcp_pool::telemetry::init(&mcp_pool::config::LogSettings {
        filter: "off".into(),
        format: mcp_pool::config::LogFormat::Text,
        otlp_endpoint: String::new(),
        otlp_service_name: String::new(),
    });
    match cli.scenario {
        Scenario::CallOverhead {
            calls,
            concurrency,
            external,
        } => scenarios::call_overhead::run(calls, concurrency, external, cli.json).await,
        Scenario::Actors {
            users,
            servers_per_user,
            idle_secs,
            rounds,
            tls,
        } => {
            scenarios::actors::run(users, servers_per_user, idle_secs, rounds, tls, cli.json).await
        }
        Scenario::Confirmations {
            parked,
            approve,
            per_message,
            concurrency,
            database_url,
        } => {
            scenarios::confirmations::run(
                parked,
                approve,
                per_message,
                &concurrency,
                database_url,
                cli.json,
            )
            .await
        }
        Scenario::Cluster {
            database_url,
            approve,
        } => scenarios::cluster::run(database_url, approve, cli.json).await,
        Scenario::OperatorLists {
            users,
            audit_rows,
            samples,
            database,
        } => scenarios::operator_lists::run(users, audit_rows, samples, database, cli.json).await,
        Scenario::ToolSearch { set, model_dir } => {
            scenarios::tool_search::run(set, model_dir, cli.json).await
        }
        Scenario::Sandbox {
            server,
            users,
            spawns,
            calls,
            concurrency,
        } => scenarios::sandbox::run(server, users, spawns, calls, concurrency, cli.json).await,
        Scenario::Chat { chats, concurrency } => {
            scenarios::chat::run(chats, concurrency, cli.json).await
        }
        Scenario::Peers {
            calls,
            concurrency,
            rounds,
            venv,
            only,
            mcp_client,
            policy_rules,
        } => {
            let options = scenarios::peers::Options {
                mcp_client,
                policy_rules,
            };
            scenarios::peers::run(calls, concurrency, rounds, venv, only, options, cli.json).await
        }
        Scenario::Soak {
            seconds,
            users,
            workers,
            only,
            cut_database,
            database,
        } => {
            let cut = match (cut_database, database) {
                (Some(seconds), Some(server)) => {
                    Some(scenarios::soak::DatabaseCut { server, seconds })
                }
                (None, Some(_)) => anyhow::bail!("--database is for --cut-database"),
                _ => None,
            };
            scenarios::soak::run(seconds, users, workers, &only, cut, cli.json).await
        }
    }
}
