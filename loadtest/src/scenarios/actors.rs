//! `actors`: N users × M servers brought up as connected (user, server) actors on one
//! streamable-HTTP fixture and held; RSS before and after, bytes per actor, time to
//! connect them all; then idle reaping (a short idle timeout) and RSS after it. Several
//! rounds tell allocator retention (RSS levels off) from a leak (RSS grows every round).
//! With `--tls` the fixture serves HTTPS with HTTP/2: sessions share connections in groups
//! (`pool.sessions_per_http_client`), so descriptors no longer bound the actors held.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::harness::{
    Service, live_tasks, mib, open_fds, rss_bytes, start_fixture_http, start_fixture_https,
};

/// Connect requests in flight at once.
const CONNECTORS: usize = 32;

/// Connects every (user, server), `CONNECTORS` at a time; how long it took.
async fn connect_all(
    service: &Arc<Service>,
    servers: &Arc<Vec<(String, String)>>,
) -> Result<Duration> {
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..CONNECTORS {
        let (service, servers) = (service.clone(), servers.clone());
        workers.push(tokio::spawn(async move {
            for (user, id) in servers.iter().skip(worker).step_by(CONNECTORS) {
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
    Ok(started.elapsed())
}

/// Waits until the idle reaper stopped every actor; how long that took.
async fn wait_reaped(service: &Service, idle_secs: u64) -> Result<Duration> {
    let started = Instant::now();
    let deadline = Duration::from_secs(idle_secs * 2 + 60);
    loop {
        let live = service.stats().await?["connections"]["total"]
            .as_u64()
            .unwrap_or(0);
        if live == 0 {
            return Ok(started.elapsed());
        }
        if started.elapsed() > deadline {
            bail!("{live} actors still live {deadline:?} after the last use");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

struct Round {
    connect_time: Duration,
    connected: u64,
    rss_connected: u64,
    fds_connected: usize,
    reaped_after: Duration,
    rss_reaped: u64,
    fds_reaped: usize,
    tasks_reaped: usize,
}

pub async fn run(
    users: usize,
    servers_per_user: usize,
    idle_secs: u64,
    rounds: usize,
    tls: bool,
    as_json: bool,
) -> Result<()> {
    let count = users * servers_per_user;
    let certificates = tempfile::tempdir()?;
    let (_http_child, http_base, ca_file) = if tls {
        let (child, base, ca_file) = start_fixture_https(certificates.path()).await?;
        (child, base, Some(ca_file))
    } else {
        let (child, base) = start_fixture_http().await?;
        (child, base, None)
    };
    let service = Arc::new(
        Service::start_with(|settings| {
            settings.pool.idle_timeout_secs = idle_secs;
            if let Some(ca_file) = &ca_file {
                settings.security.extra_ca_file = ca_file.display().to_string();
            }
        })
        .await?,
    );
    let mut servers = Vec::with_capacity(count);
    for user in 0..users {
        let user = format!("user{user}");
        for n in 0..servers_per_user {
            let id = service
                .create_server(
                    &user,
                    json!({"name": format!("fx{n}"), "baseUrl": format!("{http_base}/mcp")}),
                )
                .await?;
            servers.push((user.clone(), id));
        }
    }
    let servers = Arc::new(servers);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_bytes();
    let (fds_before, tasks_before) = (open_fds(), live_tasks());
    let mut results = Vec::new();
    for _ in 0..rounds.max(1) {
        let connect_time = connect_all(&service, &servers).await?;
        let connected = service.stats().await?["connections"]["connected"]
            .as_u64()
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (rss_connected, fds_connected) = (rss_bytes(), open_fds());
        // Nothing is used from here on until every actor is reaped.
        let reaped_after = wait_reaped(&service, idle_secs).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        results.push(Round {
            connect_time,
            connected,
            rss_connected,
            fds_connected,
            reaped_after,
            rss_reaped: rss_bytes(),
            fds_reaped: open_fds(),
            tasks_reaped: live_tasks(),
        });
    }
    service.stop().await?;

    let first = &results[0];
    let per_actor = first.rss_connected.saturating_sub(before) as f64 / count as f64;
    let last = results.last().expect("one round at least");
    // Growth from the second round on: the first one also warms the allocator's arenas.
    let later_growth = results
        .get(1)
        .map(|second| last.rss_connected as i64 - second.rss_connected as i64);
    let verdict = match later_growth {
        None => "one round: run more to tell retention from a leak",
        Some(growth)
            if growth.unsigned_abs() <= first.rss_connected.saturating_sub(before) / 20 =>
        {
            "levels off: freed memory is reused"
        }
        Some(_) => "keeps growing: a leak",
    };
    if as_json {
        let rounds: Vec<Value> = results
            .iter()
            .map(|r| {
                json!({"connect_all_ms": r.connect_time.as_millis(),
                       "connects_per_s": count as f64 / r.connect_time.as_secs_f64(),
                       "connected": r.connected, "rss_connected": r.rss_connected,
                       "fds_connected": r.fds_connected,
                       "all_reaped_after_ms": r.reaped_after.as_millis(),
                       "rss_reaped": r.rss_reaped, "fds_reaped": r.fds_reaped,
                       "tasks_reaped": r.tasks_reaped})
            })
            .collect();
        println!(
            "{}",
            json!({"users": users, "servers_per_user": servers_per_user, "actors": count,
                   "upstream": http_base,
                   "idle_timeout_s": idle_secs, "rss_before": before,
                   "fds_before": fds_before, "tasks_before": tasks_before,
                   "bytes_per_actor": per_actor, "rounds": rounds, "verdict": verdict})
        );
        return Ok(());
    }
    println!(
        "actors: {users} users × {servers_per_user} servers = {count} (user, server) actors \
         on one streamable-HTTP upstream ({http_base}); idle timeout {idle_secs}s; before: \
         RSS {:.1} MiB, {fds_before} fds, {tasks_before} tasks",
        mib(before)
    );
    println!(
        "  {:>5} {:>9} {:>12} {:>11} {:>13} {:>7} {:>10} {:>12} {:>6} {:>6}",
        "round",
        "connected",
        "connect all",
        "connects/s",
        "RSS connected",
        "fds",
        "reaped in",
        "RSS reaped",
        "fds",
        "tasks"
    );
    for (n, r) in results.iter().enumerate() {
        println!(
            "  {:>5} {:>9} {:>11.2}s {:>11.0} {:>9.1} MiB {:>7} {:>9.1}s {:>8.1} MiB {:>6} {:>6}",
            n + 1,
            r.connected,
            r.connect_time.as_secs_f64(),
            count as f64 / r.connect_time.as_secs_f64(),
            mib(r.rss_connected),
            r.fds_connected,
            r.reaped_after.as_secs_f64(),
            mib(r.rss_reaped),
            r.fds_reaped,
            r.tasks_reaped
        );
    }
    println!(
        "  first round: {:.1} KiB per connected idle actor; RSS across rounds {verdict}",
        per_actor / 1024.0
    );
    Ok(())
}
