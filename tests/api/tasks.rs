//! Tool calls run as tasks: `Prefer: respond-async` on the REST API and the MCP tasks
//! extension on the gateway, followed, cancelled and failed from outside, across restarts
//! and instances.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, GetTaskResult,
    TaskPayload, TaskStatus,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

use crate::helpers::{Reply, TestApp, spawn_pool_app, spawn_pool_app_with};
use crate::upstreams::eventually;

/// `POST …/tools/{tool}/call` with `Prefer: respond-async`.
pub(crate) async fn call_async(
    app: &TestApp,
    user: &str,
    server: &str,
    tool: &str,
    arguments: Value,
) -> Reply {
    let request = app
        .request(
            Method::POST,
            &format!("/api/mcp-servers/{server}/tools/{tool}/call"),
        )
        .bearer_auth(&app.service_key)
        .header("X-User-Id", user)
        .header("Prefer", "respond-async")
        .json(&json!({ "arguments": arguments }));
    app.send_raw(request).await
}

async fn task(app: &TestApp, user: &str, id: &str) -> Reply {
    app.user(user, Method::GET, &format!("/api/tasks/{id}"), None)
        .await
}

/// The task once it has left `working`.
pub(crate) async fn ended(app: &TestApp, user: &str, id: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..400 {
        last = task(app, user, id).await.body;
        if last["status"] != "working" {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the task did not end within 20 s: {last}");
}

async fn cancellations_seen(app: &TestApp, user: &str, server: &str) -> String {
    fixture_counter(app, user, server, "cancellations").await
}

/// Waits until a `slow` call has reached the fixture: a call cancelled before then is
/// never seen cancelled by the server (the request was not sent yet).
async fn until_running(app: &TestApp, user: &str, server: &str) {
    eventually("the call reached the server", || async {
        fixture_counter(app, user, server, "running").await == "1"
    })
    .await;
}

pub(crate) async fn fixture_counter(
    app: &TestApp,
    user: &str,
    server: &str,
    counter: &str,
) -> String {
    let read = app
        .user(
            user,
            Method::POST,
            &format!("/api/mcp-servers/{server}/resources/read"),
            Some(json!({"uri": format!("fixture://{counter}")})),
        )
        .await;
    read.body["contents"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_rest_call_that_prefers_async_answers_202_with_a_task_that_any_request_can_follow() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    let mut events = app.events("u").await;

    let started = call_async(&app, "u", &server, "slow", json!({"ms": 800})).await;
    assert_eq!(started.status, StatusCode::ACCEPTED, "{}", started.text);
    let id = started.body["taskId"].as_str().unwrap().to_owned();
    assert_eq!(
        started.headers["location"],
        format!("/api/tasks/{id}").as_str()
    );
    assert_eq!(started.headers["preference-applied"], "respond-async");
    assert_eq!(started.body["status"], "working", "{}", started.text);
    assert_eq!(started.body["server"], "fx");
    assert_eq!(started.body["tool"], "slow");
    assert_eq!(started.body["origin"], "rest");
    assert_eq!(started.body["ttlMs"], 3_600_000);

    let early = app
        .user("u", Method::GET, &format!("/api/tasks/{id}/result"), None)
        .await;
    assert_eq!(early.status, StatusCode::CONFLICT, "{}", early.text);
    assert_eq!(early.code(), "TASK_NOT_FINISHED");

    let done = ended(&app, "u", &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "slept 800 ms");
    assert_eq!(done["result"]["isError"], false);
    let result = app
        .user("u", Method::GET, &format!("/api/tasks/{id}/result"), None)
        .await;
    assert_eq!(result.status, StatusCode::OK, "{}", result.text);
    assert_eq!(result.body["content"][0]["text"], "slept 800 ms");

    // The event stream heard it end.
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !(seen.contains("event: task.updated") && seen.contains("\"status\":\"completed\"")) {
        use futures::StreamExt;
        let chunk = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("a task.updated event within 20 s")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains(&id), "{seen}");

    let listed = app.user("u", Method::GET, "/api/tasks", None).await;
    assert_eq!(
        listed.body["tasks"][0]["taskId"],
        id.as_str(),
        "{}",
        listed.text
    );
    // Nobody else sees it; a made-up id is no task either.
    for (user, id) in [("mallory", id.as_str()), ("u", "not-a-task")] {
        let other = task(&app, user, id).await;
        assert_eq!(other.status, StatusCode::NOT_FOUND, "{}", other.text);
        assert_eq!(other.code(), "TASK_NOT_FOUND");
    }
    let bad = app.user("u", Method::GET, "/api/tasks?limit=0", None).await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text);
}

#[tokio::test]
async fn a_call_that_fails_fails_its_task_with_the_reason_and_a_tool_error_is_a_result() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;

    let missing = call_async(&app, "u", &server, "no_such_tool", json!({})).await;
    assert_eq!(missing.status, StatusCode::ACCEPTED, "{}", missing.text);
    let failed = ended(&app, "u", missing.body["taskId"].as_str().unwrap()).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["data"]["code"], "TOOL_NOT_FOUND");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no_such_tool"),
        "{failed}"
    );
    let result = app
        .user(
            "u",
            Method::GET,
            &format!(
                "/api/tasks/{}/result",
                missing.body["taskId"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(result.status, StatusCode::CONFLICT);
    assert_eq!(result.code(), "TASK_HAS_NO_RESULT");
    assert!(result.text.contains("no_such_tool"), "{}", result.text);

    let tool_error = call_async(&app, "u", &server, "fail", json!({"message": "nope"})).await;
    let done = ended(&app, "u", tool_error.body["taskId"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], true);
    assert_eq!(done["result"]["content"][0]["text"], "nope");

    // A server that does not exist is refused at once: no task.
    let unknown = call_async(
        &app,
        "u",
        "00000000-0000-0000-0000-000000000000",
        "slow",
        json!({}),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{}", unknown.text);
    assert_eq!(unknown.code(), "MCP_SERVER_NOT_FOUND");
}

#[tokio::test]
async fn cancelling_a_task_stops_its_call_and_the_task_stays_cancelled() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    assert_eq!(cancellations_seen(&app, "u", &server).await, "0");

    let started = call_async(&app, "u", &server, "slow", json!({"ms": 1500})).await;
    let id = started.body["taskId"].as_str().unwrap().to_owned();
    until_running(&app, "u", &server).await;
    let cancelled = app
        .user("u", Method::DELETE, &format!("/api/tasks/{id}"), None)
        .await;
    assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.text);
    assert_eq!(cancelled.body["status"], "cancelled");
    // The server was told, and the call's end (had it come) changed nothing.
    eventually("the server saw the call cancelled", || async {
        cancellations_seen(&app, "u", &server).await == "1"
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let after = task(&app, "u", &id).await;
    assert_eq!(after.body["status"], "cancelled", "{}", after.text);
    assert!(after.body.get("result").is_none(), "{}", after.text);
    let again = app
        .user("u", Method::DELETE, &format!("/api/tasks/{id}"), None)
        .await;
    assert_eq!(again.status, StatusCode::OK, "cancelling twice is no error");
    assert_eq!(again.body["status"], "cancelled");
    let result = app
        .user("u", Method::GET, &format!("/api/tasks/{id}/result"), None)
        .await;
    assert_eq!(result.code(), "TASK_HAS_NO_RESULT", "{}", result.text);
}

#[tokio::test]
async fn a_restart_fails_the_tasks_it_cut_short_and_keeps_the_results_of_the_others() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    let quick = call_async(&app, "u", &server, "echo", json!({"text": "kept"})).await;
    let quick = quick.body["taskId"].as_str().unwrap().to_owned();
    assert_eq!(ended(&app, "u", &quick).await["status"], "completed");
    let long = call_async(&app, "u", &server, "slow", json!({"ms": 60000})).await;
    let long = long.body["taskId"].as_str().unwrap().to_owned();

    let app = app.restart().await;

    let cut = task(&app, "u", &long).await;
    assert_eq!(cut.body["status"], "failed", "{}", cut.text);
    assert_eq!(cut.body["error"]["data"]["code"], "TASK_INSTANCE_STOPPED");
    assert!(
        cut.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stopped before the call ended"),
        "{}",
        cut.text
    );
    let kept = task(&app, "u", &quick).await;
    assert_eq!(kept.body["status"], "completed", "{}", kept.text);
    assert_eq!(kept.body["result"]["content"][0]["text"], "kept");
}

#[tokio::test]
async fn open_tasks_are_limited_per_user() {
    let app = spawn_pool_app_with(|s| s.tasks.max_open_per_user = 1).await;
    let server = app.stdio_fixture_ok("u").await;
    let first = call_async(&app, "u", &server, "slow", json!({"ms": 30000})).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.text);
    let second = call_async(&app, "u", &server, "slow", json!({"ms": 10})).await;
    assert_eq!(
        second.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        second.text
    );
    assert_eq!(second.code(), "TOO_MANY_TASKS");
    assert!(second.text.contains("at most 1"), "{}", second.text);
    let id = first.body["taskId"].as_str().unwrap();
    app.user("u", Method::DELETE, &format!("/api/tasks/{id}"), None)
        .await;
    let third = call_async(&app, "u", &server, "slow", json!({"ms": 10})).await;
    assert_eq!(third.status, StatusCode::ACCEPTED, "{}", third.text);
}

#[tokio::test]
async fn a_task_is_read_and_cancelled_through_another_instance() {
    let app = spawn_pool_app().await;
    let server = app.stdio_fixture_ok("u").await;
    let other = app.another_instance().await;
    // Long enough that a loaded machine cannot end the call before the cancel reaches it.
    let started = call_async(&app, "u", &server, "slow", json!({"ms": 4000})).await;
    let id = started.body["taskId"].as_str().unwrap().to_owned();
    until_running(&app, "u", &server).await;
    let seen = task(&other, "u", &id).await;
    assert_eq!(seen.body["status"], "working", "{}", seen.text);
    let cancelled = other
        .user("u", Method::DELETE, &format!("/api/tasks/{id}"), None)
        .await;
    assert_eq!(cancelled.body["status"], "cancelled", "{}", cancelled.text);
    if app.on_postgres() {
        // The instance running the call heard of it and stopped it.
        eventually("the server saw the call cancelled", || async {
            cancellations_seen(&app, "u", &server).await == "1"
        })
        .await;
    } else {
        // Without notes the call runs to its end, which must not undo the cancel.
        tokio::time::sleep(Duration::from_millis(4300)).await;
    }
    assert_eq!(task(&app, "u", &id).await.body["status"], "cancelled");
}

/// A client of the newest revision that declares the tasks extension.
#[derive(Clone)]
pub(crate) struct TasksClient;

impl rmcp::ClientHandler for TasksClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2026-07-28",
            "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "clientInfo": {"name": "tasks", "version": "1"}
        }))
        .unwrap()
    }
}

/// The same client without the extension.
#[derive(Clone)]
struct PlainClient;

impl rmcp::ClientHandler for PlainClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2026-07-28",
            "capabilities": {},
            "clientInfo": {"name": "plain", "version": "1"}
        }))
        .unwrap()
    }
}

pub(crate) async fn discover<H: rmcp::ClientHandler>(
    app: &TestApp,
    assistant: &str,
    token: &str,
    handler: H,
) -> RunningService<rmcp::RoleClient, H> {
    handler
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(app.gateway_client_config(assistant, token)),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("the gateway serves a 2026-07-28 client")
}

pub(crate) fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    params.arguments = arguments.as_object().cloned();
    params
}

async fn ended_task(client: &rmcp::Peer<rmcp::RoleClient>, id: &str) -> GetTaskResult {
    for _ in 0..400 {
        let got = client.get_task(GetTaskParams::new(id)).await.unwrap();
        if got.task.status().is_terminal() {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the task did not end within 20 s");
}

fn text_of_result(result: &rmcp::model::JsonObject) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_gateway_client_that_declares_tasks_gets_quick_results_inline_and_a_task_for_slow_calls()
{
    let app = spawn_pool_app().await;
    app.fixture_for_a1(&["echo", "slow"]).await;
    let token = app.gateway_token("u", "a1").await;
    let client = discover(&app, "a1", &token, TasksClient).await;

    let quick = client
        .call_tool_once(call("fx__echo", json!({"text": "now"})))
        .await
        .unwrap();
    let CallToolResponse::Complete(quick) = quick else {
        panic!("a quick call is answered inline: {quick:?}")
    };
    assert_eq!(quick.content[0].as_text().unwrap().text, "now");

    let slow = client
        .call_tool_once(call("fx__slow", json!({"ms": 1500})))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = slow else {
        panic!("a slow call becomes a task: {slow:?}")
    };
    let id = created.task.task_id.clone();
    assert_eq!(created.task.status, TaskStatus::Working);
    assert_eq!(created.task.ttl_ms, Some(3_600_000));
    // At once, from the row.
    let working = client.get_task(GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(working.task.status(), TaskStatus::Working);
    let done = ended_task(&client, &id).await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("completed: {done:?}")
    };
    assert_eq!(text_of_result(result), "slept 1500 ms");
    // The user sees it on the REST API too.
    let rest = task(&app, "u", &id).await;
    assert_eq!(rest.body["origin"], "gateway", "{}", rest.text);
    assert_eq!(rest.body["tool"], "fx__slow");

    let long = client
        .call_tool_once(call("fx__slow", json!({"ms": 30000})))
        .await
        .unwrap();
    let CallToolResponse::Task(long) = long else {
        panic!("a task: {long:?}")
    };
    client
        .cancel_task(CancelTaskParams::new(&long.task.task_id))
        .await
        .unwrap();
    let cancelled = client
        .get_task(GetTaskParams::new(&long.task.task_id))
        .await
        .unwrap();
    assert_eq!(cancelled.task.status(), TaskStatus::Cancelled);

    // Another assistant's client of the same user does not see it; a made-up id is
    // invalid params; a client without the extension may not ask.
    app.bind_ok("u", "a2", Vec::<String>::new()).await;
    let token2 = app.gateway_token("u", "a2").await;
    let other = discover(&app, "a2", &token2, TasksClient).await;
    for (peer, task_id) in [(&other, id.as_str()), (&client, "made-up")] {
        let refused = peer
            .get_task(GetTaskParams::new(task_id))
            .await
            .unwrap_err();
        assert!(
            format!("{refused:?}").contains("-32602")
                || format!("{refused}").contains("unknown task"),
            "{refused:?}"
        );
    }
    let plain = discover(&app, "a1", &token, PlainClient).await;
    let refused = plain.get_task(GetTaskParams::new(&id)).await.unwrap_err();
    assert!(format!("{refused:?}").contains("-32021"), "{refused:?}");
    // Its slow calls are answered as before, in one request.
    let inline = plain
        .call_tool_once(call("fx__slow", json!({"ms": 700})))
        .await
        .unwrap();
    assert!(
        matches!(inline, CallToolResponse::Complete(_)),
        "{inline:?}"
    );
}

/// A gateway task-declaring client of user `u`'s assistant `a1` and the task of its call
/// of `fx__add`, which waits for the user's approval.
async fn task_waiting_for_approval(
    app: &TestApp,
) -> (RunningService<rmcp::RoleClient, TasksClient>, String) {
    app.fixture_for_a1(&[]).await;
    let token = app.gateway_token("u", "a1").await;
    let client = discover(app, "a1", &token, TasksClient).await;
    let started = client
        .call_tool_once(call("fx__add", json!({"a": 2, "b": 3})))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = started else {
        panic!("a call waiting for approval becomes a task: {started:?}")
    };
    (client, created.task.task_id.clone())
}

/// The task of a call waiting for approval, once it is `input_required`: its one input
/// request (key, request) and status message.
async fn waiting_for_approval(
    client: &rmcp::Peer<rmcp::RoleClient>,
    id: &str,
) -> (String, Value, String) {
    let mut last = None;
    for _ in 0..200 {
        let got = client.get_task(GetTaskParams::new(id)).await.unwrap();
        if let TaskPayload::InputRequired { input_requests } = &got.task.payload {
            let (key, request) = input_requests.iter().next().expect("one input request");
            let message = got.task.task.status_message.clone().unwrap_or_default();
            return (key.clone(), serde_json::to_value(request).unwrap(), message);
        }
        last = Some(got);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the task did not become input_required: {last:?}")
}

#[tokio::test]
async fn a_gateway_task_waiting_for_approval_is_input_required_until_the_user_approves() {
    let app = spawn_pool_app().await;
    let (client, id) = task_waiting_for_approval(&app).await;
    // It waits for input the client cannot give: a URL-mode question sending a person
    // to where calls are approved, naming the parked call; the status message says it.
    let (_, question, message) = waiting_for_approval(&client, &id).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert_eq!(question["params"]["mode"], "url", "{question}");
    // The tool as the client calls it.
    assert!(
        question["params"]["message"]
            .as_str()
            .unwrap()
            .contains("'fx__add'"),
        "{question}"
    );
    let url = question["params"]["url"].as_str().unwrap();
    assert!(url.ends_with("/console/#/approvals"), "{url}");
    let parked = question["params"]["elicitationId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("waiting for the user's approval") && message.contains(&parked),
        "{message}"
    );
    app.confirm_ok(&parked, "gateway", true).await;
    let done = ended_task(&client, &id).await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("completed: {done:?}")
    };
    assert_eq!(text_of_result(result), "5");
}

/// Answering the approval question does not approve: declining it rejects the call.
#[tokio::test]
async fn a_client_that_declines_the_approval_question_has_the_call_rejected() {
    let app = spawn_pool_app().await;
    let (client, id) = task_waiting_for_approval(&app).await;
    let (key, question, _) = waiting_for_approval(&client, &id).await;
    let parked = question["params"]["elicitationId"]
        .as_str()
        .unwrap()
        .to_owned();
    client
        .update_task(rmcp::model::UpdateTaskParams::new(
            &id,
            [(key, json!({"action": "decline"}))].into_iter().collect(),
        ))
        .await
        .unwrap();
    let done = ended_task(&client, &id).await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("completed with the rejection: {done:?}")
    };
    assert_eq!(result.get("isError"), Some(&json!(true)), "{result:?}");
    assert!(
        text_of_result(result).contains("Declined through the MCP client"),
        "{result:?}"
    );
    // The parked call is settled: nothing is left waiting for the user.
    let record = app
        .user("u", Method::GET, &format!("/api/messages/{parked}"), None)
        .await;
    assert_eq!(
        record.body["toolCalls"][0]["status"], "cancelled",
        "{}",
        record.text
    );
}

/// A client of the newest revision that declares tasks and answers questions.
#[derive(Clone)]
struct AnsweringTasksClient;

impl rmcp::ClientHandler for AnsweringTasksClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2026-07-28",
            "capabilities": {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
            "clientInfo": {"name": "answering-tasks", "version": "1"}
        }))
        .unwrap()
    }
}

/// The server's question during a task makes it `input_required`; the client's answer
/// (`tasks/update`), through this instance or another, lets the call go on.
#[tokio::test]
async fn a_servers_question_during_a_task_waits_for_the_clients_tasks_update() {
    let app = spawn_pool_app().await;
    let mut preset = crate::upstreams::fixture_preset();
    preset["name"] = json!("task-fixture");
    preset["args"] = json!(["stdio", "--task-tools"]);
    app.create_preset_ok(preset).await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "preset": "task-fixture", "autoApproveTools": ["confirm_delete", "multi_input"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&server]).await;
    let token = app.gateway_token("u", "a1").await;
    let client = discover(&app, "a1", &token, AnsweringTasksClient).await;
    // Answered through another instance where instances can talk (PostgreSQL).
    let other = if app.on_postgres() {
        Some(app.another_instance().await)
    } else {
        None
    };
    let answering = match &other {
        Some(other) => discover(other, "a1", &token, AnsweringTasksClient).await,
        None => discover(&app, "a1", &token, AnsweringTasksClient).await,
    };

    let started = client
        .call_tool_once(call("fx__confirm_delete", json!({"filename": "notes.txt"})))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = started else {
        panic!("a call waiting for an answer becomes a task: {started:?}")
    };
    let id = created.task.task_id.clone();
    let mut asked = None;
    for _ in 0..100 {
        let got = client.get_task(GetTaskParams::new(&id)).await.unwrap();
        if let TaskPayload::InputRequired { input_requests } = &got.task.payload {
            asked = Some(input_requests.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let asked = asked.expect("the task became input_required");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let (key, request) = asked.iter().next().unwrap();
    let request = serde_json::to_value(request).unwrap();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "Delete notes.txt?");
    // Keys it does not wait for are ignored; the right one lets it finish.
    answering
        .update_task(rmcp::model::UpdateTaskParams::new(
            &id,
            [("no-such-key".to_owned(), json!({"action": "decline"}))].into(),
        ))
        .await
        .unwrap();
    answering
        .update_task(rmcp::model::UpdateTaskParams::new(
            &id,
            [(
                key.clone(),
                json!({"action": "accept", "content": {"confirm": true}}),
            )]
            .into(),
        ))
        .await
        .unwrap();
    let done = ended_task(&client, &id).await;
    let TaskPayload::Completed { result } = &done.task.payload else {
        panic!("completed: {done:?}")
    };
    assert_eq!(text_of_result(result), "deleted notes.txt");
}

/// A 2025-11-25 client (with a session, so its cancellation names the request) that
/// declares the tasks extension.
#[derive(Clone)]
struct SessionTasksClient;

impl rmcp::ClientHandler for SessionTasksClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "clientInfo": {"name": "session-tasks", "version": "1"}
        }))
        .unwrap()
    }
}

/// A client that cancels its call while it is still waited for inline takes the call
/// with it: the server is told, and no task is left behind.
#[tokio::test]
async fn a_call_cancelled_while_answered_inline_stops_and_leaves_no_task() {
    use rmcp::ServiceExt;
    let app = spawn_pool_app_with(|s| s.tasks.inline_wait_ms = 10_000).await;
    let server = app.fixture_for_a1(&["slow"]).await;
    let token = app.gateway_token("u", "a1").await;
    let client = SessionTasksClient
        .serve(StreamableHttpClientTransport::from_config(
            app.gateway_client_config("a1", &token),
        ))
        .await
        .unwrap();
    assert_eq!(cancellations_seen(&app, "u", &server).await, "0");
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::Request::new(call(
        "fx__slow",
        json!({"ms": 5000}),
    )));
    let handle = client
        .send_cancellable_request(request, rmcp::service::PeerRequestOptions::no_options())
        .await
        .unwrap();
    until_running(&app, "u", &server).await;
    handle.cancel(None).await.unwrap();
    eventually("the server saw the call cancelled", || async {
        cancellations_seen(&app, "u", &server).await == "1"
    })
    .await;
    let listed = app.user("u", Method::GET, "/api/tasks", None).await;
    assert_eq!(listed.body["tasks"], json!([]), "{}", listed.text);
}

/// Past the limit a gateway client's quick calls are still answered; one that would
/// become a task is stopped and refused with the limit's code.
#[tokio::test]
async fn a_gateway_client_at_its_task_limit_is_refused_new_tasks_but_not_quick_calls() {
    let app = spawn_pool_app_with(|s| s.tasks.max_open_per_user = 1).await;
    app.fixture_for_a1(&["echo", "slow"]).await;
    let token = app.gateway_token("u", "a1").await;
    let client = discover(&app, "a1", &token, TasksClient).await;
    let first = client
        .call_tool_once(call("fx__slow", json!({"ms": 30000})))
        .await
        .unwrap();
    assert!(matches!(first, CallToolResponse::Task(_)), "{first:?}");
    let quick = client
        .call_tool_once(call("fx__echo", json!({"text": "still"})))
        .await
        .unwrap();
    assert!(matches!(quick, CallToolResponse::Complete(_)), "{quick:?}");
    let refused = client
        .call_tool_once(call("fx__slow", json!({"ms": 30000})))
        .await
        .unwrap_err();
    assert!(
        format!("{refused}").contains("too many open tasks"),
        "{refused}"
    );
}
