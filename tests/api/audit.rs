//! The audit log records every tool call on every path, exactly once, with who asked,
//! the door, the outcome and what the redaction rule keeps; rows survive the process
//! being killed; the log filters by server name and exports NDJSON and CSV (issue 40).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use uuid::Uuid;

use crate::chat::ChatStream;
use crate::helpers::{ADMIN_KEY, Reply, TestApp, as_user, spawn_pool_app, spawn_pool_app_with};
use crate::llm_script::{ScriptedLlm, openai_text, openai_tool_calls};
use crate::upstreams::eventually;

/// Every row of user `u`, newest first.
async fn rows_of(app: &TestApp, query: &str) -> Vec<Value> {
    let page = app
        .admin(
            Method::GET,
            &format!("/admin/audit?userId=u&pageSize=200{query}"),
            None,
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    page.body["entries"].as_array().unwrap().clone()
}

/// The body of an admin GET (an export).
async fn download(app: &TestApp, path: &str) -> String {
    app.request(Method::GET, path)
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The rows whose kept arguments hold `marker`, with their details.
async fn rows_marked(app: &TestApp, marker: &str) -> Vec<Value> {
    let mut marked = Vec::new();
    for row in rows_of(app, "").await {
        let detail = app
            .admin(
                Method::GET,
                &format!("/admin/audit/{}", row["id"].as_str().unwrap()),
                None,
            )
            .await;
        if detail.body["arguments"]
            .as_str()
            .is_some_and(|a| a.contains(marker))
        {
            marked.push(detail.body);
        }
    }
    marked
}

/// The id of the first key of `role`.
pub(crate) async fn key_id(app: &TestApp, role: &str) -> Value {
    let keys = app.admin(Method::GET, "/admin/keys", None).await;
    keys.body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["role"] == role)
        .unwrap_or_else(|| panic!("a {role} key: {}", keys.text))["id"]
        .clone()
}

fn call(name: &str, arguments: Value) -> rmcp::model::CallToolRequestParams {
    let mut params = rmcp::model::CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    params
}

#[tokio::test]
async fn a_call_on_every_path_leaves_exactly_one_row_saying_who_and_how() {
    let llm = ScriptedLlm::openai().await;
    let app = spawn_pool_app_with(|settings| {
        llm.configure(settings, "scripted", &["plain-model"]);
        settings.xiaozhi.reconnect_min_secs = 1;
        settings.xiaozhi.reconnect_max_secs = 2;
    })
    .await;
    // `echo` runs at once; `add` waits for approval.
    let fx = app.fixture_for_a1(&["echo"]).await;
    let service_key = key_id(&app, "service").await;
    let admin_key = key_id(&app, "admin").await;

    // REST, with the service key, and with an admin's key acting for the user.
    let rest = app.call("u", &fx, "echo", json!({"text": "by-rest"})).await;
    assert_eq!(rest.status, StatusCode::OK, "{}", rest.text);
    let by_admin = app
        .send(
            Method::POST,
            &format!("/api/mcp-servers/{fx}/tools/echo/call"),
            Some(ADMIN_KEY),
            Some("u"),
            Some(json!({"arguments": {"text": "by-admin"}})),
        )
        .await;
    assert_eq!(by_admin.status, StatusCode::OK, "{}", by_admin.text);

    // A backend's model call submitted to the REST API, auto-approved.
    let message = Uuid::new_v4().to_string();
    let submitted = app
        .submit_calls(
            "u",
            &message,
            "?wait=20",
            json!([{"id": "c1", "name": "mcp__fx__echo", "arguments": {"text": "by-message"}}]),
        )
        .await;
    assert_eq!(submitted.status, StatusCode::OK, "{}", submitted.text);

    // The agent loop.
    llm.push(openai_tool_calls(
        "Let me echo.",
        &[("call_1", "mcp__fx__echo", json!({"text": "by-agent"}))],
    ));
    llm.push(openai_text("Done."));
    let mut chat = ChatStream::open(
        &app,
        "u",
        json!({"assistantId": "a1", "message": "echo",
               "model": {"provider": "scripted", "name": "gpt-test"}}),
    )
    .await;
    let (end, _) = chat.finish().await;
    assert_eq!(end, "message.completed");

    // The gateway: a call that runs at once and one the user approves.
    let token = app.gateway_token("u", "a1").await;
    let client = ()
        .serve(StreamableHttpClientTransport::from_config(
            app.gateway_client_config("a1", &token),
        ))
        .await
        .unwrap();
    client
        .call_tool(call("fx__echo", json!({"text": "by-gateway"})))
        .await
        .unwrap();
    let peer = client.peer().clone();
    let parked = tokio::spawn(async move {
        peer.call_tool(call(
            "fx__add",
            json!({"a": 1, "b": 2, "note": "by-approval"}),
        ))
        .await
    });
    let open = || async {
        let overview = app.admin(Method::GET, "/admin/users/u", None).await;
        overview.body["openToolCalls"][0].clone()
    };
    eventually("the gateway's call is parked", || async {
        open().await["toolCalls"][0]["status"] == "pending"
    })
    .await;
    let pending = open().await;
    app.confirm_ok(
        pending["messageId"].as_str().unwrap(),
        pending["toolCalls"][0]["id"].as_str().unwrap(),
        true,
    )
    .await;
    parked.await.unwrap().unwrap();
    client.cancel().await.unwrap();

    // gRPC.
    let mut grpc = crate::grpc::client(&app).await;
    grpc.call_tool(crate::grpc::as_user(
        &app,
        "u",
        mcp_pool::grpc::proto::CallToolRequest {
            server_id: fx.clone(),
            tool_name: "echo".into(),
            arguments_json: json!({"text": "by-grpc"}).to_string(),
            ..Default::default()
        },
    ))
    .await
    .unwrap();

    // A Xiaozhi device.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!(
        "ws://127.0.0.1:{}/mcp/?token=t",
        listener.local_addr().unwrap().port()
    );
    let put = app
        .user(
            "u",
            Method::PUT,
            "/api/assistants/a1/xiaozhi",
            Some(json!({"endpoint": endpoint})),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    let bridge = put.body["id"].clone();
    let mut socket = crate::xiaozhi::accept(&listener).await;
    crate::xiaozhi::initialize(&mut socket).await;
    let echoed = crate::xiaozhi::request(
        &mut socket,
        2,
        "tools/call",
        json!({"name": "fx.echo", "arguments": {"text": "by-xiaozhi"}}),
    )
    .await;
    assert_eq!(echoed["result"]["content"][0]["text"], "by-xiaozhi");

    let token_id = {
        let tokens = app
            .user("u", Method::GET, "/api/assistants/a1/gateway-tokens", None)
            .await;
        tokens.body["tokens"][0]["id"].clone()
    };
    for (marker, via, key, by_admin) in [
        ("by-rest", "rest", service_key.clone(), false),
        ("by-admin", "rest", admin_key.clone(), true),
        ("by-message", "chat", service_key.clone(), false),
        ("by-agent", "chat", service_key.clone(), false),
        ("by-gateway", "gateway", token_id.clone(), false),
        ("by-approval", "gateway", token_id.clone(), false),
        ("by-grpc", "grpc", service_key.clone(), false),
        ("by-xiaozhi", "xiaozhi", bridge.clone(), false),
    ] {
        let rows = rows_marked(&app, marker).await;
        assert_eq!(rows.len(), 1, "{marker}: exactly one row: {rows:?}");
        let row = &rows[0];
        assert_eq!(row["via"], via, "{marker}: {row}");
        assert_eq!(row["keyId"], key, "{marker}: {row}");
        assert_eq!(row["byAdmin"], by_admin, "{marker}: {row}");
        assert_eq!(row["outcome"], "done", "{marker}: {row}");
        assert_eq!(row["serverName"], "fx", "{marker}: {row}");
        assert!(row["latencyMs"].is_i64(), "{marker}: {row}");
        assert!(row["instanceId"].is_string(), "{marker}: {row}");
        assert!(
            row["result"].as_str().is_some_and(|r| !r.is_empty()),
            "{marker}: the result is kept: {row}"
        );
    }
    // Calls of the message paths name their message.
    let from_message = &rows_marked(&app, "by-message").await[0];
    assert_eq!(from_message["messageId"], message.as_str());
}

#[tokio::test]
async fn a_failed_call_says_why_and_secrets_never_reach_the_row() {
    let app = spawn_pool_app_with(|s| s.audit.max_detail_bytes = 200).await;
    let fx = app.fixture_for_a1(&["echo"]).await;
    let missing = app.call("u", &fx, "nope", json!({})).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.text);
    let refused = app
        .call(
            "u",
            &fx,
            "echo",
            json!({"text": 5, "apiKey": "sk-do-not-keep"}),
        )
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    let long = app
        .call(
            "u",
            &fx,
            "echo",
            json!({"text": "x".repeat(5000), "password": "hunter2"}),
        )
        .await;
    assert_eq!(long.status, StatusCode::OK, "{}", long.text);

    let failed = rows_of(&app, "&outcome=error").await;
    assert_eq!(failed.len(), 2, "{failed:?}");
    let not_found = failed.iter().find(|r| r["toolName"] == "nope").unwrap();
    assert_eq!(not_found["errorCode"], "TOOL_NOT_FOUND");
    assert!(
        not_found["errorMessage"]
            .as_str()
            .is_some_and(|m| m.contains("nope") && !m.contains("::")),
        "{not_found}"
    );
    let invalid = failed.iter().find(|r| r["toolName"] == "echo").unwrap();
    assert_eq!(invalid["errorCode"], "INVALID_ARGUMENTS", "{invalid}");

    let export = download(&app, "/admin/audit?userId=u&format=ndjson").await;
    assert!(!export.contains("sk-do-not-keep"), "{export}");
    assert!(!export.contains("hunter2"), "{export}");
    assert!(export.contains("[redacted]"), "{export}");
    let done: Value = export
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|row| row["outcome"] == "done")
        .unwrap();
    let arguments = done["arguments"].as_str().unwrap();
    assert!(arguments.len() < 300, "cut to the limit: {arguments}");
    assert!(arguments.contains("[cut: "), "{arguments}");
    let result = done["result"].as_str().unwrap();
    assert!(result.contains("[cut: 5000 bytes]"), "{result}");
}

#[tokio::test]
async fn the_log_filters_by_server_name_and_exports_what_the_filter_keeps() {
    let app = spawn_pool_app().await;
    let fx = app.fixture_for_a1(&["echo"]).await;
    let other = app
        .create_server_ok("u", json!({"name": "other", "preset": "fixture"}))
        .await;
    for i in 0..3 {
        app.call("u", &fx, "echo", json!({"text": format!("fx {i}")}))
            .await;
    }
    app.call(
        "u",
        &other,
        "echo",
        json!({"text": "other, \"quoted\", with commas"}),
    )
    .await;

    let named = rows_of(&app, "&server=fx").await;
    assert_eq!(named.len(), 3, "{named:?}");
    assert!(named.iter().all(|r| r["serverName"] == "fx"));
    let by_via = rows_of(&app, "&via=gateway").await;
    assert!(by_via.is_empty(), "{by_via:?}");
    let bad = app
        .admin(Method::GET, "/admin/audit?via=pigeon", None)
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text);
    assert_eq!(bad.code(), "VALIDATION_ERROR");
    let bad = app
        .admin(Method::GET, "/admin/audit?format=xml", None)
        .await;
    assert_eq!(bad.code(), "VALIDATION_ERROR", "{}", bad.text);
    let missing = app
        .admin(
            Method::GET,
            &format!("/admin/audit/{}", Uuid::new_v4()),
            None,
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.code(), "AUDIT_ROW_NOT_FOUND");

    let response = app
        .request(Method::GET, "/admin/audit?server=fx&format=csv")
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/csv")
    );
    assert!(
        response.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .contains("audit.csv")
    );
    let csv = response.text().await.unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4, "a header and three rows: {csv}");
    assert!(lines[0].starts_with("id,createdAt,userId"), "{csv}");
    let all = download(&app, "/admin/audit?userId=u&format=csv").await;
    // The quoted text stays one field of one row.
    assert!(
        all.contains(r#""{""text"":""other, \""quoted\"", with commas""}""#),
        "{all}"
    );
}

/// Rows still in the journal when the process is killed are written by the next start.
#[tokio::test]
async fn rows_of_a_killed_process_are_written_by_the_next_start() {
    let app = spawn_pool_app().await;
    let fx = app.fixture_for_a1(&["echo"]).await;
    // The flusher would not run for ten minutes: the rows are only in the journal.
    let binary = app
        .stop_for_binary(&[("MCP_POOL__AUDIT__FLUSH_MS", "600000")])
        .await;
    let (key, env) = (binary.service_key.clone(), binary.vars());
    let mut first = crate::logging::start_binary(&env).await;
    for i in 0..5 {
        let done = as_user(
            &key,
            Method::POST,
            format!("{}/api/mcp-servers/{fx}/tools/echo/call", first.base),
            Some(json!({"arguments": {"text": format!("before the kill {i}")}})),
        )
        .await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.text);
    }
    first.child.kill().await.unwrap();

    let second = crate::logging::start_binary(&env).await;
    let page: Reply = crate::helpers::into_reply(
        reqwest::Client::new()
            .get(format!("{}/admin/audit?userId=u&tool=echo", second.base))
            .bearer_auth(ADMIN_KEY)
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(page.body["total"], 5, "{}", page.text);
}

/// A row the database could refuse (a name past its column, a NUL the PostgreSQL text
/// type refuses) is made to fit, and never holds up the rows after it.
#[tokio::test]
async fn a_row_with_a_long_or_nul_name_fits_and_holds_up_nothing() {
    let app = spawn_pool_app().await;
    let fx = app.fixture_for_a1(&["echo"]).await;
    let long = "t".repeat(300);
    let missing = app.call("u", &fx, &long, json!({})).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.text);
    let nul = app.call("u", &fx, "bad%00name", json!({})).await;
    let formula = app.call("u", &fx, "=HYPERLINK(1)", json!({})).await;
    assert_eq!(formula.status, StatusCode::NOT_FOUND, "{}", formula.text);
    assert!(nul.status.is_client_error(), "{}", nul.text);
    let fine = app
        .call("u", &fx, "echo", json!({"text": "after them"}))
        .await;
    assert_eq!(fine.status, StatusCode::OK, "{}", fine.text);
    let rows = rows_of(&app, "").await;
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(
        rows.iter().any(|r| r["toolName"] == "t".repeat(256)),
        "{rows:?}"
    );
    assert!(rows.iter().any(|r| r["toolName"] == "badname"), "{rows:?}");

    // Exported to CSV, a cell that a spreadsheet would run is inert, and an export of
    // nothing still has its header.
    let csv = download(&app, "/admin/audit?userId=u&format=csv").await;
    assert!(csv.contains(",'=HYPERLINK(1),"), "{csv}");
    assert!(!csv.contains(",=HYPERLINK"), "{csv}");
    let empty = download(&app, "/admin/audit?userId=nobody&format=csv").await;
    assert!(empty.starts_with("id,createdAt,userId"), "{empty}");
    assert_eq!(empty.lines().count(), 1, "{empty}");
}
