//! `confirmations`: N parked tool calls (RSS per call), then approvals at each concurrency
//! level: the HTTP round trip of each approval, and approve → the call's arrival at the
//! upstream. The parked calls are the fixture's `clock` tool, which answers the monotonic
//! clock (shared by every process) when the call reached it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::harness::{Service, Summary, mib, rss_bytes, summarize};

/// CLOCK_MONOTONIC in ns, as the fixture's `clock` tool reads it.
fn monotonic_ns() -> i128 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is readable");
    now.tv_sec() as i128 * 1_000_000_000 + now.tv_nsec() as i128
}

/// The first string in a stored tool response that reads as a number: the clock reading.
fn arrival_ns(response: &Value) -> Option<i128> {
    match response {
        Value::String(text) => text.trim().parse().ok(),
        Value::Array(items) => items.iter().find_map(arrival_ns),
        Value::Object(fields) => fields.values().find_map(arrival_ns),
        _ => None,
    }
}

/// One level's figures: approval round trips and approve → upstream arrival.
struct Level {
    concurrency: usize,
    round_trip: Summary,
    to_upstream: Summary,
}

/// Approves calls `first..first + count` with `concurrency` approvers, call `n` being call
/// `c{n / messages}` of message `n % messages` (every message holds enough calls); each
/// approval's round trip, and the time from sending it to its call reaching the upstream.
async fn approve_level(
    service: &Arc<Service>,
    user: &str,
    messages: &Arc<Vec<String>>,
    first: usize,
    count: usize,
    concurrency: usize,
) -> Result<Level> {
    let approvers = concurrency.max(1);
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..approvers {
        let (service, messages, user) = (service.clone(), messages.clone(), user.to_owned());
        workers.push(tokio::spawn(async move {
            let mut timed = Vec::new();
            for n in (first + worker..first + count).step_by(approvers) {
                let message = &messages[n % messages.len()];
                let call = format!("c{}", n / messages.len());
                let sent = monotonic_ns();
                let begun = Instant::now();
                service
                    .post(
                        &format!("/api/messages/{message}/tool-confirm"),
                        &user,
                        json!({"toolCallId": call, "approved": true}),
                    )
                    .await?;
                timed.push((n, sent, begun.elapsed()));
            }
            Ok::<_, anyhow::Error>(timed)
        }));
    }
    let mut timed = Vec::with_capacity(count);
    for worker in workers {
        timed.extend(worker.await??);
    }
    let wall = started.elapsed();
    // Read back where each approved call arrived, once every one has run.
    let mut to_upstream = Vec::with_capacity(count);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut stored: std::collections::HashMap<String, Value> = Default::default();
    for &(n, sent, _) in &timed {
        let message = &messages[n % messages.len()];
        let call = format!("c{}", n / messages.len());
        let arrived = loop {
            if !stored.contains_key(message) {
                let fetched = service
                    .get(&format!("/api/messages/{message}"), user)
                    .await?;
                stored.insert(message.clone(), fetched);
            }
            let record = stored[message]["toolCalls"]
                .as_array()
                .and_then(|calls| calls.iter().find(|c| c["id"] == call.as_str()))
                .cloned()
                .unwrap_or(Value::Null);
            if let Some(arrived) = arrival_ns(&record["response"]) {
                break arrived;
            }
            if Instant::now() > deadline {
                bail!("call {call} of {message} has not run: {record}");
            }
            stored.remove(message);
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        to_upstream.push(Duration::from_nanos((arrived - sent).max(0) as u64));
    }
    Ok(Level {
        concurrency,
        round_trip: summarize(timed.into_iter().map(|(_, _, took)| took).collect(), wall),
        to_upstream: summarize(to_upstream, wall),
    })
}

pub async fn run(
    parked: usize,
    approve: usize,
    per_message: usize,
    concurrency: &[usize],
    database_url: Option<String>,
    as_json: bool,
) -> Result<()> {
    // Approvals go to messages holding `per_message` calls each (the last may hold fewer).
    let per_message = per_message.clamp(1, 64).min(parked.max(1));
    let full_messages = parked / per_message;
    if approve * concurrency.len() > full_messages * per_message {
        bail!(
            "--parked must be at least --approve × the number of concurrency levels, in whole messages of --per-message calls"
        );
    }
    let service = Arc::new(
        Service::start_with(|settings| {
            if let Some(url) = &database_url {
                settings.database.url = url.clone().into();
            }
        })
        .await?,
    );
    let preset = service
        .add_fixture_preset_with("clock", &["--clock-tool"])
        .await;
    // A database given by URL may hold the preset from an earlier run.
    if database_url.is_none() {
        preset?;
    }
    // A user of its own, so an earlier run's servers and messages are not in the way.
    let user = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let user = user.as_str();
    let server = service
        .create_server(user, json!({"name": "fx", "preset": "clock"}))
        .await?;
    service.bind(user, "a1", &[&server]).await?;
    // Warm the connection and tool list so parking measures parking.
    service
        .post(
            &format!("/api/mcp-servers/{server}/connect"),
            user,
            json!({}),
        )
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_bytes();
    let started = Instant::now();
    let messages: Vec<String> = (0..parked.div_ceil(per_message))
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let messages = Arc::new(messages);
    let mut workers = Vec::new();
    for worker in 0..16 {
        let (service, messages, user) = (service.clone(), messages.clone(), user.to_owned());
        workers.push(tokio::spawn(async move {
            for (index, message) in messages.iter().enumerate().skip(worker).step_by(16) {
                let count = per_message.min(parked - index * per_message);
                let calls: Vec<Value> = (0..count)
                    .map(|i| json!({"id": format!("c{i}"), "name": "mcp__fx__clock", "arguments": {}}))
                    .collect();
                service
                    .post(
                        &format!("/api/messages/{message}/tool-calls"),
                        &user,
                        json!({"assistantId": "a1", "calls": calls}),
                    )
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
    let full = Arc::new(messages[..full_messages].to_vec());
    let mut levels = Vec::new();
    for (index, &level) in concurrency.iter().enumerate() {
        levels.push(approve_level(&service, user, &full, index * approve, approve, level).await?);
    }
    let per_call = after.saturating_sub(before) as f64 / parked as f64;
    if as_json {
        let levels: Vec<Value> = levels
            .iter()
            .map(|l| json!({"concurrency": l.concurrency, "approve": l.round_trip.to_json(), "approve_to_upstream": l.to_upstream.to_json()}))
            .collect();
        println!(
            "{}",
            json!({"parked": parked, "park_ms": park_time.as_millis(), "rss_before": before, "rss_after": after,
                   "bytes_per_parked_call": per_call, "levels": levels})
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
            mib(before),
            mib(after),
            per_call
        );
        for level in &levels {
            let (trip, upstream) = (&level.round_trip, &level.to_upstream);
            println!(
                "  {} approvers, {} approvals ({:.0}/s): HTTP round trip p50 {:.0}us p90 {:.0}us p99 {:.0}us; approve sent -> call at the upstream p50 {:.0}us p90 {:.0}us p99 {:.0}us",
                level.concurrency,
                trip.calls,
                trip.throughput,
                trip.p50,
                trip.p90,
                trip.p99,
                upstream.p50,
                upstream.p90,
                upstream.p99
            );
        }
    }
    drop(messages);
    service.stop().await
}
