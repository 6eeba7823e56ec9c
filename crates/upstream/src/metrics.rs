//! Prometheus metrics, served at `GET /metrics`.
//!
//! One registry per service instance (not a process-global recorder), so several
//! instances in one process, as in the tests, each count only their own work. Counters and
//! histograms are recorded where the work happens; the gauges (actors by state, stdio
//! processes, confirmation actors) are read from the pool and the confirmations at scrape
//! time, so they can never drift. No label carries a user or server id: cardinality stays
//! bounded and a scrape reveals nothing about tenants.

mod recent;

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

pub use recent::{RecentCalls, RecentSlot, SLOT_SECS};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    /// The matched route template (`/api/mcp-servers/{id}`), never the raw path.
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ConnectLabels {
    pub transport: &'static str,
    /// `connect` for a first session, `reconnect` for a later one of the same actor.
    pub kind: &'static str,
    /// `ok` or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CallLabels {
    pub transport: &'static str,
    /// `ok`, `tool_error` (the tool answered with isError) or the error code.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PolicyLabels {
    /// The rule's name (the operator's, at most a few hundred).
    pub rule: String,
    /// `allow`, `deny` or `require_approval`.
    pub action: &'static str,
    /// `enforced`, `dry_run` (would have decided), or `error` (could not be evaluated).
    pub mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CacheLabels {
    /// `tools`, `resources` or `prompts`.
    pub catalog: &'static str,
    /// `hit` or `miss`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StateLabels {
    pub state: &'static str,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms .. ~65 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

pub struct Metrics {
    registry: Registry,
    http_requests: Family<HttpLabels, Histogram, fn() -> Histogram>,
    connects: Family<ConnectLabels, Counter>,
    tool_calls: Family<CallLabels, Histogram, fn() -> Histogram>,
    catalog_cache: Family<CacheLabels, Counter>,
    policy_decisions: Family<PolicyLabels, Counter>,
    actors: Family<StateLabels, Gauge>,
    stdio_processes: Gauge,
    confirmation_actors: Gauge,
    parked_calls: Gauge,
    /// The last 15 minutes of tool calls, for the console.
    recent: RecentCalls,
}

/// Live connections counted by state and by transport, for `/admin/stats` and `/metrics`
/// (`pool::census` counts them).
#[derive(Debug, Default, Clone, Copy)]
pub struct ConnectionCensus {
    pub total: usize,
    pub disconnected: usize,
    pub connecting: usize,
    pub connected: usize,
    pub error: usize,
    pub auth_required: usize,
    /// Connections running a local child process.
    pub stdio: usize,
}

impl ConnectionCensus {
    /// Each state, named as `ConnectionState::as_str` names it, with its count.
    pub(crate) fn by_state(&self) -> [(&'static str, usize); 5] {
        [
            ("disconnected", self.disconnected),
            ("connecting", self.connecting),
            ("connected", self.connected),
            ("error", self.error),
            ("auth_required", self.auth_required),
        ]
    }
}

/// What the scrape reads from the running service.
pub struct LiveCounts {
    pub connections: ConnectionCensus,
    pub confirmation_actors: i64,
    pub parked_calls: i64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("mcp_pool");
        let http_requests =
            Family::<HttpLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram as fn() -> Histogram,
            );
        registry.register_with_unit(
            "http_request_duration",
            "HTTP requests by route template, method and status",
            Unit::Seconds,
            http_requests.clone(),
        );
        let connects = Family::<ConnectLabels, Counter>::default();
        registry.register(
            "upstream_connects",
            "MCP session attempts by transport, first or reconnect, and outcome",
            connects.clone(),
        );
        let tool_calls = Family::<CallLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register_with_unit(
            "tool_call_duration",
            "Tool calls through the pool by transport and outcome",
            Unit::Seconds,
            tool_calls.clone(),
        );
        let policy_decisions = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "policy_decisions",
            "Tool calls and servers a policy rule decided (or, in dry run, would have)",
            policy_decisions.clone(),
        );
        let catalog_cache = Family::<CacheLabels, Counter>::default();
        registry.register(
            "catalog_cache_lookups",
            "Tool, resource and prompt list lookups by cache result",
            catalog_cache.clone(),
        );
        let actors = Family::<StateLabels, Gauge>::default();
        registry.register(
            "connection_actors",
            "Live (user, server) connection actors by state",
            actors.clone(),
        );
        let stdio_processes = Gauge::default();
        registry.register(
            "stdio_connections",
            "Live connections whose server is a local child process",
            stdio_processes.clone(),
        );
        let confirmation_actors = Gauge::default();
        registry.register(
            "confirmation_actors",
            "Messages with tool calls parked for approval or still running",
            confirmation_actors.clone(),
        );
        let parked_calls = Gauge::default();
        registry.register(
            "parked_tool_calls",
            "Tool calls waiting for the user's approval",
            parked_calls.clone(),
        );
        Self {
            parked_calls,
            recent: RecentCalls::default(),
            registry,
            http_requests,
            connects,
            tool_calls,
            catalog_cache,
            policy_decisions,
            actors,
            stdio_processes,
            confirmation_actors,
        }
    }

    pub fn http_request(&self, labels: HttpLabels, took: Duration) {
        self.http_requests
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn upstream_connect(&self, transport: &'static str, reconnect: bool, ok: bool) {
        self.connects
            .get_or_create(&ConnectLabels {
                transport,
                kind: if reconnect { "reconnect" } else { "connect" },
                outcome: if ok { "ok" } else { "failed" },
            })
            .inc();
    }

    pub fn tool_call(&self, transport: &'static str, outcome: &'static str, took: Duration) {
        self.tool_calls
            .get_or_create(&CallLabels { transport, outcome })
            .observe(took.as_secs_f64());
        self.recent.record(outcome, took);
    }

    /// Tool calls of the last 15 minutes on this instance.
    pub fn recent_calls(&self) -> Vec<RecentSlot> {
        self.recent.window()
    }

    pub fn catalog_lookup(&self, catalog: &'static str, hit: bool) {
        self.catalog_cache
            .get_or_create(&CacheLabels {
                catalog,
                result: if hit { "hit" } else { "miss" },
            })
            .inc();
    }

    pub fn policy_decision(&self, rule: &str, action: &'static str, mode: &'static str) {
        self.policy_decisions
            .get_or_create(&PolicyLabels {
                rule: rule.to_owned(),
                action,
                mode,
            })
            .inc();
    }

    /// The exposition text, with the gauges set from `live` first.
    pub fn render(&self, live: LiveCounts) -> String {
        for (state, count) in live.connections.by_state() {
            self.actors
                .get_or_create(&StateLabels { state })
                .set(count as i64);
        }
        self.stdio_processes.set(live.connections.stdio as i64);
        self.confirmation_actors.set(live.confirmation_actors);
        self.parked_calls.set(live.parked_calls);
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
