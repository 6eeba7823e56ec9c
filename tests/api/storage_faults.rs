//! Storage faults seen from outside: a full disk under the embedded SQLite default, and
//! a PostgreSQL that goes away (a proxy on loopback the test cuts). What the service
//! acknowledges is stored; what it cannot store it refuses at once with 503
//! `DATABASE_UNAVAILABLE` and `Retry-After`; it recovers by itself.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;
use uuid::Uuid;

use crate::helpers::{Reply, TestApp, as_user, spawn_pool_app_with};
use crate::upstreams::eventually;

/// A small tmpfs the test mounts (it needs root, as CI runs) and unmounts when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// `None` when this process may not mount (not root): the test then says it skipped.
    fn mount(megabytes: u32) -> Option<Self> {
        let dir = tempfile::tempdir().expect("a mount point");
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            assert!(
                !is_root(),
                "running as root, yet a tmpfs could not be mounted for the full-disk test"
            );
            eprintln!("skipped: mounting a small disk needs root");
            return None;
        }
        Some(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a filler file until the disk refuses more; returns its path.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler).expect("a filler file");
        let chunk = vec![0xA5u8; 16 * 1024];
        while file
            .write_all(&chunk)
            .and_then(|()| file.sync_all())
            .is_ok()
        {}
        // The last bytes, below one chunk.
        while file
            .write_all(&[0xA5])
            .and_then(|()| file.sync_all())
            .is_ok()
        {}
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    })
}

/// What a refusal must look like: 503, the stable code, a `Retry-After`.
fn assert_refused_as_unavailable(reply: &Reply, what: &str) {
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{what}: a write the database could not take is 503, not {}: {}",
        reply.status,
        reply.text
    );
    assert_eq!(
        reply.code(),
        "DATABASE_UNAVAILABLE",
        "{what}: {}",
        reply.text
    );
    assert!(
        reply.headers.contains_key("retry-after"),
        "{what}: 503 says when to retry"
    );
}

/// Whether a write on a full disk was acknowledged with `ok`; if not, it must have been
/// refused as unavailable.
fn acknowledged(reply: &Reply, ok: StatusCode, what: &str) -> bool {
    if reply.status == ok {
        return true;
    }
    assert_refused_as_unavailable(reply, what);
    false
}

/// Parks one call of `add` (not auto-approved) with `padding` bytes of arguments.
async fn park(app: &TestApp, message: &str, padding: usize) -> Reply {
    app.submit_calls(
        "u",
        message,
        "",
        json!([{"id": "c1", "name": "mcp__fx__add",
                "arguments": {"a": 1, "b": 2, "note": "x".repeat(padding)}}]),
    )
    .await
}

/// Everything acknowledged while the disk was full, checked against the service.
struct Acknowledged {
    messages: Vec<String>,
    servers: Vec<String>,
    keys: Vec<String>,
}

impl Acknowledged {
    async fn all_there(&self, app: &TestApp, when: &str) {
        for message in &self.messages {
            let reply = app
                .user("u", Method::GET, &format!("/api/messages/{message}"), None)
                .await;
            assert_eq!(
                reply.status,
                StatusCode::OK,
                "{when}: message {message} was acknowledged: {}",
                reply.text
            );
            assert_eq!(reply.body["toolCalls"][0]["id"], "c1", "{when}");
        }
        let listed = app.user("u", Method::GET, "/api/mcp-servers", None).await;
        assert_eq!(listed.status, StatusCode::OK, "{when}: {}", listed.text);
        let ids: Vec<&str> = listed.body["servers"]
            .as_array()
            .expect("a server list")
            .iter()
            .filter_map(|s| s["id"].as_str())
            .collect();
        for server in &self.servers {
            assert!(
                ids.contains(&server.as_str()),
                "{when}: server {server} was acknowledged (201) but is not listed: {ids:?}"
            );
        }
        for key in &self.keys {
            let reply = app
                .send(Method::GET, "/api/mcp-servers", Some(key), Some("u"), None)
                .await;
            assert_eq!(
                reply.status,
                StatusCode::OK,
                "{when}: a key acknowledged (201) authenticates: {}",
                reply.text
            );
        }
    }
}

/// The embedded default on a disk that fills up: every write is either acknowledged and
/// kept (through the fault, after space returns, after a restart) or refused with 503;
/// once space is back, writes succeed again without a restart.
#[tokio::test]
async fn a_full_disk_refuses_writes_and_loses_nothing_it_acknowledged() {
    let Some(disk) = SmallDisk::mount(6) else {
        return;
    };
    let data_dir = disk.path().to_path_buf();
    let app = spawn_pool_app_with(move |settings| {
        settings.database.url = String::new().into();
        settings.storage.data_dir = data_dir;
    })
    .await;
    app.fixture_for_a1(&[]).await;
    let warm = Uuid::new_v4().to_string();
    assert_eq!(park(&app, &warm, 10).await.status, StatusCode::ACCEPTED);

    let filler = disk.fill();
    // Before any write has failed: a heartbeat may still fit in the log's pages, but
    // nothing larger does.
    let ready = app.send(Method::GET, "/readyz", None, None, None).await;
    assert_eq!(
        ready.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "/readyz on a full disk: {}",
        ready.text
    );
    let mut acked = Acknowledged {
        messages: vec![warm],
        servers: Vec::new(),
        keys: Vec::new(),
    };
    for round in 0..40 {
        let message = Uuid::new_v4().to_string();
        let reply = park(&app, &message, 16 * 1024).await;
        if acknowledged(
            &reply,
            StatusCode::ACCEPTED,
            "parking a call on a full disk",
        ) {
            acked.messages.push(message);
        }
        let reply = app
            .create_server("u", crate::helpers::remote_server(&format!("r{round}")))
            .await;
        if acknowledged(
            &reply,
            StatusCode::CREATED,
            "creating a server on a full disk",
        ) {
            let id = reply.body["id"].as_str().unwrap().to_owned();
            acked.servers.push(id);
        }
        let reply = app
            .admin(
                Method::POST,
                "/admin/keys",
                Some(json!({"name": format!("k{round}"), "role": "service"})),
            )
            .await;
        if acknowledged(&reply, StatusCode::CREATED, "creating a key on a full disk") {
            let key = reply.body["key"].as_str().unwrap().to_owned();
            acked.keys.push(key);
        }
    }
    // The warm-up message was acknowledged before the disk filled.
    let refused = 120 - (acked.messages.len() - 1) - acked.servers.len() - acked.keys.len();
    assert!(
        refused >= 40,
        "the disk was full, yet only {refused} of 120 writes were refused"
    );
    let started = Instant::now();
    let ready = app.send(Method::GET, "/readyz", None, None, None).await;
    assert_eq!(
        ready.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "/readyz while writes fail: {}",
        ready.text
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "/readyz answers at once"
    );
    acked.all_there(&app, "while the disk is full").await;

    std::fs::remove_file(filler).expect("space comes back");
    let recovered = Uuid::new_v4().to_string();
    eventually("writes succeed again once space is back", || async {
        park(&app, &recovered, 10).await.status == StatusCode::ACCEPTED
    })
    .await;
    acked.messages.push(recovered);
    let reply = app
        .create_server("u", crate::helpers::remote_server("after"))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    acked
        .servers
        .push(reply.body["id"].as_str().unwrap().to_owned());
    eventually("/readyz is ready again", || async {
        app.send(Method::GET, "/readyz", None, None, None)
            .await
            .status
            == StatusCode::OK
    })
    .await;
    acked.all_there(&app, "after space came back").await;

    let app = app.restart().await;
    acked.all_there(&app, "after a restart").await;
    let integrity = app.raw_db().await;
    let row = sea_orm::ConnectionTrait::query_one_raw(
        &integrity,
        sea_orm::Statement::from_string(sea_orm::DatabaseBackend::Sqlite, "PRAGMA integrity_check"),
    )
    .await
    .expect("integrity check runs")
    .expect("a row");
    assert_eq!(row.try_get_by_index::<String>(0).unwrap(), "ok");
    integrity.close().await.ok();
    app.stop().await;
}

/// A TCP proxy to PostgreSQL that the test cuts: while cut, every connection through it
/// is closed and every new one refused at once, as when the server stops.
struct CutProxy {
    port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl CutProxy {
    async fn start(target: u16) -> Self {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Self {
            port,
            cut: Default::default(),
            open: Default::default(),
        };
        let (cut, open) = (proxy.cut.clone(), proxy.open.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if cut.load(Ordering::SeqCst) {
                    continue;
                }
                let relay = tokio::spawn(async move {
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                open.lock().unwrap().push(relay.abort_handle());
            }
        });
        proxy
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for relay in self.open.lock().unwrap().drain(..) {
            relay.abort();
        }
    }

    fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A fresh test database reached through a [`CutProxy`]; `None` off PostgreSQL.
async fn proxied_postgres() -> Option<(String, CutProxy)> {
    if !std::env::var("DATABASE_URL").is_ok_and(|u| u.starts_with("postgres")) {
        eprintln!("skipped: needs DATABASE_URL=postgres://… (the PostgreSQL run of .ci/run)");
        return None;
    }
    let direct = crate::helpers::fresh_database_url().await;
    let mut url = reqwest::Url::parse(&direct).expect("a database URL");
    let proxy = CutProxy::start(url.port().unwrap_or(5432)).await;
    url.set_port(Some(proxy.port)).expect("a port");
    Some((url.to_string(), proxy))
}

/// Runs the fixture's `tally` for `key` on `server` (a direct call, no approval): the
/// count of its executions so far, with `peek` without counting this one.
async fn tally(app: &TestApp, server: &str, key: &str, peek: bool) -> Reply {
    app.call("u", server, "tally", json!({"key": key, "peek": peek}))
        .await
}

/// PostgreSQL gone for longer than a request may wait for a connection: what needs the
/// database is answered 503 at once, a live connection's calls keep working, an approval
/// refused during the cut and retried after it runs its call exactly once, with one audit
/// row; the service recovers without a restart.
#[tokio::test]
async fn a_database_outage_is_answered_at_once_and_an_approval_runs_once() {
    let Some((url, proxy)) = proxied_postgres().await else {
        return;
    };
    let app = spawn_pool_app_with(move |settings| settings.database.url = url.into()).await;
    let server = app.fixture_for_a1(&[]).await;
    assert_eq!(
        tally(&app, &server, "warm", false).await.status,
        StatusCode::OK
    );
    let message = Uuid::new_v4().to_string();
    let parked = app
        .submit_calls(
            "u",
            &message,
            "",
            json!([{"id": "c1", "name": "mcp__fx__tally", "arguments": {"key": "approved"}}]),
        )
        .await;
    assert_eq!(parked.status, StatusCode::ACCEPTED, "{}", parked.text);

    proxy.cut();
    let cut_at = Instant::now();
    for attempt in 0..2 {
        let started = Instant::now();
        let approval = app.confirm("u", &message, "c1", true).await;
        assert_refused_as_unavailable(&approval, "an approval while the database is out");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "approval {attempt} answered after {:?}",
            started.elapsed()
        );
    }
    let started = Instant::now();
    let another = app
        .submit_calls(
            "u",
            &Uuid::new_v4().to_string(),
            "",
            json!([{"id": "c1", "name": "mcp__fx__tally", "arguments": {"key": "never"}}]),
        )
        .await;
    assert_refused_as_unavailable(&another, "parking a new call while the database is out");
    let listed = app.user("u", Method::GET, "/api/mcp-servers", None).await;
    assert_refused_as_unavailable(&listed, "a read while the database is out");
    let ready = app.send(Method::GET, "/readyz", None, None, None).await;
    assert_eq!(
        ready.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        ready.text
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a new call, a read and /readyz answered after {:?}",
        started.elapsed()
    );
    let live = tally(&app, &server, "live", false).await;
    assert_eq!(
        live.status,
        StatusCode::OK,
        "a live connection's direct call needs no database: {}",
        live.text
    );
    // Longer than a request may wait for a connection (`database.acquire_timeout_ms`).
    tokio::time::sleep(Duration::from_secs(4).saturating_sub(cut_at.elapsed())).await;
    proxy.restore();

    eventually("/readyz is ready again", || async {
        app.send(Method::GET, "/readyz", None, None, None)
            .await
            .status
            == StatusCode::OK
    })
    .await;
    let approval = app.confirm("u", &message, "c1", true).await;
    assert_eq!(
        approval.status,
        StatusCode::OK,
        "the retried approval: {}",
        approval.text
    );
    eventually("the approved call is done", || async {
        app.call_record(&message, "c1").await["status"] == "done"
    })
    .await;
    let runs = tally(&app, &server, "approved", true).await;
    assert_eq!(
        crate::upstreams::text_of(&runs.body),
        "1",
        "the approved call ran exactly once: {}",
        runs.text
    );
    let audit = app
        .admin(Method::GET, "/admin/audit?userId=u&tool=tally", None)
        .await;
    let rows = audit.body["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("audit entries: {}", audit.text))
        .iter()
        .filter(|e| e["messageId"] == message.as_str())
        .count();
    assert_eq!(rows, 1, "one audit row for one execution: {}", audit.text);
}

/// The service SIGKILLed right after an approval was sent: after the restart each call
/// ran at most once (the HTTP fixture, which outlives the service, counts), its record
/// says whether it finished, and approving it again runs nothing.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_sigkill_mid_approval_runs_the_call_at_most_once() {
    let upstream = crate::upstreams::HttpUpstream::fixture(None).await;
    let app = spawn_pool_app_with(|_| {}).await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "web", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    app.bind_ok("u", "a1", [&server]).await;
    let binary = app
        .stop_for_binary(&[("MCP_POOL__SECURITY__ALLOW_LOOPBACK_URLS", "true")])
        .await;
    let (key, env) = (binary.service_key.clone(), binary.vars());
    for delay_ms in [0u64, 1, 3, 10] {
        let mut first = crate::logging::start_binary(&env).await;
        let message = Uuid::new_v4().to_string();
        let parked = as_user(
            &key,
            Method::POST,
            format!("{}/api/messages/{message}/tool-calls", first.base),
            Some(json!({"assistantId": "a1", "calls": [
                {"id": "c1", "name": "mcp__web__tally", "arguments": {"key": message}}]})),
        )
        .await;
        assert_eq!(parked.status, StatusCode::ACCEPTED, "{}", parked.text);
        let approve = {
            let (key, url) = (
                key.clone(),
                format!("{}/api/messages/{message}/tool-confirm", first.base),
            );
            // Its answer may never come: the service is killed under it.
            tokio::spawn(async move {
                let body = json!({"toolCallId": "c1", "approved": true});
                let request = reqwest::Client::new().post(url).bearer_auth(key);
                let _ = request.header("X-User-Id", "u").json(&body).send().await;
            })
        };
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        first.child.kill().await.expect("SIGKILL");
        approve.abort();

        let mut second = crate::logging::start_binary(&env).await;
        let stored = as_user(
            &key,
            Method::GET,
            format!("{}/api/messages/{message}", second.base),
            None,
        )
        .await;
        let status = stored.body["toolCalls"][0]["status"].clone();
        let again = as_user(
            &key,
            Method::POST,
            format!("{}/api/messages/{message}/tool-confirm", second.base),
            Some(json!({"toolCallId": "c1", "approved": true})),
        )
        .await;
        assert_eq!(
            again.code(),
            "TOOL_CALL_SETTLED",
            "after {delay_ms} ms: {}",
            again.text
        );
        let runs = as_user(
            &key,
            Method::POST,
            format!("{}/api/mcp-servers/{server}/tools/tally/call", second.base),
            Some(json!({"arguments": {"key": message, "peek": true}})),
        )
        .await;
        let runs = crate::upstreams::text_of(&runs.body).to_owned();
        match status.as_str() {
            Some("done") => assert_eq!(runs, "1", "after {delay_ms} ms: done, ran once"),
            // Never approved as far as the store knows: it must not have run.
            Some("cancelled") => assert_eq!(runs, "0", "after {delay_ms} ms: cancelled yet ran"),
            // Approved, then interrupted: it ran at most once.
            Some("error") => assert!(runs == "0" || runs == "1", "after {delay_ms} ms: {runs}"),
            other => panic!(
                "after {delay_ms} ms: the call is left {other:?}: {}",
                stored.text
            ),
        }
        second.child.kill().await.expect("stopped");
    }
}
