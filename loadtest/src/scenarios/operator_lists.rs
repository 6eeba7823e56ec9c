//! The operators' lists at the sizes the console is built for (issue 40): N users with a
//! server each (made through the REST API) and M audit rows (written through the store's
//! batch insert, as the audit journal's flusher writes them), then the latency of each
//! list and filter the console asks for, on SQLite or PostgreSQL.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::harness::{Service, Summary, summarize};
use mcp_pool::store::{AuditEntry, AuditOutcome, Store};

/// Rows per batch insert while seeding.
const SEED_BATCH: usize = 1000;

pub async fn run(
    users: usize,
    audit_rows: usize,
    samples: usize,
    database: Option<String>,
    json_out: bool,
) -> Result<()> {
    let database_url = match &database {
        Some(server) => Some(fresh_database(server).await?),
        None => None,
    };
    let url = database_url.clone();
    let service = Arc::new(
        Service::start_with(move |settings| {
            if let Some(url) = url {
                settings.database.url = url.into();
            }
            settings.limits.max_servers_per_user = 10;
        })
        .await?,
    );
    let backend = if database.is_some() {
        "postgres"
    } else {
        "sqlite"
    };

    let started = Instant::now();
    seed_users(&service, users).await?;
    let users_seeded = started.elapsed();
    let started = Instant::now();
    let store = open_store(&service, database_url.as_deref()).await?;
    seed_audit(&store, audit_rows, users).await?;
    let audit_seeded = started.elapsed();
    if let Some(url) = &database_url {
        // What autovacuum does within a minute of the seeding: without statistics the
        // planner guesses 200 users and hashes all of them instead of walking an index.
        settle_statistics(url).await?;
    }

    let probe = users / 2;
    let queries: Vec<(&str, String)> = vec![
        ("users: first page", "/admin/users?pageSize=50".into()),
        (
            "users: search part of an id",
            format!("/admin/users?search=user-{probe:06}"),
        ),
        (
            "users: a deep page",
            format!("/admin/users?pageSize=50&page={}", users / 50 / 2),
        ),
        ("servers: first page", "/admin/servers?pageSize=50".into()),
        (
            "servers: search a user's",
            format!("/admin/servers?search=user-{probe:06}"),
        ),
        ("approvals: first page", "/admin/approvals".into()),
        (
            "audit: first page, no filter",
            "/admin/audit?pageSize=50".into(),
        ),
        (
            "audit: one user",
            format!("/admin/audit?userId=user-{probe:06}"),
        ),
        ("audit: server name", "/admin/audit?server=srv-7".into()),
        (
            "audit: tool and outcome",
            "/admin/audit?tool=t3&outcome=error".into(),
        ),
        (
            "audit: page 100",
            "/admin/audit?pageSize=50&page=100".into(),
        ),
        (
            "audit: one row",
            "/admin/audit/00000000-0000-0000-0000-000000000000".into(),
        ),
    ];
    let mut results = Vec::new();
    for (name, path) in queries {
        let summary = time_get(&service, &path, samples).await?;
        results.push((name, path, summary));
    }

    if json_out {
        let rows: Vec<Value> = results
            .iter()
            .map(|(name, path, s)| json!({"query": name, "path": path, "latency": s.to_json()}))
            .collect();
        println!(
            "{}",
            json!({"backend": backend, "users": users, "audit_rows": audit_rows,
                   "seed_users_s": users_seeded.as_secs_f64(),
                   "seed_audit_s": audit_seeded.as_secs_f64(), "queries": rows})
        );
    } else {
        println!(
            "operator lists on {backend}: {users} users (seeded in {:.1} s through the API), {audit_rows} audit rows (seeded in {:.1} s), {samples} requests each, one at a time",
            users_seeded.as_secs_f64(),
            audit_seeded.as_secs_f64()
        );
        println!("{:<34} {:>10} {:>10}", "query", "p50 ms", "p99 ms");
        for (name, _, s) in &results {
            println!("{name:<34} {:>10.2} {:>10.2}", s.p50 / 1e3, s.p99 / 1e3);
        }
    }
    store.close().await;
    service.stop().await?;
    if let (Some(server), Some(url)) = (&database, &database_url) {
        drop_database(server, url).await?;
    }
    Ok(())
}

/// `VACUUM ANALYZE` of the seeded PostgreSQL database.
async fn settle_statistics(url: &str) -> Result<()> {
    use sea_orm::ConnectionTrait;
    let db = sea_orm::Database::connect(url).await?;
    db.execute_unprepared("VACUUM ANALYZE").await?;
    db.close().await.ok();
    Ok(())
}

/// Drops the database [`fresh_database`] made (a million rows are not left behind).
async fn drop_database(server: &str, url: &str) -> Result<()> {
    use sea_orm::ConnectionTrait;
    let name = reqwest::Url::parse(url)?
        .path()
        .trim_start_matches('/')
        .to_owned();
    let admin = sea_orm::Database::connect(server).await?;
    admin
        .execute_unprepared(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await?;
    admin.close().await.ok();
    Ok(())
}

/// `users` users with one embedded server each, made through the REST API 32 at a time.
async fn seed_users(service: &Arc<Service>, users: usize) -> Result<()> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..32 {
        let (service, next) = (service.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= users {
                    return Ok::<_, anyhow::Error>(());
                }
                service
                    .post(
                        "/api/mcp-servers",
                        &format!("user-{i:06}"),
                        json!({"name": format!("srv-{}", i % 10), "type": "embedded", "embedded": "clock"}),
                    )
                    .await?;
            }
        }));
    }
    for worker in workers {
        worker.await??;
    }
    Ok(())
}

/// The service's database, opened a second time by this process.
async fn open_store(service: &Service, database_url: Option<&str>) -> Result<Store> {
    let mut settings = mcp_pool::config::Settings::defaults();
    settings.storage.data_dir = service.data_dir().to_path_buf();
    if let Some(url) = database_url {
        settings.database.url = url.to_owned().into();
    }
    // The rows written here hold no secret: any key will do.
    let cipher = Arc::new(mcp_pool::security::Cipher::from_key(&[7; 32])?);
    Ok(Store::connect(&settings, cipher).await?)
}

/// `rows` audit rows spread over the users, ten server names, ten tools and two
/// outcomes, one second apart going back from now.
async fn seed_audit(store: &Store, rows: usize, users: usize) -> Result<()> {
    let now = chrono::Utc::now();
    let mut batch = Vec::with_capacity(SEED_BATCH);
    for i in 0..rows {
        let user = mcp_pool::domain::UserId::parse(&format!("user-{:06}", i % users.max(1)))?;
        let outcome = if i % 7 == 0 {
            AuditOutcome::Settled(mcp_pool::domain::ToolCallStatus::Error)
        } else {
            AuditOutcome::Settled(mcp_pool::domain::ToolCallStatus::Done)
        };
        let mut entry = AuditEntry::new(
            &user,
            outcome,
            &format!("srv-{}", i % 10),
            &format!("t{}", i % 10),
        );
        entry.created_at = now - chrono::Duration::seconds(i as i64);
        entry.via = Some("rest".into());
        entry.latency_ms = Some((i % 50) as i64);
        entry.arguments = Some(format!("{{\"n\":{i}}}"));
        batch.push(entry);
        if batch.len() == SEED_BATCH {
            store.audit().record_many(&batch).await?;
            batch.clear();
        }
    }
    store.audit().record_many(&batch).await?;
    Ok(())
}

/// `samples` GETs of `path`, one at a time (a 404 counts: it is an answer).
async fn time_get(service: &Service, path: &str, samples: usize) -> Result<Summary> {
    let request = || {
        service
            .client
            .get(format!("{}{path}", service.base))
            .bearer_auth(service.key())
            .send()
    };
    request().await?.bytes().await?;
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(samples);
    for _ in 0..samples {
        let begun = Instant::now();
        let response = request().await?;
        let status = response.status();
        response.bytes().await?;
        anyhow::ensure!(
            status.is_success() || status == reqwest::StatusCode::NOT_FOUND,
            "{path}: {status}"
        );
        latencies.push(begun.elapsed());
    }
    Ok(summarize(latencies, started.elapsed()))
}

/// A new database on the PostgreSQL server at `server` (its admin database's URL).
async fn fresh_database(server: &str) -> Result<String> {
    use sea_orm::ConnectionTrait;
    let admin = sea_orm::Database::connect(server).await?;
    let name = format!("mcp_pool_lists_{}", uuid::Uuid::new_v4().simple());
    admin
        .execute_unprepared(&format!("CREATE DATABASE \"{name}\""))
        .await?;
    admin.close().await.ok();
    let mut url = reqwest::Url::parse(server).context("the database server's URL")?;
    url.set_path(&name);
    Ok(url.to_string())
}
