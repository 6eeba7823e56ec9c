//! `/openapi.json` and `/docs`: the document covers every route, matches the README's route
//! table, and every operation in it is served.

use std::collections::BTreeSet;

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::{ADMIN_KEY, spawn_app, spawn_app_with};

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// `(METHOD, path)` of every operation in the document.
fn operations(spec: &Value) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for method in METHODS {
            if item.get(method).is_some() {
                found.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    found
}

/// `(METHOD, path)` of every row of the README's route table (`GET/POST` rows give two;
/// `*` means the operations of the MCP endpoint, which the document lists as POST).
fn readme_routes() -> BTreeSet<(String, String)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let mut routes = BTreeSet::new();
    for line in readme.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[2].starts_with("`/") {
            continue;
        }
        let path = cells[2].trim_matches('`');
        let path = path.split(['?', '[']).next().unwrap().to_owned();
        for method in cells[1].split('/') {
            let method = if method == "*" { "POST" } else { method };
            routes.insert((method.to_owned(), path.clone()));
        }
    }
    routes
}

#[tokio::test]
async fn the_document_lists_every_route_in_the_readme_and_nothing_else() {
    let app = spawn_app().await;
    let reply = app
        .send(Method::GET, "/openapi.json", None, None, None)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let spec = reply.body;
    assert!(
        spec["openapi"].as_str().unwrap().starts_with("3."),
        "{}",
        spec["openapi"]
    );

    let documented = operations(&spec);
    let mut readme = readme_routes();
    // The document itself and its page are routes, not operations in it.
    assert!(readme.remove(&("GET".into(), "/openapi.json".into())));
    assert!(readme.remove(&("GET".into(), "/docs".into())));
    // So is the console's page.
    assert!(readme.remove(&("GET".into(), "/console".into())));
    let undocumented: Vec<_> = readme.difference(&documented).collect();
    let unlisted: Vec<_> = documented.difference(&readme).collect();
    assert!(
        undocumented.is_empty() && unlisted.is_empty(),
        "in the README but not in /openapi.json: {undocumented:?}; \
         in /openapi.json but not in the README: {unlisted:?}"
    );

    // Every operation says who may call it and what its errors look like.
    for (method, path) in &documented {
        let operation = &spec["paths"][path][method.to_lowercase()];
        assert!(
            operation["responses"]["4XX"]["content"]["application/json"].is_object(),
            "{method} {path} documents no error body"
        );
        // The OAuth callback's credential is its state; the client metadata document is
        // fetched by authorization servers; the console's sign-in takes a key in its body,
        // then its own cookie.
        let public = [
            "/healthz",
            "/readyz",
            "/metrics",
            "/oauth/callback",
            "/oauth/client-metadata.json",
            "/console/session",
        ]
        .contains(&path.as_str());
        assert_eq!(
            operation["security"].is_array(),
            !public,
            "{method} {path}: security"
        );
        if path.starts_with("/api/") {
            let parameters = operation["parameters"].as_array().unwrap();
            assert!(
                parameters
                    .iter()
                    .any(|p| p["name"] == "X-User-Id" && p["in"] == "header"),
                "{method} {path} lacks X-User-Id"
            );
        }
    }
}

#[tokio::test]
async fn every_documented_operation_is_served() {
    let app = spawn_app().await;
    let spec = app
        .send(Method::GET, "/openapi.json", None, None, None)
        .await
        .body;
    for (method, path) in operations(&spec) {
        // Any value fills the path's parameters: what matters is that a handler answers.
        let concrete = path
            .split('/')
            .map(|part| if part.starts_with('{') { "x" } else { part })
            .collect::<Vec<_>>()
            .join("/");
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let response = app
            .request(method.clone(), &concrete)
            .bearer_auth(app.service_key.clone())
            .header("X-User-Id", "u")
            .send()
            .await
            .unwrap();
        let status = response.status();
        let is_stream = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
        // An event stream never ends: its status is the answer.
        let body: Value = if is_stream {
            Value::Null
        } else {
            response.json().await.unwrap_or(Value::Null)
        };
        let code = body["error"]["code"].as_str().unwrap_or_default();
        assert!(
            !matches!(code, "NOT_FOUND" | "METHOD_NOT_ALLOWED"),
            "{method} {concrete}: {status} {body}"
        );
    }
}

#[tokio::test]
async fn the_docs_page_renders_the_document_without_a_key() {
    let app = spawn_app().await;
    let page = app.send_raw(app.request(Method::GET, "/docs/")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.text.contains("swagger-ui"), "{}", page.text);
    let config = app
        .send_raw(app.request(Method::GET, "/docs/swagger-initializer.js"))
        .await;
    assert_eq!(config.status, StatusCode::OK);
    assert!(config.text.contains("/openapi.json"), "{}", config.text);
}

/// schemathesis, installed by `tests/setup.sh` beside the Python MCP SDK.
fn schemathesis() -> std::path::PathBuf {
    let st = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/.venv/bin/st");
    assert!(
        st.exists(),
        "schemathesis is not installed: run tests/setup.sh (or .ci/run)"
    );
    st
}

/// Requests generated from the document, valid and invalid: no answer may be a 5xx, and
/// every answer must match the document (status, content type, headers, body schema); what
/// the document forbids must be refused. (Not checked: that every schema-valid request is
/// accepted. The document cannot say everything the handlers check, e.g. which fields go
/// with which transport.)
#[tokio::test]
async fn schemathesis_finds_nothing_the_document_does_not_allow() {
    let app = spawn_app_with(|settings| {
        // Fuzzed requests come from many generated user ids at full speed.
        settings.limits.tool_calls_per_minute = 0;
        settings.limits.chats_per_minute = 0;
    })
    .await;
    let report = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(schemathesis())
        .current_dir(report.path())
        .args([
            "run",
            &format!("{}/openapi.json", app.address),
            "--header",
            &format!("Authorization: Bearer {ADMIN_KEY}"),
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            "15",
            "--seed",
            "20261123",
            // One worker: hypothesis describing its filters from two threads trips a CPython
            // 3.11.7 bug ("AST constructor recursion depth mismatch").
            "--workers",
            "1",
            // An event stream never ends, so no answer could be checked.
            "--exclude-path",
            "/api/events",
            "--exclude-path",
            "/admin/events",
            // Revoking keys at random would, sooner or later, revoke the run's own key.
            "--exclude-operation-id",
            "revoke",
            "--request-timeout",
            "20",
            "--generation-database",
            "none",
            "--no-color",
            "--output-truncate",
            "false",
        ])
        .kill_on_drop(true)
        .output()
        .await
        .expect("schemathesis runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found problems:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
