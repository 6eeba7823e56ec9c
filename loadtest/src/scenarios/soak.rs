//! `soak`: a mixed load for a given time with faults injected — stdio upstreams crashing
//! mid-use, slow tools, calls outrunning their timeout, parked calls approved — reporting
//! outcomes by error code, then checking that nothing leaked: no child process, zombie or
//! actor left once the connections are closed, and none after the service stops.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::harness::{
    Children, CutProxy, Refused, Service, child_processes, live_tasks, mib, rss_bytes,
    start_fixture_http,
};

/// Seconds a soak server's calls may take; the `timeout` operation sleeps longer.
const CALL_TIMEOUT_SECS: u64 = 2;

/// One user's servers (their ids) and assistant.
struct Tenant {
    user: String,
    stdio: String,
    http: String,
    embedded: String,
}

/// What one operation does; picked by weight from a fixed cycle so runs are comparable.
#[derive(Clone, Copy, Debug)]
enum Operation {
    Echo,
    EchoHttp,
    Embedded,
    ListTools,
    Slow,
    Timeout,
    Crash,
    ParkAndApprove,
}

impl Operation {
    const MIX: [(Operation, usize); 8] = [
        (Operation::Echo, 30),
        (Operation::EchoHttp, 20),
        (Operation::Embedded, 15),
        (Operation::ListTools, 10),
        (Operation::Slow, 12),
        (Operation::ParkAndApprove, 10),
        (Operation::Timeout, 2),
        (Operation::Crash, 1),
    ];

    /// The mix restricted to the operations named in `only` (all when empty).
    fn mix(only: &[String]) -> Result<Vec<(Operation, usize)>> {
        for key in only {
            anyhow::ensure!(
                Self::MIX.iter().any(|(o, _)| o.key() == key),
                "unknown operation '{key}'"
            );
        }
        Ok(Self::MIX
            .into_iter()
            .filter(|(o, _)| only.is_empty() || only.iter().any(|k| k == o.key()))
            .collect())
    }

    /// The `n`th operation of a fixed, well-spread cycle, so runs are comparable.
    fn nth(n: usize, mix: &[(Operation, usize)]) -> Self {
        let total: usize = mix.iter().map(|(_, w)| w).sum();
        let mut at = n.wrapping_mul(2_654_435_761) % total;
        for &(operation, weight) in mix {
            if at < weight {
                return operation;
            }
            at -= weight;
        }
        Operation::Echo
    }

    fn key(self) -> &'static str {
        match self {
            Operation::Echo => "echo",
            Operation::EchoHttp => "echo-http",
            Operation::Embedded => "embedded",
            Operation::ListTools => "list-tools",
            Operation::Slow => "slow",
            Operation::Timeout => "timeout",
            Operation::Crash => "crash",
            Operation::ParkAndApprove => "approve",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Operation::Echo => "echo (stdio)",
            Operation::EchoHttp => "echo (http)",
            Operation::Embedded => "add (embedded)",
            Operation::ListTools => "list tools",
            Operation::Slow => "slow 50-300 ms",
            Operation::Timeout => "slow past timeout",
            Operation::Crash => "crash (stdio)",
            Operation::ParkAndApprove => "park + approve",
        }
    }
}

async fn perform(
    service: &Service,
    tenant: &Tenant,
    operation: Operation,
    n: usize,
    approvals: &Approvals,
) -> Result<()> {
    let user = tenant.user.as_str();
    let call = |server: &str, tool: &str, arguments: Value| {
        let path = format!("/api/mcp-servers/{server}/tools/{tool}/call");
        async move {
            let result = service
                .post(&path, user, json!({"arguments": arguments}))
                .await?;
            anyhow::ensure!(result["isError"] != true, "TOOL_ERROR");
            Ok(())
        }
    };
    match operation {
        Operation::Echo => call(&tenant.stdio, "echo", json!({"text": "soak"})).await,
        Operation::EchoHttp => call(&tenant.http, "echo", json!({"text": "soak"})).await,
        Operation::Embedded => call(&tenant.embedded, "add", json!({"a": n, "b": 1})).await,
        Operation::ListTools => {
            service
                .get(&format!("/api/mcp-servers/{}/tools", tenant.stdio), user)
                .await?;
            Ok(())
        }
        Operation::Slow => {
            let ms = 50 + (n * 37) % 250;
            call(&tenant.http, "slow", json!({"ms": ms})).await
        }
        Operation::Timeout => {
            let ms = CALL_TIMEOUT_SECS * 1000 + 500;
            call(&tenant.stdio, "slow", json!({"ms": ms})).await
        }
        Operation::Crash => call(&tenant.stdio, "crash", json!({})).await,
        Operation::ParkAndApprove => {
            let message = uuid::Uuid::new_v4();
            // `tally` on the HTTP fixture (which the crash operation never stops) counts
            // the call's executions under the message's id.
            let parked = service
                .post(
                    &format!("/api/messages/{message}/tool-calls"),
                    user,
                    json!({"assistantId": "a1", "calls": [
                        {"id": "c0", "name": "mcp__web__tally", "arguments": {"key": message.to_string()}}
                    ]}),
                )
                .await?;
            anyhow::ensure!(
                parked["toolCalls"][0]["status"] == "pending",
                "not parked: {parked}"
            );
            // As a client should: a 503 changed nothing, so the approval is sent again.
            let retry_until = Instant::now() + Duration::from_secs(60);
            loop {
                let approved = service
                    .post(
                        &format!("/api/messages/{message}/tool-confirm"),
                        user,
                        json!({"toolCallId": "c0", "approved": true}),
                    )
                    .await;
                match approved {
                    Ok(_) => break,
                    Err(e)
                        if Instant::now() < retry_until
                            && e.downcast_ref::<Refused>().is_some_and(|r| {
                                r.status == reqwest::StatusCode::SERVICE_UNAVAILABLE
                            }) =>
                    {
                        approvals.retried.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            approvals.approved.lock().expect("approved").push((
                tenant.http.clone(),
                user.to_owned(),
                message,
            ));
            Ok(())
        }
    }
}

/// The approvals the service acknowledged, checked at the end: each ran exactly once.
#[derive(Default)]
struct Approvals {
    /// (the HTTP fixture's server id, user, message)
    approved: Mutex<Vec<(String, String, uuid::Uuid)>>,
    /// Approvals sent again after a 503.
    retried: AtomicUsize,
}

/// The outcome's label: `ok`, the service's error code, or what else went wrong.
fn outcome(result: &Result<()>) -> String {
    match result {
        Ok(()) => "ok".into(),
        Err(error) => match error.downcast_ref::<Refused>() {
            Some(refused) => refused.code(),
            None if error.downcast_ref::<reqwest::Error>().is_some() => "HTTP_CLIENT_ERROR".into(),
            None => error.to_string().chars().take(60).collect(),
        },
    }
}

/// Waits up to 5 s for the service's children to be gone; what is left then, and how long
/// it took (a kill is asynchronous: the actor stops before its child is reaped).
async fn settle(own: &[u32]) -> (Children, Duration) {
    let started = Instant::now();
    loop {
        let children = child_processes("mcp-fixture", own);
        if children.live + children.zombies == 0 || started.elapsed() > Duration::from_secs(5) {
            return (children, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A leftover child's state and what its stdin is, to tell who may still hold it.
fn describe(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let stdin = std::fs::read_link(format!("/proc/{pid}/fd/0"))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|task| {
            let wchan = std::fs::read_to_string(task.path().join("wchan")).unwrap_or_default();
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            format!("{}:{wchan}", comm.trim())
        })
        .collect();
    let state = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.trim())
        .unwrap_or_default();
    let state: String = state.chars().take(12).collect();
    format!("state [{state}] stdin {stdin} threads {threads:?}")
}

async fn live_connections(service: &Service) -> Result<u64> {
    Ok(service.stats().await?["connections"]["total"]
        .as_u64()
        .unwrap_or(0))
}

/// The database fault of `soak --cut-database`: PostgreSQL through a proxy the soak cuts.
pub struct DatabaseCut {
    /// A PostgreSQL server's URL (its admin database): the soak creates its own database.
    pub server: String,
    pub seconds: u64,
}

/// What the cut did: the operations that began during it by outcome, and how long after
/// it the service was ready again.
#[derive(Default)]
struct CutReport {
    during: BTreeMap<(&'static str, String), usize>,
    window: Option<(Instant, Instant)>,
    ready_after: Option<Duration>,
}

/// A fresh database on `server` reached through a [`CutProxy`].
async fn proxied_database(server: &str) -> Result<(String, CutProxy)> {
    use sea_orm::ConnectionTrait;
    let admin = sea_orm::Database::connect(server).await?;
    let name = format!("mcp_pool_soak_{}", uuid::Uuid::new_v4().simple());
    admin
        .execute_unprepared(&format!("CREATE DATABASE \"{name}\""))
        .await?;
    admin.close().await.ok();
    let mut url = reqwest::Url::parse(server)?;
    let host = url.host_str().unwrap_or("127.0.0.1").to_owned();
    let target = tokio::net::lookup_host((host.as_str(), url.port().unwrap_or(5432)))
        .await?
        .next()
        .context("the database server's address")?;
    let proxy = CutProxy::start(target).await?;
    url.set_port(Some(proxy.port))
        .map_err(|()| anyhow::anyhow!("a port"))?;
    url.set_path(&name);
    Ok((url.to_string(), proxy))
}

pub async fn run(
    seconds: u64,
    users: usize,
    workers: usize,
    only: &[String],
    cut: Option<DatabaseCut>,
    as_json: bool,
) -> Result<()> {
    let mix = Arc::new(Operation::mix(only)?);
    let (service, proxy) = match &cut {
        Some(cut) => {
            let (url, proxy) = proxied_database(&cut.server).await?;
            let service = Service::start_with(|s| s.database.url = url.into()).await?;
            (Arc::new(service), Some(proxy))
        }
        None => (Arc::new(Service::start().await?), None),
    };
    let approvals = Arc::new(Approvals::default());
    let cut_report = Arc::new(Mutex::new(CutReport::default()));
    service.add_fixture_preset().await?;
    let (http_child, http_base) = start_fixture_http().await?;
    let own: Vec<u32> = http_child.id().into_iter().collect();
    let mut tenants = Vec::with_capacity(users);
    for n in 0..users {
        let user = format!("soak{n}");
        let stdio = service
            .create_server(
                &user,
                json!({"name": "fx", "preset": "fixture", "timeoutSecs": CALL_TIMEOUT_SECS,
                       "autoApproveTools": ["echo", "slow", "crash"]}),
            )
            .await?;
        let http = service
            .create_server(
                &user,
                json!({"name": "web", "baseUrl": format!("{http_base}/mcp"), "timeoutSecs": CALL_TIMEOUT_SECS}),
            )
            .await?;
        let embedded = service
            .create_server(
                &user,
                json!({"name": "calc", "type": "embedded", "embedded": "calculator"}),
            )
            .await?;
        service.bind(&user, "a1", &[&stdio, &http]).await?;
        tenants.push(Tenant {
            user,
            stdio,
            http,
            embedded,
        });
    }
    let tenants = Arc::new(tenants);
    let rss_before = rss_bytes();
    let tasks_before = live_tasks();

    let outcomes: Arc<Mutex<BTreeMap<(&'static str, String), usize>>> = Arc::default();
    let counter = Arc::new(AtomicUsize::new(0));
    let max_children = Arc::new(AtomicUsize::new(0));
    let stop_at = Instant::now() + Duration::from_secs(seconds);
    let mut handles = Vec::new();
    for _ in 0..workers {
        let (service, tenants, outcomes, counter, mix, approvals, cut_report) = (
            service.clone(),
            tenants.clone(),
            outcomes.clone(),
            counter.clone(),
            mix.clone(),
            approvals.clone(),
            cut_report.clone(),
        );
        handles.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let tenant = &tenants[n % tenants.len()];
                let operation = Operation::nth(n, &mix);
                let began = Instant::now();
                let result = perform(&service, tenant, operation, n, &approvals).await;
                let key = (operation.name(), outcome(&result));
                let mut report = cut_report.lock().expect("cut report");
                if report
                    .window
                    .is_some_and(|(from, to)| began >= from && began < to)
                {
                    *report.during.entry(key.clone()).or_default() += 1;
                }
                drop(report);
                *outcomes.lock().expect("outcomes").entry(key).or_default() += 1;
            }
        }));
    }
    // The cut: a third of the way in, for `cut.seconds`; then how long until /readyz.
    let cutter = match (&cut, proxy) {
        (Some(cut), Some(proxy)) => {
            let (service, cut_report, cut_for) = (
                service.clone(),
                cut_report.clone(),
                Duration::from_secs(cut.seconds),
            );
            Some(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(seconds) / 3).await;
                let from = Instant::now();
                cut_report.lock().expect("cut report").window = Some((from, from + cut_for));
                proxy.cut();
                tokio::time::sleep(cut_for).await;
                proxy.restore();
                let restored = Instant::now();
                while service.get("/readyz", "admin").await.is_err() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                cut_report.lock().expect("cut report").ready_after = Some(restored.elapsed());
                proxy
            }))
        }
        _ => None,
    };
    // Sample the children while the load runs: crashed ones must not pile up.
    let sampler = {
        let max_children = max_children.clone();
        let own = own.clone();
        tokio::spawn(async move {
            while Instant::now() < stop_at {
                let children = child_processes("mcp-fixture", &own);
                max_children.fetch_max(children.live + children.zombies, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    for handle in handles {
        handle.await?;
    }
    sampler.await?;
    let _proxy = match cutter {
        Some(cutter) => Some(cutter.await?),
        None => None,
    };
    let checked = check_approvals(&service, &approvals).await?;
    let operations = counter.load(Ordering::Relaxed);
    let rss_after = rss_bytes();
    let under_load = live_connections(&service).await?;
    let parked_messages = service.stats().await?["confirmations"]["activeMessages"]
        .as_u64()
        .unwrap_or(0);
    let children_after_load = child_processes("mcp-fixture", &own);

    // Close every connection as an operator would; then nothing may remain.
    let connections = service.get("/admin/connections", "admin").await?;
    for connection in connections["connections"].as_array().into_iter().flatten() {
        let (user, server) = (
            connection["userId"].as_str().unwrap_or_default(),
            connection["serverId"].as_str().unwrap_or_default(),
        );
        service
            .send(
                reqwest::Method::DELETE,
                &format!("/admin/connections/{user}/{server}"),
                "admin",
                None,
            )
            .await?;
    }
    let (children_after_close, close_settled) = settle(&own).await;
    let left_after_close: Vec<String> = children_after_close
        .pids
        .iter()
        .map(|pid| format!("pid {pid} {}", describe(*pid)))
        .collect();
    let actors_after_close = live_connections(&service).await?;
    let rss_after_close = rss_bytes();
    let tasks_after_close = live_tasks();
    // Idle keep-alive connections hold a task a side between the workers and the service,
    // and one in the service per pooled connection to the HTTP fixture (a worker's call at
    // a time, so up to one per worker), until their idle timeout.
    let task_slack = 3 * workers + 16;
    // Use every stdio server once more, then stop the service with them live.
    for tenant in tenants.iter() {
        let _ = perform(&service, tenant, Operation::Echo, 0, &approvals).await;
    }
    let live_before_stop = child_processes("mcp-fixture", &own);
    drop(tenants);
    service.stop().await?;
    let (children_after_stop, stop_settled) = settle(&own).await;

    let outcomes = Arc::into_inner(outcomes)
        .map(|m| m.into_inner().unwrap_or_default())
        .unwrap_or_default();
    let leaks = |c: &Children| c.live + c.zombies;
    let leaked = actors_after_close > 0
        || tasks_after_close > tasks_before + task_slack
        || leaks(&children_after_close) > 0
        || leaks(&children_after_stop) > 0;
    if as_json {
        let rows: Vec<Value> = outcomes
            .iter()
            .map(|((operation, outcome), count)| json!({"operation": operation, "outcome": outcome, "count": count}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "seconds": seconds, "users": users, "workers": workers, "operations": operations,
                "operations_per_s": operations as f64 / seconds as f64,
                "outcomes": rows, "rss_before": rss_before, "rss_after": rss_after,
                "max_fixture_children_during_load": max_children.load(Ordering::Relaxed),
                "actors_after_load": under_load, "confirmation_actors_after_load": parked_messages,
                "rss_after_close": rss_after_close,
                "tasks_before": tasks_before, "tasks_after_close": tasks_after_close,
                "children_after_load": {"live": children_after_load.live, "zombies": children_after_load.zombies},
                "actors_after_close": actors_after_close,
                "children_after_close": {"live": children_after_close.live, "zombies": children_after_close.zombies},
                "close_settled_ms": close_settled.as_millis(), "stop_settled_ms": stop_settled.as_millis(),
                "children_live_before_stop": live_before_stop.live,
                "children_after_stop": {"live": children_after_stop.live, "zombies": children_after_stop.zombies},
                "leaked": leaked,
                "approvals": {"acknowledged": checked.acknowledged, "retried_after_503": approvals.retried.load(Ordering::Relaxed),
                              "ran_once": checked.once, "ran_never": checked.never, "ran_more": checked.more, "lost": checked.lost},
                "database_cut": cut.as_ref().map(|cut| {
                    let report = cut_report.lock().expect("cut report");
                    let during: Vec<Value> = report.during.iter()
                        .map(|((operation, outcome), count)| json!({"operation": operation, "outcome": outcome, "count": count}))
                        .collect();
                    json!({"seconds": cut.seconds, "during": during,
                           "ready_after_ms": report.ready_after.map(|d| d.as_millis())})
                }),
            }))?
        );
    } else {
        println!(
            "soak: {seconds}s, {users} users × 3 servers (stdio fixture, HTTP fixture, embedded), \
             {workers} workers: {operations} operations ({:.0}/s)",
            operations as f64 / seconds as f64
        );
        println!("{:<20} {:<28} {:>8}", "operation", "outcome", "count");
        for ((operation, outcome), count) in &outcomes {
            println!("{operation:<20} {outcome:<28} {count:>8}");
        }
        println!(
            "  RSS {:.1} → {:.1} MiB; at most {} fixture children during the load ({users} stdio servers)",
            mib(rss_before),
            mib(rss_after),
            max_children.load(Ordering::Relaxed)
        );
        println!(
            "  after the load: {under_load} actors, {parked_messages} confirmation actors, {} live children, {} zombies",
            children_after_load.live, children_after_load.zombies
        );
        println!(
            "  after closing every connection: {actors_after_close} actors, {} live children, {} zombies ({} ms to settle); RSS {:.1} MiB; \
             {tasks_after_close} tasks ({tasks_before} before the load, up to {task_slack} more are keep-alive connections)",
            children_after_close.live,
            children_after_close.zombies,
            close_settled.as_millis(),
            mib(rss_after_close)
        );
        println!(
            "  after stopping the service ({} children live before): {} live children, {} zombies ({} ms to settle)",
            live_before_stop.live,
            children_after_stop.live,
            children_after_stop.zombies,
            stop_settled.as_millis()
        );
        println!(
            "  {}",
            if leaked {
                "LEAK: see above"
            } else {
                "no leaks"
            }
        );
        for left in &left_after_close {
            println!("  left after closing: {left}");
        }
        println!(
            "  approvals acknowledged: {} ({} sent again after a 503): ran once {}, never {}, more than once {}; lost (acknowledged, then not found or never settled) {}",
            checked.acknowledged,
            approvals.retried.load(Ordering::Relaxed),
            checked.once,
            checked.never,
            checked.more,
            checked.lost
        );
        if let Some(cut) = &cut {
            let report = cut_report.lock().expect("cut report");
            println!(
                "  database cut for {} s; ready again {} ms after it; operations begun during the cut:",
                cut.seconds,
                report.ready_after.map_or(-1, |d| d.as_millis() as i64)
            );
            for ((operation, outcome), count) in &report.during {
                println!("    {operation:<20} {outcome:<28} {count:>8}");
            }
        }
    }
    anyhow::ensure!(
        checked.never + checked.more + checked.lost == 0,
        "an acknowledged approval did not run exactly once, or was lost"
    );
    anyhow::ensure!(!leaked, "the soak left actors or processes behind");
    Ok(())
}

struct ApprovalCheck {
    acknowledged: usize,
    once: usize,
    never: usize,
    more: usize,
    lost: usize,
}

/// Every acknowledged approval: its message is there, its call settled, and the fixture
/// counted exactly one execution of it.
async fn check_approvals(service: &Service, approvals: &Approvals) -> Result<ApprovalCheck> {
    let approved = std::mem::take(&mut *approvals.approved.lock().expect("approved"));
    let mut check = ApprovalCheck {
        acknowledged: approved.len(),
        once: 0,
        never: 0,
        more: 0,
        lost: 0,
    };
    for (server, user, message) in approved {
        let settle_by = Instant::now() + Duration::from_secs(30);
        let settled = loop {
            match service
                .get(&format!("/api/messages/{message}"), &user)
                .await
            {
                Ok(m)
                    if !matches!(
                        m["toolCalls"][0]["status"].as_str(),
                        Some("pending" | "invoking")
                    ) =>
                {
                    break true;
                }
                _ if Instant::now() > settle_by => break false,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        if !settled {
            check.lost += 1;
            continue;
        }
        let peek = service
            .post(
                &format!("/api/mcp-servers/{server}/tools/tally/call"),
                &user,
                json!({"arguments": {"key": message.to_string(), "peek": true}}),
            )
            .await?;
        match peek["content"][0]["text"].as_str() {
            Some("1") => check.once += 1,
            Some("0") => check.never += 1,
            _ => check.more += 1,
        }
    }
    Ok(check)
}
