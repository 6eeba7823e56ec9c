//! Upstreams that serve the tasks extension themselves (`mcp-fixture … --serve-tasks`,
//! rmcp's task manager): the pool declares the extension to them and follows the tasks
//! they make, so a tool its server runs only as a task answers a plain REST call, a
//! task's question reaches the call's user, and a cancel reaches the server's task. (The
//! gateway's side, against the suite's `tasks-*` scenarios: `conformance.rs`.)

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::elicitation::next_question;
use crate::helpers::{TestApp, spawn_pool_app};
use crate::tasks::{call_async, ended, fixture_counter};
use crate::upstreams::{eventually, fixture_binary};

/// User `u`'s server `tasks`: the stdio fixture serving tasks (a 2025-11-25 session, the
/// extension declared per request).
async fn task_serving_server(app: &TestApp) -> String {
    app.create_preset_ok(json!({
        "name": "serving",
        "command": fixture_binary(),
        "args": ["stdio", "--serve-tasks"],
    }))
    .await;
    app.create_server_ok("u", json!({"name": "tasks", "preset": "serving"}))
        .await
}

/// The tasks the fixture runs now.
async fn servers_open_tasks(app: &TestApp, server: &str) -> String {
    fixture_counter(app, "u", server, "tasks").await
}

#[tokio::test]
async fn a_tool_its_server_runs_only_as_a_task_answers_a_plain_rest_call() {
    let app = spawn_pool_app().await;
    let server = task_serving_server(&app).await;

    // `failing_job` is a task or nothing: a client that does not declare the extension
    // gets -32021 from the server. The pool declares it and waits for the task's end.
    let failed = app.call("u", &server, "failing_job", json!({})).await;
    assert_eq!(failed.status, StatusCode::OK, "{}", failed.text);
    assert_eq!(failed.body["isError"], true, "{}", failed.text);
    assert_eq!(
        failed.body["content"][0]["text"], "the job failed",
        "{}",
        failed.text
    );

    let computed = app
        .call(
            "u",
            &server,
            "slow_compute",
            json!({"seconds": 0.3, "label": "report"}),
        )
        .await;
    assert_eq!(
        computed.body["content"][0]["text"], "computed report in 0.3 s",
        "{}",
        computed.text
    );

    // A task that fails is the call's error, in the server's words.
    let crashed = app
        .call("u", &server, "protocol_error_job", json!({}))
        .await;
    assert!(
        crashed.text.contains("the job crashed"),
        "{}: {}",
        crashed.status,
        crashed.text
    );
    assert!(!crashed.text.contains("::"), "{}", crashed.text);
}

#[tokio::test]
async fn a_servers_task_asks_the_calls_user_and_goes_on_with_the_answer() {
    let app = spawn_pool_app().await;
    let server = task_serving_server(&app).await;
    let mut events = app.events("u").await;

    let call = app.call(
        "u",
        &server,
        "confirm_delete",
        json!({"filename": "report.txt"}),
    );
    let answering = async {
        let question = next_question(&mut events).await;
        assert_eq!(question["message"], "Delete report.txt?", "{question}");
        assert_eq!(question["serverId"], server.as_str(), "{question}");
        let id = question["id"].as_str().unwrap();
        let answered = app
            .user(
                "u",
                Method::POST,
                &format!("/api/elicitations/{id}"),
                Some(json!({"action": "accept", "content": {"confirm": true}})),
            )
            .await;
        assert!(answered.status.is_success(), "{}", answered.text);
    };
    let (called, ()) = tokio::join!(call, answering);
    assert_eq!(
        called.body["content"][0]["text"], "deleted report.txt",
        "{}",
        called.text
    );
}

#[tokio::test]
async fn cancelling_a_task_cancels_the_task_its_server_made() {
    let app = spawn_pool_app().await;
    let server = task_serving_server(&app).await;

    let started = call_async(&app, "u", &server, "slow_compute", json!({"seconds": 60})).await;
    assert_eq!(started.status, StatusCode::ACCEPTED, "{}", started.text);
    let id = started.body["taskId"].as_str().unwrap().to_owned();
    eventually("the server made a task of the call", || async {
        servers_open_tasks(&app, &server).await == "1"
    })
    .await;

    let cancelled = app
        .user("u", Method::DELETE, &format!("/api/tasks/{id}"), None)
        .await;
    assert_eq!(cancelled.body["status"], "cancelled", "{}", cancelled.text);
    eventually("the server's task ended too", || async {
        servers_open_tasks(&app, &server).await == "0"
    })
    .await;
    // And it stays cancelled here.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let task: Value = app
        .user("u", Method::GET, &format!("/api/tasks/{id}"), None)
        .await
        .body;
    assert_eq!(task["status"], "cancelled", "{task}");
}

/// The pool follows a task its server runs; the service restarting meanwhile does not end
/// it: the restarted service (or another instance) follows it on from the row, which names
/// the server's own task. (A task the service itself ran is failed by a restart.)
#[tokio::test]
async fn a_task_its_server_runs_outlives_a_restart_of_the_service() {
    let upstream = crate::upstreams::HttpUpstream::fixture_with(&["--serve-tasks"]).await;
    let app = spawn_pool_app().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "tasks", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    let started = call_async(
        &app,
        "u",
        &server,
        "slow_compute",
        json!({"seconds": 3, "label": "report"}),
    )
    .await;
    assert_eq!(started.status, StatusCode::ACCEPTED, "{}", started.text);
    let id = started.body["taskId"].as_str().unwrap().to_owned();
    eventually("the server made a task of the call", || async {
        servers_open_tasks(&app, &server).await == "1"
    })
    .await;

    let app = app.restart().await;

    let last = ended(&app, "u", &id).await;
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(
        last["result"]["content"][0]["text"], "computed report in 3 s",
        "{last}"
    );
}
