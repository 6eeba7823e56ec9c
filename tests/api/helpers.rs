//! Starts the real service on port 0 with a fresh database and talks to it over HTTP.
//!
//! SQLite in a temporary directory by default; when `DATABASE_URL` points at PostgreSQL,
//! each test gets its own freshly created database on that server instead.

use std::sync::{Arc, Once};

use mcp_pool::security::{NameLookup, UrlPolicy};
use mcp_pool::{Application, Settings};
use reqwest::{Method, StatusCode};
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

static TRACING: Once = Once::new();

pub const ADMIN_KEY: &str = "test-admin-key-0123456789abcdef";

pub struct TestApp {
    pub address: String,
    /// `http://127.0.0.1:<grpc port>`.
    pub grpc_address: String,
    pub settings: Settings,
    pub service_key: String,
    client: reqwest::Client,
    shutdown: CancellationToken,
    server: Option<JoinHandle<()>>,
    _data_dir: TempDir,
    /// The scripted DNS the service asks, kept for its restarts and other instances.
    lookup: Option<Arc<dyn NameLookup>>,
}

/// A response reduced to what tests assert on.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Reply {
    /// The stable error code of an error body.
    pub fn code(&self) -> &str {
        self.body["error"]["code"]
            .as_str()
            .unwrap_or("<no error code>")
    }
}

/// A new empty database on `DATABASE_URL`'s server, or `DATABASE_URL` itself when it is
/// not PostgreSQL (empty when unset: SQLite in the data directory).
pub async fn fresh_database_url() -> String {
    let Ok(base) = std::env::var("DATABASE_URL") else {
        return String::new();
    };
    if !base.starts_with("postgres") {
        return base;
    }
    let name = format!("mcp_pool_test_{}", uuid::Uuid::new_v4().simple());
    let admin = Database::connect(&base)
        .await
        .expect("connect to DATABASE_URL");
    admin
        .execute_unprepared(&format!("CREATE DATABASE \"{name}\""))
        .await
        .expect("create a test database");
    admin.close().await.ok();
    let (server, _) = base
        .rsplit_once('/')
        .expect("DATABASE_URL ends in /<database>");
    format!("{server}/{name}")
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// Like [`spawn_app`], with a chance to change settings first.
pub async fn spawn_app_with(adjust: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_resolving(None, adjust).await
}

/// Like [`spawn_app_with`], the service asking `lookup` (a scripted DNS) for the
/// addresses of names.
pub async fn spawn_app_resolving(
    lookup: Option<Arc<dyn NameLookup>>,
    adjust: impl FnOnce(&mut Settings),
) -> TestApp {
    TRACING.call_once(|| {
        if std::env::var("TEST_LOG").is_ok() {
            // Nothing is exported (no OTLP endpoint), so the guard has nothing to keep.
            let _ = mcp_pool::telemetry::init(&Settings::defaults().log);
        }
    });
    let data_dir = tempfile::tempdir().expect("temp dir");
    let mut settings = Settings::defaults();
    settings.server.port = 0;
    settings.grpc.port = 0;
    settings.storage.data_dir = data_dir.path().to_path_buf();
    // What the tests' presets run, shared read-only with every sandbox: the fixture
    // binary's folder (a shell preset names it inside its script) and tests/ (npm and
    // PyPI servers, their caches, the Python virtualenv).
    settings.pool.sandbox.read_only_paths = sandbox_shared_paths();
    settings.database.url = fresh_database_url().await.into();
    settings.auth.bootstrap_admin_key = Some(ADMIN_KEY.to_owned().into());
    adjust(&mut settings);
    let mut app = start(settings, data_dir, lookup).await;
    let key = app
        .admin(
            Method::POST,
            "/admin/keys",
            Some(json!({"name": "backend", "role": "service"})),
        )
        .await;
    assert_eq!(key.status, StatusCode::CREATED, "{}", key.text);
    app.service_key = key.body["key"].as_str().unwrap().to_owned();
    app
}

async fn start(
    settings: Settings,
    data_dir: TempDir,
    lookup: Option<Arc<dyn NameLookup>>,
) -> TestApp {
    let mut policy = UrlPolicy::from_settings(&settings.security);
    if let Some(lookup) = lookup.clone() {
        policy = policy.with_lookup(lookup);
    }
    let app = Application::build_with_policy(settings.clone(), policy)
        .await
        .expect("service builds");
    let address = format!("http://127.0.0.1:{}", app.port());
    let grpc_address = format!("http://127.0.0.1:{}", app.grpc_port().unwrap_or_default());
    let shutdown = app.shutdown_token();
    let server = tokio::spawn(async move {
        app.run_until_stopped().await.expect("service runs");
    });
    TestApp {
        address,
        grpc_address,
        settings,
        service_key: String::new(),
        client: reqwest::Client::new(),
        shutdown,
        server: Some(server),
        _data_dir: data_dir,
        lookup,
    }
}

impl TestApp {
    /// Stops the service as SIGTERM would and waits until it has stopped.
    pub async fn stop(mut self) {
        self.wait_stopped().await;
    }

    async fn wait_stopped(&mut self) {
        self.shutdown.cancel();
        self.server
            .take()
            .unwrap()
            .await
            .expect("service stopped cleanly");
    }

    /// Stops the service as SIGTERM would and hands over its data directory, for
    /// another process to start on (with the same database).
    pub async fn stop_keeping_data(mut self) -> TempDir {
        self.wait_stopped().await;
        std::mem::replace(&mut self._data_dir, tempfile::tempdir().unwrap())
    }

    /// Hands over the data directory and lets the service go without stopping it (it
    /// ends with its runtime).
    pub fn into_data_dir(mut self) -> TempDir {
        std::mem::replace(&mut self._data_dir, tempfile::tempdir().unwrap())
    }

    /// What SIGTERM does, without waiting for the service to stop.
    pub fn begin_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// A second instance of the service on the same database (and data directory, so
    /// the same encryption key), as behind a load balancer.
    /// On PostgreSQL it returns once this instance knows of the new one (it has heard its
    /// `Joined` note), so changes made here reach it from the first one.
    pub async fn another_instance(&self) -> TestApp {
        let mut app = start(
            self.settings.clone(),
            tempfile::tempdir().unwrap(),
            self.lookup.clone(),
        )
        .await;
        app.service_key = self.service_key.clone();
        if self.on_postgres() {
            crate::upstreams::eventually("the first instance knows the new one", || async {
                let stats = self.admin(Method::GET, "/admin/stats", None).await;
                stats.body["cluster"]["hasCompany"] == true
            })
            .await;
        }
        app
    }

    /// Whether the test database is PostgreSQL (instances can then talk to each other).
    pub fn on_postgres(&self) -> bool {
        mcp_pool::store::database_url(&self.settings).starts_with("postgres")
    }

    /// Stops the service as SIGTERM would and starts a new one on the same database.
    pub async fn restart(mut self) -> TestApp {
        self.wait_stopped().await;
        let service_key = std::mem::take(&mut self.service_key);
        let settings = self.settings.clone();
        let data_dir = std::mem::replace(&mut self._data_dir, tempfile::tempdir().unwrap());
        let mut app = start(settings, data_dir, self.lookup.clone()).await;
        app.service_key = service_key;
        app
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        user: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut request = self
            .client
            .request(method, format!("{}{}", self.address, path));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(user) = user {
            request = request.header("X-User-Id", user);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        into_reply(request.send().await.expect("request sent")).await
    }

    /// A raw request, for malformed bodies and odd headers.
    pub async fn send_raw(&self, request: reqwest::RequestBuilder) -> Reply {
        into_reply(request.send().await.expect("request sent")).await
    }

    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{}", self.address, path))
    }

    /// A user-scoped call made with the service key.
    pub async fn user(&self, user: &str, method: Method, path: &str, body: Option<Value>) -> Reply {
        self.send(
            method,
            path,
            Some(&self.service_key.clone()),
            Some(user),
            body,
        )
        .await
    }

    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        self.send(method, path, Some(ADMIN_KEY), None, body).await
    }

    pub async fn create_server(&self, user: &str, body: Value) -> Reply {
        self.user(user, Method::POST, "/api/mcp-servers", Some(body))
            .await
    }

    /// Creates a server that must succeed and returns its id.
    pub async fn create_server_ok(&self, user: &str, body: Value) -> String {
        let reply = self.create_server(user, body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        reply.body["id"].as_str().unwrap().to_owned()
    }

    /// Binds `servers` (ids, in order) to the user's assistant; asserts it worked.
    pub async fn bind_ok(&self, user: &str, assistant: &str, servers: impl serde::Serialize) {
        let reply = self
            .user(
                user,
                Method::PUT,
                &format!("/api/assistants/{assistant}/mcp-servers"),
                Some(json!({ "serverIds": servers })),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }

    pub async fn create_preset_ok(&self, body: Value) {
        let reply = self.admin(Method::POST, "/admin/presets", Some(body)).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }

    /// The `fixture` stdio preset and `user`'s server `fx` using it; returns the server id.
    pub async fn stdio_fixture_ok(&self, user: &str) -> String {
        self.create_preset_ok(crate::upstreams::fixture_preset())
            .await;
        self.create_server_ok(user, json!({"name": "fx", "preset": "fixture"}))
            .await
    }

    /// The `fixture` preset, user `u`'s server `fx` using it with `auto_approve` tools
    /// running without approval, bound to assistant `a1`; returns the server id.
    pub async fn fixture_for_a1(&self, auto_approve: &[&str]) -> String {
        self.create_preset_ok(crate::upstreams::fixture_preset())
            .await;
        let server = self
            .create_server_ok(
                "u",
                json!({"name": "fx", "preset": "fixture", "autoApproveTools": auto_approve}),
            )
            .await;
        self.bind_ok("u", "a1", [&server]).await;
        server
    }

    /// Submits a model's tool calls for `message` of the user's assistant `a1`; `query`
    /// is `""` or e.g. `"?wait=20"`.
    pub async fn submit_calls(
        &self,
        user: &str,
        message: &str,
        query: &str,
        calls: Value,
    ) -> Reply {
        self.user(
            user,
            Method::POST,
            &format!("/api/messages/{message}/tool-calls{query}"),
            Some(json!({"assistantId": "a1", "calls": calls})),
        )
        .await
    }

    /// `n` calls of the auto-approved `echo` of [`Self::fixture_for_a1`]'s server, on a
    /// new message of `u`, run to the end: `n` audit rows.
    pub async fn run_echo_calls(&self, n: usize) {
        let calls: Vec<_> = (0..n)
            .map(|i| json!({"id": format!("e{i}"), "name": "mcp__fx__echo", "arguments": {"text": "hi"}}))
            .collect();
        let message = uuid::Uuid::new_v4().to_string();
        let reply = self
            .submit_calls("u", &message, "?wait=20", Value::from(calls))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }

    /// Approves or rejects a parked tool call of the user's message.
    pub async fn confirm(&self, user: &str, message: &str, call: &str, approved: bool) -> Reply {
        self.user(
            user,
            Method::POST,
            &format!("/api/messages/{message}/tool-confirm"),
            Some(json!({"toolCallId": call, "approved": approved})),
        )
        .await
    }

    /// [`TestApp::confirm`] for user `u`, which must succeed.
    pub async fn confirm_ok(&self, message: &str, call: &str, approved: bool) {
        let reply = self.confirm("u", message, call, approved).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }

    /// Every value in the given column, read straight from the database.
    pub async fn raw_column(&self, table: &str, column: &str) -> Vec<String> {
        let db = Database::connect(mcp_pool::store::database_url(&self.settings))
            .await
            .expect("connect");
        let rows = db
            .query_all_raw(sea_orm::Statement::from_string(
                db.get_database_backend(),
                format!("SELECT {column} FROM {table}"),
            ))
            .await
            .expect("query");
        let values = rows
            .iter()
            .map(|row| {
                row.try_get::<Option<String>>("", column)
                    .unwrap()
                    .unwrap_or_default()
            })
            .collect();
        db.close().await.ok();
        values
    }

    /// A connection of its own to the service's database, for reading rows directly.
    pub async fn raw_db(&self) -> sea_orm::DatabaseConnection {
        Database::connect(mcp_pool::store::database_url(&self.settings))
            .await
            .expect("connect")
    }

    /// Runs one statement straight on the database (what another process might do).
    pub async fn raw_execute(&self, sql: &str) {
        let db = Database::connect(mcp_pool::store::database_url(&self.settings))
            .await
            .expect("connect");
        db.execute_unprepared(sql).await.expect("statement runs");
        db.close().await.ok();
    }
}

/// What the real binary needs to start on a stopped [`TestApp`]'s database and data.
pub struct BinaryEnv {
    pub service_key: String,
    /// The data directory, kept as long as this lives.
    _data: TempDir,
    vars: Vec<(String, String)>,
}

impl BinaryEnv {
    /// The environment for [`crate::logging::start_binary`].
    pub fn vars(&self) -> Vec<(&str, &str)> {
        self.vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

impl TestApp {
    /// Stops the service as SIGTERM would, for the binary to start on the same database
    /// and data directory with `extra` settings (`MCP_POOL__…` variables).
    pub async fn stop_for_binary(self, extra: &[(&str, &str)]) -> BinaryEnv {
        use secrecy::ExposeSecret;
        let service_key = self.service_key.clone();
        let database_url = self.settings.database.url.expose_secret().to_owned();
        let data = self.stop_keeping_data().await;
        let mut vars = vec![
            (
                "MCP_POOL__STORAGE__DATA_DIR".to_owned(),
                data.path().display().to_string(),
            ),
            ("DATABASE_URL".to_owned(), database_url),
            (
                "MCP_POOL__POOL__SANDBOX__READ_ONLY_PATHS".to_owned(),
                sandbox_shared_paths().join(","),
            ),
        ];
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        BinaryEnv {
            service_key,
            _data: data,
            vars,
        }
    }

    /// The record of call `call` of user `u`'s message (null when it has none).
    pub async fn call_record(&self, message: &str, call: &str) -> Value {
        let reply = self
            .user("u", Method::GET, &format!("/api/messages/{message}"), None)
            .await;
        reply.body["toolCalls"]
            .as_array()
            .unwrap_or_else(|| panic!("message {message}: {}", reply.text))
            .iter()
            .find(|r| r["id"] == call)
            .cloned()
            .unwrap_or(Value::Null)
    }
}

/// A request of user `u` with `key` to any URL (a service process of its own).
pub async fn as_user(key: &str, method: Method, url: String, body: Option<Value>) -> Reply {
    let mut request = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(key)
        .header("X-User-Id", "u");
    if let Some(body) = body {
        request = request.json(&body);
    }
    into_reply(request.send().await.expect("request sent")).await
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub async fn into_reply(response: reqwest::Response) -> Reply {
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        body,
        text,
    }
}

/// A streamable-HTTP server body on a public address (not contacted by these tests).
/// The JSON-RPC message that answered request `id`: the JSON body, or the message with
/// that id on the event stream (notifications before it are skipped).
pub async fn jsonrpc_answer(response: reqwest::Response, id: impl Into<Value>) -> Value {
    use futures::StreamExt;
    let id = id.into();
    let is_stream = response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if !is_stream {
        return response.json().await.unwrap();
    }
    let mut events = sse_stream::SseStream::from_bytes_stream(response.bytes_stream());
    loop {
        let event = events
            .next()
            .await
            .unwrap_or_else(|| panic!("the stream ended without the answer to {id}"))
            .unwrap();
        let message: Value = event
            .data
            .and_then(|data| serde_json::from_str(&data).ok())
            .unwrap_or_default();
        if message["id"] == id {
            return message;
        }
    }
}

pub fn remote_server(name: &str) -> Value {
    json!({ "name": name, "baseUrl": "https://93.184.216.34/mcp" })
}

/// What the tests' presets run, shared read-only with every sandbox
/// (`pool.sandbox.read_only_paths`): the fixture binary's folder (a shell preset names it
/// inside its script) and tests/ (npm and PyPI servers, their caches, the virtualenv).
pub fn sandbox_shared_paths() -> Vec<String> {
    vec![
        std::path::Path::new(crate::upstreams::fixture_binary())
            .parent()
            .expect("the fixture's folder")
            .display()
            .to_string(),
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests").to_owned(),
    ]
}

/// A service that may reach loopback upstreams (the fixture and server-everything).
pub async fn spawn_pool_app() -> TestApp {
    spawn_pool_app_with(|_| {}).await
}

pub async fn spawn_pool_app_with(adjust: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_with(|s| {
        s.security.allow_loopback_urls = true;
        adjust(s);
    })
    .await
}

impl TestApp {
    /// `POST /api/mcp-servers/{server}/connect` as `user`.
    pub async fn connect(&self, user: &str, server: &str) -> Reply {
        self.user(
            user,
            Method::POST,
            &format!("/api/mcp-servers/{server}/connect"),
            None,
        )
        .await
    }

    pub async fn call(&self, user: &str, server: &str, tool: &str, arguments: Value) -> Reply {
        self.user(
            user,
            Method::POST,
            &format!("/api/mcp-servers/{server}/tools/{tool}/call"),
            Some(json!({ "arguments": arguments })),
        )
        .await
    }

    /// An MCP client's settings for `assistant`'s gateway with `token`.
    pub fn gateway_client_config(
        &self,
        assistant: &str,
        token: &str,
    ) -> rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig {
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("{}/mcp/assistants/{assistant}", self.address),
        )
        .auth_header(token)
    }

    /// A new gateway token of `user`'s `assistant`.
    pub async fn gateway_token(&self, user: &str, assistant: &str) -> String {
        let created = self
            .user(
                user,
                Method::POST,
                &format!("/api/assistants/{assistant}/gateway-tokens"),
                Some(json!({"name": "test"})),
            )
            .await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
        created.body["token"].as_str().unwrap().to_owned()
    }

    /// `user`'s event stream (`GET /api/events`), as it arrives.
    pub async fn events(
        &self,
        user: &str,
    ) -> impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin + use<> {
        self.request(Method::GET, "/api/events")
            .bearer_auth(&self.service_key)
            .header("X-User-Id", user)
            .send()
            .await
            .unwrap()
            .bytes_stream()
    }

    /// The stdio fixture's process id for this user's server (connecting if needed).
    /// The host pid of `user`'s stdio server (connected by a call first): the one the
    /// admin API shows, its process group's leader (bubblewrap, when sandboxed: the
    /// fixture's own `pid` tool answers its pid inside its pid namespace).
    pub async fn fixture_pid(&self, user: &str, server: &str) -> u32 {
        let reply = self.call(user, server, "pid", json!({})).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        let connections = self.connections().await;
        let found = connections
            .iter()
            .find(|c| c["userId"] == user && c["serverId"] == server && c["pid"].is_number())
            .unwrap_or_else(|| panic!("no live process for {user}/{server}: {connections:?}"));
        found["pid"].as_u64().unwrap() as u32
    }

    pub async fn connections(&self) -> Vec<Value> {
        let reply = self.admin(Method::GET, "/admin/connections", None).await;
        reply.body["connections"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}
