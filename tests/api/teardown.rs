//! A service whose runtime ends lets go of its database connections. An embedder that
//! builds and drops services (and this suite, one service per test on one PostgreSQL)
//! would otherwise run the database out of connections: what is left holding them is a
//! reference cycle among the services, which outlives the tasks.

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{TestApp, spawn_pool_app};
use crate::upstreams::{HttpUpstream, eventually, fixture_preset};

/// Database handles the test process holds for `app`'s database: PostgreSQL backends of
/// its own database, or open files of its SQLite database.
async fn database_handles(database_url: &str, data_dir: &std::path::Path) -> usize {
    if database_url.starts_with("postgres") {
        let (server, name) = database_url.rsplit_once('/').unwrap();
        let admin = sea_orm::Database::connect(format!("{server}/postgres"))
            .await
            .unwrap();
        use sea_orm::{ConnectionTrait, Statement};
        let row = admin
            .query_one_raw(Statement::from_string(
                admin.get_database_backend(),
                format!("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = '{name}'"),
            ))
            .await
            .unwrap()
            .unwrap();
        let n: i64 = row.try_get("", "n").unwrap();
        admin.close().await.ok();
        n as usize
    } else {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target.starts_with(data_dir))
            .count()
    }
}

/// Runs `work` on a runtime of its own, as a process or an embedder would, and ends that
/// runtime without the service's graceful stop.
fn on_own_runtime<F, Fut>(work: F) -> (String, tempfile::TempDir)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = TestApp>,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (url, data) = runtime.block_on(async move {
            let app = work().await;
            let url = mcp_pool::store::database_url(&app.settings);
            // The data directory outlives the app so its files can be looked for.
            let data = app.into_data_dir();
            (url, data)
        });
        drop(runtime);
        (url, data)
    })
    .join()
    .unwrap()
}

#[tokio::test]
async fn a_service_whose_runtime_ended_holds_no_database_connection() {
    let upstream = HttpUpstream::fixture(None).await;
    let base = upstream.base.clone();
    let (url, data) = on_own_runtime(move || async move {
        let app = spawn_pool_app().await;
        app.create_preset_ok(fixture_preset()).await;
        // Live connections over each kind of transport, left open.
        let remote = json!({"name": "remote", "baseUrl": format!("{base}/mcp")});
        let local = json!({"name": "local", "preset": "fixture"});
        for server in [remote, local] {
            let server = app.create_server_ok("u", server).await;
            let reply = app.call("u", &server, "echo", json!({"text": "a"})).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        }
        let url = mcp_pool::store::database_url(&app.settings);
        assert!(database_handles(&url, &app.settings.storage.data_dir).await > 0);
        app
    });
    eventually(
        "the dropped service's database connections are closed",
        || {
            let (url, dir) = (url.clone(), data.path().to_path_buf());
            async move { database_handles(&url, &dir).await == 0 }
        },
    )
    .await;
}
