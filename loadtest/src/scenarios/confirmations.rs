//! `confirmations`: N parked tool calls (RSS per call), then approvals timed one by one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Value, json};

use crate::harness::{Service, mib, rss_bytes, summarize};

pub async fn run(parked: usize, approve: usize, per_message: usize, as_json: bool) -> Result<()> {
    let service = Arc::new(Service::start().await?);
    service.add_fixture_preset().await?;
    let server = service
        .create_server("bench", json!({"name": "fx", "preset": "fixture"}))
        .await?;
    service.bind("bench", "a1", &[&server]).await?;
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
                    .post(
                        &format!("/api/messages/{message}/tool-calls"),
                        "bench",
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
                   "bytes_per_parked_call": per_call, "approve": approvals.to_json()})
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
        println!(
            "  approve (HTTP round trip: stored as invoking, execution started): p50 {:.0}us p90 {:.0}us p99 {:.0}us over {}",
            approvals.p50, approvals.p90, approvals.p99, approvals.calls
        );
    }
    drop(messages);
    service.stop().await
}
