//! `cluster`: two instances on one PostgreSQL database. Calls parked on one instance are
//! approved through it (local) and through the other (forwarded over LISTEN/NOTIFY), so
//! the cost of an approval reaching the wrong instance shows beside the normal one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::json;

use crate::harness::{Service, Summary, summarize};

/// Both instances must read what the other sealed.
const SHARED_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

pub async fn run(database_url: String, approve: usize, as_json: bool) -> Result<()> {
    if !database_url.starts_with("postgres") {
        bail!("--database-url must name a PostgreSQL database (instances talk through it)");
    }
    let on_database = |settings: &mut mcp_pool::Settings| {
        settings.database.url = database_url.clone().into();
        settings.security.encryption_key = SHARED_KEY.to_owned().into();
    };
    let owner = Arc::new(Service::start_with(on_database).await?);
    let other = Arc::new(Service::start_with(on_database).await?);
    let user = format!("bench-{}", uuid::Uuid::new_v4().simple());
    // A database used before already has the preset.
    let _ = owner.add_fixture_preset().await;
    let server = owner
        .create_server(&user, json!({"name": "fx", "preset": "fixture"}))
        .await?;
    owner.bind(&user, "a1", &[&server]).await?;
    owner
        .post(
            &format!("/api/mcp-servers/{server}/connect"),
            &user,
            json!({}),
        )
        .await?;
    // Both instances have heard of each other (the first heartbeat after the second joined).
    tokio::time::sleep(Duration::from_secs(1)).await;

    let local = approvals(&owner, &owner, &user, approve).await?;
    let forwarded = approvals(&owner, &other, &user, approve).await?;
    if as_json {
        println!(
            "{}",
            json!({"local": local.to_json(), "forwarded": forwarded.to_json()})
        );
    } else {
        println!("cluster: calls parked on instance A, approved one at a time");
        for (label, summary) in [
            ("through A (local)", &local),
            ("through B (forwarded)", &forwarded),
        ] {
            println!(
                "  {label:<22} p50 {:.0}us p90 {:.0}us p99 {:.0}us over {}",
                summary.p50, summary.p90, summary.p99, summary.calls
            );
        }
    }
    other.stop().await?;
    owner.stop().await
}

/// Parks `count` calls on `owner` (one message each), then approves each through
/// `approver`, timing the approval's HTTP round trip.
async fn approvals(
    owner: &Service,
    approver: &Service,
    user: &str,
    count: usize,
) -> Result<Summary> {
    let mut messages = Vec::with_capacity(count);
    for _ in 0..count {
        let message = uuid::Uuid::new_v4().to_string();
        owner
            .post(
                &format!("/api/messages/{message}/tool-calls"),
                user,
                json!({"assistantId": "a1", "calls": [
                    {"id": "c1", "name": "mcp__fx__echo", "arguments": {"text": "x"}}]}),
            )
            .await?;
        messages.push(message);
    }
    let mut latencies = Vec::with_capacity(count);
    let started = Instant::now();
    for message in &messages {
        let begun = Instant::now();
        approver
            .post(
                &format!("/api/messages/{message}/tool-confirm"),
                user,
                json!({"toolCallId": "c1", "approved": true}),
            )
            .await?;
        latencies.push(begun.elapsed());
    }
    Ok(summarize(latencies, started.elapsed()))
}
