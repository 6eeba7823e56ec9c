//! A remote server behind TLS that offers HTTP/2 by ALPN — the real nginx with a test CA in
//! front of the fixture and of server-everything over streamable HTTP — is spoken to over
//! HTTP/2 on kept-alive connections. Each session holds a stream open for its whole life
//! (the standalone GET), and nginx here allows 4 streams per connection: six users'
//! sessions on one server all keep working, because sessions share a client (so a
//! connection) only in small groups (`pool.sessions_per_http_client`).
//!
//! What reached nginx is read from its access log: the connection's serial number, the
//! protocol, the method. Needs an `nginx` binary (Debian's package; `.ci/run` installs it):
//! without one the test says so and passes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tokio::process::Child;

use crate::helpers::spawn_pool_app_with;
use crate::nginx::{nginx_binary, nginx_command, nginx_prefix, nginx_version};
use crate::upstreams::{HttpUpstream, free_port, wait_listening};

/// Streams nginx lets one HTTP/2 connection have open at once.
const STREAMS_PER_CONNECTION: u32 = 4;
/// Sessions sharing one client: two standing GET streams leave room for calls.
const SESSIONS_PER_CLIENT: u32 = 2;
const USERS: usize = 6;

/// nginx terminating TLS (HTTP/2 and HTTP/1.1 offered) in front of `upstream`, killed when
/// dropped.
struct TlsFront {
    base: String,
    ca_file: PathBuf,
    access_log: PathBuf,
    _child: Child,
    _dir: tempfile::TempDir,
}

impl TlsFront {
    async fn start(binary: &Path, upstream: u16) -> Self {
        let dir = nginx_prefix();
        write_certificates(dir.path());
        let path = |name: &str| dir.path().join(name);
        let port = free_port();
        // `http2 on` came with nginx 1.25.1; older ones take it on `listen`.
        let (listen_http2, http2_on) = if nginx_version(binary) < (1, 25, 1) {
            (" http2", "")
        } else {
            ("", "http2 on;")
        };
        let d = dir.path().display();
        let conf = format!(
            "events {{}}
http {{
    log_format upstreams '$connection $server_protocol $request_method $status';
    access_log {d}/access.log upstreams;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl{listen_http2};
        {http2_on}
        http2_max_concurrent_streams {STREAMS_PER_CONNECTION};
        ssl_certificate {d}/server.pem;
        ssl_certificate_key {d}/server.key;
        location / {{
            proxy_pass http://127.0.0.1:{upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_buffering off;
            proxy_read_timeout 1h;
        }}
    }}
}}
"
        );
        std::fs::write(path("nginx.conf"), conf).unwrap();
        let child = nginx_command(binary, dir.path(), &path("nginx.conf"))
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts");
        wait_listening(port, Duration::from_secs(10), "nginx").await;
        Self {
            base: format!("https://127.0.0.1:{port}"),
            ca_file: path("ca.pem"),
            access_log: path("access.log"),
            _child: child,
            _dir: dir,
        }
    }

    /// (connection, protocol, method) of every finished request.
    fn requests(&self) -> Vec<(u64, String, String)> {
        std::fs::read_to_string(&self.access_log)
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                (
                    fields[0].parse().unwrap(),
                    fields[1].to_owned(),
                    fields[2].to_owned(),
                )
            })
            .collect()
    }
}

/// A CA, and a certificate for 127.0.0.1 it signed (PEM: CA, certificate, key).
fn certificates() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "mcp-pool test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let server = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (ca.pem(), server.pem(), key.serialize_pem())
}

/// [`certificates`] written to `dir` as `ca.pem`, `server.pem` and `server.key`; the CA's PEM.
fn write_certificates(dir: &Path) -> String {
    let (ca_pem, cert_pem, key_pem) = certificates();
    std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
    std::fs::write(dir.join("server.pem"), cert_pem).unwrap();
    std::fs::write(dir.join("server.key"), key_pem).unwrap();
    ca_pem
}

#[tokio::test]
async fn tls_servers_offering_http2_get_it_and_sessions_past_their_stream_limit_still_work() {
    let Some(binary) = nginx_binary() else {
        eprintln!("nginx is not installed: skipped (Debian: apt-get install nginx)");
        return;
    };
    for (upstream, field) in [
        (HttpUpstream::fixture(None).await, "text"),
        (HttpUpstream::everything("streamableHttp").await, "message"),
    ] {
        let front = TlsFront::start(&binary, upstream.port()).await;
        let ca_file = front.ca_file.display().to_string();
        let app = spawn_pool_app_with(|s| {
            s.security.extra_ca_file = ca_file;
            s.pool.sessions_per_http_client = SESSIONS_PER_CLIENT;
        })
        .await;
        // One session per user, each holding its standing stream, all on one server.
        let calls = echo_as_each_user(&app, USERS, &front.base, field, 2).await;
        let posts: Vec<(u64, String, String)> = front
            .requests()
            .into_iter()
            .filter(|(_, _, method)| method == "POST")
            .collect();
        assert!(posts.len() > calls, "initializes and calls: {posts:?}");
        assert!(
            posts.iter().all(|(_, protocol, _)| protocol == "HTTP/2.0"),
            "{posts:?}"
        );
        let connections: BTreeSet<u64> = posts.iter().map(|(connection, ..)| *connection).collect();
        // Six sessions in groups of two: three connections, each kept for many requests.
        assert_eq!(
            connections.len(),
            USERS / SESSIONS_PER_CLIENT as usize,
            "{posts:?}"
        );
    }
}

/// Users `u0`, `u1`, … each add a server at `{base}/mcp` and call its `echo` `rounds`
/// times (the text in argument `field`), each answered within 20 s with its own text.
/// Returns the calls made.
async fn echo_as_each_user(
    app: &crate::helpers::TestApp,
    users: usize,
    base: &str,
    field: &str,
    rounds: usize,
) -> usize {
    for user in 0..users {
        let user = format!("u{user}");
        let server = app
            .create_server_ok(
                &user,
                json!({"name": "tls", "baseUrl": format!("{base}/mcp")}),
            )
            .await;
        for round in 0..rounds {
            let echo = tokio::time::timeout(
                Duration::from_secs(20),
                app.call(
                    &user,
                    &server,
                    "echo",
                    json!({field: format!("{user} {round}")}),
                ),
            )
            .await
            .unwrap_or_else(|_| panic!("{user}'s call waited 20 s: no stream for it"));
            assert_eq!(echo.status, StatusCode::OK, "{}", echo.text);
            assert!(
                echo.text.contains(&format!("{user} {round}")),
                "{}",
                echo.text
            );
        }
    }
    users * rounds
}

/// A server that speaks HTTP/2 itself (hyper, as servers written with rmcp do): the fixture
/// over TLS, no proxy between. Five users' sessions in groups of two make their calls over
/// three connections, all HTTP/2 — not one connection per session, not HTTP/1.1.
#[tokio::test]
async fn a_server_speaking_http2_itself_gets_one_connection_per_group_of_sessions() {
    const USERS: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    let ca_pem = write_certificates(dir.path());
    let path = |name: &str| dir.path().join(name).display().to_string();
    // Sessions (2025-11-25) are what the fixture counts per connection.
    let upstream = HttpUpstream::fixture_with(&[
        "--legacy-only",
        "--tls-cert",
        &path("server.pem"),
        "--tls-key",
        &path("server.key"),
    ])
    .await;
    assert!(upstream.base.starts_with("https://"), "{}", upstream.base);
    let app = spawn_pool_app_with(|s| {
        s.security.extra_ca_file = path("ca.pem");
        s.pool.sessions_per_http_client = SESSIONS_PER_CLIENT;
    })
    .await;
    echo_as_each_user(&app, USERS, &upstream.base, "text", 3).await;
    // Read over HTTP/1.1, so this reading is the one HTTP/1.1 connection.
    let counts: serde_json::Value = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .http1_only()
        .build()
        .unwrap()
        .get(format!("{}/fixture/sessions", upstream.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(counts["live"], USERS, "{counts}");
    assert_eq!(
        counts["tls_connections"],
        json!({"h2": USERS.div_ceil(SESSIONS_PER_CLIENT as usize), "http/1.1": 1}),
        "{counts}"
    );
}
