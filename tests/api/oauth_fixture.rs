//! The fixture's OAuth-protected mode (`mcp-fixture http --oauth`), walked over HTTP as an
//! MCP client would: 401 challenge, metadata discovery, registration (DCR, CIMD,
//! pre-registered), authorization code with PKCE, tokens, refresh rotation, revocation,
//! step-up 403. These test the fixture itself, for the service's OAuth tests to build on.

use std::collections::HashMap;

use base64::Engine;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::upstreams::HttpUpstream;

const REDIRECT: &str = "http://127.0.0.1:9/callback";

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

fn pkce() -> (String, String) {
    let verifier = format!("verifier-{}-{}", uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

fn www_authenticate(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

async fn get_json(url: &str) -> (StatusCode, Value) {
    let response = http().get(url).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn stats(base: &str) -> Value {
    get_json(&format!("{base}/oauth-fixture/stats")).await.1
}

/// How the client authenticates at `/token` and `/revoke`.
#[derive(Clone, Copy)]
enum ClientAuth<'a> {
    Basic(&'a str, &'a str),
    Post(&'a str, &'a str),
    Public(&'a str),
}

async fn post_form(url: &str, auth: ClientAuth<'_>, pairs: &[(&str, &str)]) -> reqwest::Response {
    let mut pairs = pairs.to_vec();
    let mut request = http().post(url);
    match auth {
        ClientAuth::Basic(id, secret) => request = request.basic_auth(id, Some(secret)),
        ClientAuth::Post(id, secret) => {
            pairs.push(("client_id", id));
            pairs.push(("client_secret", secret));
        }
        ClientAuth::Public(id) => pairs.push(("client_id", id)),
    }
    request
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&pairs))
        .send()
        .await
        .unwrap()
}

/// `GET /authorize` with PKCE S256 and a state; returns the redirect's query and the
/// verifier.
async fn authorize(
    endpoint: &str,
    client_id: &str,
    scope: Option<&str>,
    resource: Option<&str>,
) -> (HashMap<String, String>, String) {
    let (verifier, challenge) = pkce();
    let mut pairs = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", REDIRECT),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
        ("state", "st-42"),
    ];
    if let Some(scope) = scope {
        pairs.push(("scope", scope));
    }
    if let Some(resource) = resource {
        pairs.push(("resource", resource));
    }
    let response = http()
        .get(format!("{endpoint}?{}", form(&pairs)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND, "{response:?}");
    let location = url::Url::parse(response.headers()["location"].to_str().unwrap()).unwrap();
    assert!(
        location.as_str().starts_with(REDIRECT),
        "redirects to the client: {location}"
    );
    (location.query_pairs().into_owned().collect(), verifier)
}

async fn exchange(
    token_endpoint: &str,
    auth: ClientAuth<'_>,
    code: &str,
    verifier: &str,
    resource: Option<&str>,
) -> reqwest::Response {
    let mut pairs = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", REDIRECT),
        ("code_verifier", verifier),
    ];
    if let Some(resource) = resource {
        pairs.push(("resource", resource));
    }
    post_form(token_endpoint, auth, &pairs).await
}

/// A JSON-RPC result from a JSON or an SSE response body.
fn rpc_body(text: &str) -> Value {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return value;
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some())
        .unwrap_or(Value::Null)
}

async fn mcp_post(
    base: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut request = http()
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18");
    }
    request.send().await.unwrap()
}

/// initialize + notifications/initialized with the token; the session id.
async fn mcp_session(base: &str, token: &str) -> String {
    let initialized = mcp_post(
        base,
        Some(token),
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "oauth-test", "version": "1"}}}),
    )
    .await;
    assert_eq!(initialized.status(), StatusCode::OK);
    let session = initialized.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let body = rpc_body(&initialized.text().await.unwrap());
    assert_eq!(
        body["result"]["serverInfo"]["name"], "mcp-fixture",
        "{body}"
    );
    let ack = mcp_post(
        base,
        Some(token),
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(ack.status(), StatusCode::ACCEPTED);
    session
}

async fn call_tool(base: &str, token: &str, session: &str, name: &str) -> reqwest::Response {
    mcp_post(
        base,
        Some(token),
        Some(session),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": name, "arguments": {"text": "hi"}}}),
    )
    .await
}

#[tokio::test]
async fn dcr_pkce_tokens_step_up_refresh_rotation_and_revocation() {
    let fixture = HttpUpstream::fixture_with(&["--oauth"]).await;
    let base = fixture.base.as_str();
    let resource = format!("{base}/mcp");

    // 401 with the challenge: where the metadata is, which scope to ask for.
    let unauthorized = mcp_post(base, None, None, json!({"jsonrpc": "2.0", "id": 1})).await;
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
    let prm_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        www_authenticate(&unauthorized),
        format!(r#"Bearer resource_metadata="{prm_url}", scope="read""#)
    );

    // Discovery: PRM (path-aware only), then the AS's RFC 8414 metadata.
    let (status, prm) = get_json(&prm_url).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(prm["resource"], resource.as_str());
    assert_eq!(prm["scopes_supported"], json!(["read", "write"]));
    let issuer = prm["authorization_servers"][0].as_str().unwrap().to_owned();
    assert_eq!(issuer, base);
    let (root_status, _) = get_json(&format!("{base}/.well-known/oauth-protected-resource")).await;
    assert_eq!(root_status, StatusCode::NOT_FOUND);
    let (status, metadata) =
        get_json(&format!("{issuer}/.well-known/oauth-authorization-server")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(metadata["issuer"], issuer.as_str());
    assert_eq!(
        metadata["code_challenge_methods_supported"],
        json!(["S256"])
    );
    assert_eq!(
        metadata["token_endpoint_auth_methods_supported"],
        json!(["client_secret_basic"])
    );
    assert_eq!(
        metadata["authorization_response_iss_parameter_supported"],
        true
    );
    assert!(
        metadata
            .get("client_id_metadata_document_supported")
            .is_none()
    );
    let endpoint = |name: &str| metadata[name].as_str().unwrap().to_owned();
    let (authorize_url, token_url, revoke_url) = (
        endpoint("authorization_endpoint"),
        endpoint("token_endpoint"),
        endpoint("revocation_endpoint"),
    );

    // DCR: an auth method other than the advertised one is refused; the right one gets a secret.
    let refused = http()
        .post(endpoint("registration_endpoint"))
        .json(&json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let registered: Value = http()
        .post(endpoint("registration_endpoint"))
        .json(&json!({"client_name": "t", "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "client_secret_basic"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(registered["redirect_uris"], json!([REDIRECT]));
    let client_id = registered["client_id"].as_str().unwrap().to_owned();
    let secret = registered["client_secret"].as_str().unwrap().to_owned();
    let client = ClientAuth::Basic(&client_id, &secret);

    // An unregistered redirect URI is an error shown, not redirected to.
    let wrong_redirect = http()
        .get(format!(
            "{authorize_url}?{}",
            form(&[
                ("response_type", "code"),
                ("client_id", &client_id),
                ("redirect_uri", "http://127.0.0.1:9/elsewhere"),
                ("code_challenge", "x"),
                ("code_challenge_method", "S256"),
            ])
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_redirect.status(), StatusCode::BAD_REQUEST);

    // Authorization code: state and iss come back; PKCE is checked; a code works once.
    let (query, _) = authorize(&authorize_url, &client_id, Some("read"), Some(&resource)).await;
    assert_eq!(query["state"], "st-42");
    assert_eq!(query["iss"], issuer.as_str());
    let code = query["code"].clone();
    let wrong_verifier = exchange(&token_url, client, &code, "not-the-verifier", None).await;
    assert_eq!(wrong_verifier.status(), StatusCode::BAD_REQUEST);
    let (query, verifier) =
        authorize(&authorize_url, &client_id, Some("read"), Some(&resource)).await;
    let code = query["code"].clone();
    let no_secret = exchange(
        &token_url,
        ClientAuth::Public(&client_id),
        &code,
        &verifier,
        None,
    )
    .await;
    assert_eq!(no_secret.status(), StatusCode::UNAUTHORIZED);
    let granted = exchange(&token_url, client, &code, &verifier, Some(&resource)).await;
    assert_eq!(granted.status(), StatusCode::OK);
    let tokens: Value = granted.json().await.unwrap();
    assert_eq!(tokens["token_type"], "Bearer");
    assert_eq!(tokens["scope"], "read");
    let again = exchange(&token_url, client, &code, &verifier, Some(&resource)).await;
    assert_eq!(again.status(), StatusCode::BAD_REQUEST, "a code works once");
    let access = tokens["access_token"].as_str().unwrap().to_owned();
    let refresh = tokens["refresh_token"].as_str().unwrap().to_owned();

    // MCP with the token: initialize, tools/list, a read call; the write tool asks for more.
    let session = mcp_session(base, &access).await;
    let listed = mcp_post(
        base,
        Some(&access),
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(listed.status(), StatusCode::OK);
    let listed = rpc_body(&listed.text().await.unwrap());
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"admin_tool"),
        "{names:?}"
    );
    let echoed = call_tool(base, &access, &session, "echo").await;
    assert_eq!(echoed.status(), StatusCode::OK);
    assert_eq!(
        rpc_body(&echoed.text().await.unwrap())["result"]["content"][0]["text"],
        "hi"
    );
    let step_up = call_tool(base, &access, &session, "admin_tool").await;
    assert_eq!(step_up.status(), StatusCode::FORBIDDEN);
    let challenge = www_authenticate(&step_up);
    assert!(
        challenge.starts_with(r#"Bearer error="insufficient_scope", scope="read write", "#)
            && challenge.contains(&format!(r#"resource_metadata="{prm_url}""#)),
        "{challenge}"
    );

    // Refresh rotates: the new pair works, the old refresh token does not, and presenting
    // it again revokes everything issued from that grant.
    let refreshed = post_form(
        &token_url,
        client,
        &[("grant_type", "refresh_token"), ("refresh_token", &refresh)],
    )
    .await;
    assert_eq!(refreshed.status(), StatusCode::OK);
    let rotated: Value = refreshed.json().await.unwrap();
    let new_access = rotated["access_token"].as_str().unwrap().to_owned();
    assert_ne!(rotated["refresh_token"], refresh.as_str());
    assert_eq!(
        call_tool(base, &new_access, &session, "echo")
            .await
            .status(),
        StatusCode::OK
    );
    let replay = post_form(
        &token_url,
        client,
        &[("grant_type", "refresh_token"), ("refresh_token", &refresh)],
    )
    .await;
    assert_eq!(replay.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        replay.json::<Value>().await.unwrap()["error"],
        "invalid_grant"
    );
    let after_replay = call_tool(base, &new_access, &session, "echo").await;
    assert_eq!(after_replay.status(), StatusCode::UNAUTHORIZED);
    assert!(www_authenticate(&after_replay).contains(r#"error="invalid_token""#));
    let rotated_refresh = post_form(
        &token_url,
        client,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", rotated["refresh_token"].as_str().unwrap()),
        ],
    )
    .await;
    assert_eq!(
        rotated_refresh.status(),
        StatusCode::BAD_REQUEST,
        "the family is revoked"
    );

    // Step up to read+write: the write tool works; after revocation the token is refused.
    let (query, verifier) = authorize(
        &authorize_url,
        &client_id,
        Some("read write"),
        Some(&resource),
    )
    .await;
    let tokens: Value = exchange(&token_url, client, &query["code"], &verifier, None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(tokens["scope"], "read write");
    let writer = tokens["access_token"].as_str().unwrap();
    let session = mcp_session(base, writer).await;
    let admin = call_tool(base, writer, &session, "admin_tool").await;
    assert_eq!(admin.status(), StatusCode::OK);
    let revoked = post_form(&revoke_url, client, &[("token", writer)]).await;
    assert_eq!(revoked.status(), StatusCode::OK);
    let after_revoke = call_tool(base, writer, &session, "echo").await;
    assert_eq!(after_revoke.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        www_authenticate(&after_revoke),
        format!(
            r#"Bearer error="invalid_token", scope="read", resource_metadata="{prm_url}", error_description="unknown, expired or revoked token""#
        )
    );

    let stats = stats(base).await;
    assert_eq!(stats["registrations"], 1, "{stats}");
    assert_eq!(stats["authorizations"], 3, "{stats}");
    assert_eq!(stats["token_grants"], 2, "{stats}");
    assert_eq!(stats["refreshes"], 1, "{stats}");
    assert_eq!(stats["refresh_replays"], 1, "{stats}");
    assert_eq!(stats["revocations"], 1, "{stats}");
    assert_eq!(stats["forbidden"], 1, "{stats}");
    assert_eq!(stats["grants_without_resource"], 0, "{stats}");
    assert_eq!(stats["last_authorize"]["resource"], resource.as_str());
}

/// A client id metadata document served on loopback; the AS fetches it at each
/// authorization and treats the client as public.
#[tokio::test]
async fn a_cimd_client_is_fetched_and_public() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client_id = format!("http://{}/client.json", listener.local_addr().unwrap());
    let document = json!({
        "client_id": client_id,
        "client_name": "oauth-test",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let app = axum::Router::new().route(
        "/client.json",
        axum::routing::get(move || {
            let document = document.clone();
            async move { axum::Json(document) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });

    let fixture =
        HttpUpstream::fixture_with(&["--oauth", "--cimd", "--no-dcr", "--token-auth", "none"])
            .await;
    let base = fixture.base.as_str();
    let (_, metadata) = get_json(&format!("{base}/.well-known/oauth-authorization-server")).await;
    assert_eq!(metadata["client_id_metadata_document_supported"], true);
    assert!(
        metadata.get("registration_endpoint").is_none(),
        "{metadata}"
    );
    let register = http()
        .post(format!("{base}/register"))
        .json(&json!({"redirect_uris": [REDIRECT]}))
        .send()
        .await
        .unwrap();
    assert_eq!(register.status(), StatusCode::NOT_FOUND);

    let (query, verifier) = authorize(
        &format!("{base}/authorize"),
        &client_id,
        None,
        Some(&format!("{base}/mcp")),
    )
    .await;
    let granted = exchange(
        &format!("{base}/token"),
        ClientAuth::Public(&client_id),
        &query["code"],
        &verifier,
        None,
    )
    .await;
    assert_eq!(granted.status(), StatusCode::OK);
    let tokens: Value = granted.json().await.unwrap();
    assert_eq!(tokens["scope"], "read", "no scope asked: the first one");
    mcp_session(base, tokens["access_token"].as_str().unwrap()).await;

    // A document that does not list the redirect URI: refused without redirecting.
    let unknown = http()
        .get(format!(
            "{base}/authorize?{}",
            form(&[
                ("response_type", "code"),
                ("client_id", &client_id),
                ("redirect_uri", "http://127.0.0.1:9/other"),
                ("code_challenge", "x"),
                ("code_challenge_method", "S256"),
            ])
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::BAD_REQUEST);
    let stats = stats(base).await;
    assert_eq!(stats["cimd_fetches"], 2, "{stats}");
    assert_eq!(stats["registrations"], 0, "{stats}");
}

/// Each discovery branch answers where the flags put it, and nowhere else.
#[tokio::test]
async fn each_discovery_variant_is_reachable() {
    let prm_path = "/.well-known/oauth-protected-resource/mcp";
    let prm_root = "/.well-known/oauth-protected-resource";
    let oauth_md = "/.well-known/oauth-authorization-server";
    let oidc_md = "/.well-known/openid-configuration";
    // (flags, documents served, documents absent, header carries resource_metadata)
    type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [&'a str], bool);
    let cases: &[Case] = &[
        (&[], &[prm_path, oauth_md], &[prm_root, oidc_md], true),
        (
            &["--oauth-metadata", "root", "--as-metadata", "oidc"],
            &[prm_root, oidc_md],
            &[prm_path, oauth_md],
            true,
        ),
        (&["--no-header-metadata"], &[prm_path], &[prm_root], false),
        (
            &["--oauth-metadata", "none", "--as-metadata", "none"],
            &[],
            &[prm_path, prm_root, oauth_md, oidc_md],
            false,
        ),
    ];
    for (flags, served, absent, header_metadata) in cases {
        let mut args = vec!["--oauth"];
        args.extend_from_slice(flags);
        let fixture = HttpUpstream::fixture_with(&args).await;
        let base = fixture.base.as_str();
        for path in *served {
            let (status, doc) = get_json(&format!("{base}{path}")).await;
            assert_eq!(status, StatusCode::OK, "{flags:?} {path}");
            assert!(
                doc["resource"] == format!("{base}/mcp") || doc["issuer"] == base,
                "{doc}"
            );
        }
        for path in *absent {
            let (status, _) = get_json(&format!("{base}{path}")).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{flags:?} {path}");
        }
        let challenge =
            www_authenticate(&mcp_post(base, None, None, json!({"jsonrpc": "2.0", "id": 1})).await);
        assert!(challenge.contains(r#"scope="read""#), "{challenge}");
        assert_eq!(
            challenge.contains("resource_metadata="),
            *header_metadata,
            "{flags:?}: {challenge}"
        );
    }
}

/// The 2025-03-26 fallback: no metadata anywhere, the default endpoints on the MCP origin,
/// a pre-registered client with client_secret_post, no resource parameter; and a short
/// access token lifetime.
#[tokio::test]
async fn default_endpoints_a_preregistered_client_and_expiry() {
    let fixture = HttpUpstream::fixture_with(&[
        "--oauth",
        "--oauth-metadata",
        "none",
        "--as-metadata",
        "none",
        "--preregistered",
        "fixed-client:fixed-secret",
        "--token-auth",
        "client_secret_post",
        "--access-ttl",
        "1",
    ])
    .await;
    let base = fixture.base.as_str();
    let client = ClientAuth::Post("fixed-client", "fixed-secret");
    let (query, verifier) =
        authorize(&format!("{base}/authorize"), "fixed-client", None, None).await;
    let basic = exchange(
        &format!("{base}/token"),
        ClientAuth::Basic("fixed-client", "fixed-secret"),
        &query["code"],
        &verifier,
        None,
    )
    .await;
    assert_eq!(
        basic.status(),
        StatusCode::UNAUTHORIZED,
        "only client_secret_post"
    );
    let (query, verifier) =
        authorize(&format!("{base}/authorize"), "fixed-client", None, None).await;
    let granted = exchange(
        &format!("{base}/token"),
        client,
        &query["code"],
        &verifier,
        None,
    )
    .await;
    assert_eq!(granted.status(), StatusCode::OK);
    let tokens: Value = granted.json().await.unwrap();
    assert_eq!(tokens["expires_in"], 1);
    let access = tokens["access_token"].as_str().unwrap();
    mcp_session(base, access).await;

    // DCR still answers at the default /register.
    let registered = http()
        .post(format!("{base}/register"))
        .json(&json!({"redirect_uris": [REDIRECT]}))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), StatusCode::CREATED);

    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let expired = mcp_post(
        base,
        Some(access),
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert_eq!(expired.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        www_authenticate(&expired),
        r#"Bearer error="invalid_token", scope="read", error_description="unknown, expired or revoked token""#
    );
    let stats = stats(base).await;
    assert_eq!(stats["grants_without_resource"], 1, "{stats}");
    assert_eq!(stats["prm_fetches"], 0, "{stats}");
}

/// The reference Python SDK's OAuth client (tests/clients/oauth_client.py) against the
/// fixture from nothing: discovery, DCR, PKCE authorization, the MCP calls, and a step-up to
/// the write scope on the 403.
#[tokio::test]
async fn the_python_sdk_oauth_client_authorizes_and_steps_up() {
    let fixture = HttpUpstream::fixture_with(&["--oauth"]).await;
    let base = fixture.base.as_str();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/oauth_client.py");
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::process::Command::new(crate::gateway::python_sdk())
            .arg(script)
            .arg(format!("{base}/mcp"))
            .output(),
    )
    .await
    .expect("the Python client finishes within 60 s")
    .unwrap();
    assert!(
        output.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(seen["echo"], "from python", "{seen}");
    assert_eq!(seen["admin"], "admin", "{seen}");
    assert_eq!(seen["final_scope"], "read write", "{seen}");
    assert_eq!(seen["redirects"], json!([302, 302]), "{seen}");
    assert_eq!(seen["iss"], json!([base, base]), "{seen}");
    let stats = stats(base).await;
    assert_eq!(
        stats["registrations"], 1,
        "one registration, reused for the step-up: {stats}"
    );
    assert_eq!(stats["token_grants"], 2, "{stats}");
    assert_eq!(stats["forbidden"], 1, "{stats}");
    assert_eq!(stats["grants_without_resource"], 0, "{stats}");
    assert_eq!(stats["last_authorize"]["scope"], "read write", "{stats}");
}
