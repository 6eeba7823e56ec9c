//! The gRPC interface with a real tonic client over loopback: the same services, keys and
//! error codes as the REST API.

use std::time::Duration;

use mcp_pool::grpc::proto::mcp_pool_client::McpPoolClient;
use mcp_pool::grpc::proto::{
    CallToolRequest, ConfirmRequest, GetToolsRequest, HealthRequest, StreamToolCallUpdatesRequest,
    ToolCallUpdate,
};
use serde_json::Value;
use tonic::transport::Channel;
use tonic::{Code, Request, Status, Streaming};
use uuid::Uuid;

use crate::helpers::{TestApp, spawn_pool_app};

/// User `u` with the fixture as `fx` (`echo` auto-approved) bound to assistant `a1`.
async fn setup(app: &TestApp) -> String {
    app.fixture_for_a1(&["echo"]).await
}

pub(crate) async fn client(app: &TestApp) -> McpPoolClient<Channel> {
    McpPoolClient::connect(app.grpc_address.clone())
        .await
        .expect("the gRPC port answers")
}

/// A request with the service key and `x-user-id` as metadata.
pub fn as_user<T>(app: &TestApp, user: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    let metadata = request.metadata_mut();
    metadata.insert(
        "authorization",
        format!("Bearer {}", app.service_key).parse().unwrap(),
    );
    metadata.insert("x-user-id", user.parse().unwrap());
    request
}

/// The REST API's stable code carried by a status.
pub(crate) fn error_code(status: &Status) -> &str {
    status
        .metadata()
        .get("error-code")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("<no error-code>")
}

async fn next_update(stream: &mut Streaming<ToolCallUpdate>) -> ToolCallUpdate {
    tokio::time::timeout(Duration::from_secs(15), stream.message())
        .await
        .expect("an update within 15 s")
        .expect("the stream is healthy")
        .expect("the stream is open")
}

#[tokio::test]
async fn tools_are_listed_and_called_through_to_the_fixture() {
    let app = spawn_pool_app().await;
    let server = setup(&app).await;
    let mut grpc = client(&app).await;

    let of_assistant = grpc
        .get_tools(as_user(
            &app,
            "u",
            GetToolsRequest {
                assistant_id: "a1".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let echo = of_assistant
        .tools
        .iter()
        .find(|t| t.tool_name == "echo")
        .expect("echo is offered");
    assert_eq!(echo.display_name, "mcp__fx__echo");
    assert_eq!(echo.server_id, server);
    let schema: Value = serde_json::from_str(&echo.input_schema_json).unwrap();
    assert_eq!(schema["type"], "object", "{schema}");
    let of_user = grpc
        .get_tools(as_user(&app, "u", GetToolsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert!(
        of_user
            .tools
            .iter()
            .any(|t| t.tool_name == "add" && t.server_name == "fx"),
        "{of_user:?}"
    );

    let called = grpc
        .call_tool(as_user(
            &app,
            "u",
            CallToolRequest {
                server_id: server.clone(),
                tool_name: "echo".into(),
                arguments_json: r#"{"text": "over grpc"}"#.into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(called.success);
    let result: Value = serde_json::from_str(&called.result_json).unwrap();
    assert_eq!(result["content"][0]["text"], "over grpc", "{result}");

    let bad = grpc
        .call_tool(as_user(
            &app,
            "u",
            CallToolRequest {
                server_id: server,
                tool_name: "add".into(),
                arguments_json: r#"{"a": "one"}"#.into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(
        (bad.code(), error_code(&bad)),
        (Code::InvalidArgument, "INVALID_ARGUMENTS"),
        "{bad:?}"
    );
}

#[tokio::test]
async fn a_parked_call_is_confirmed_while_a_stream_watches() {
    let app = spawn_pool_app().await;
    setup(&app).await;
    let mut grpc = client(&app).await;
    let mut updates = grpc
        .stream_tool_call_updates(as_user(&app, "u", StreamToolCallUpdatesRequest {}))
        .await
        .unwrap()
        .into_inner();

    let message = Uuid::new_v4().to_string();
    let parked = grpc
        .call_tool(as_user(
            &app,
            "u",
            CallToolRequest {
                tool_name: "mcp__fx__add".into(),
                arguments_json: r#"{"a": 2, "b": 3}"#.into(),
                message_id: message.clone(),
                tool_call_id: "c1".into(),
                assistant_id: "a1".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(parked.record.as_ref().unwrap().status, "pending");
    let update = next_update(&mut updates).await;
    assert_eq!(update.message_id, message);
    assert_eq!(update.record.as_ref().unwrap().status, "pending");

    let approved = grpc
        .confirm(as_user(
            &app,
            "u",
            ConfirmRequest {
                message_id: message.clone(),
                tool_call_id: "c1".into(),
                approved: true,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(approved.record.unwrap().status, "invoking");
    assert_eq!(
        next_update(&mut updates).await.record.unwrap().status,
        "invoking"
    );
    let done = next_update(&mut updates).await.record.unwrap();
    assert_eq!(done.status, "done");
    let response: Value = serde_json::from_str(&done.response_json).unwrap();
    assert_eq!(response[0]["text"], "5", "{response}");

    // The same record over REST.
    let stored = app
        .user(
            "u",
            reqwest::Method::GET,
            &format!("/api/messages/{message}"),
            None,
        )
        .await;
    assert_eq!(stored.body["toolCalls"][0]["status"], "done");
    let again = grpc
        .confirm(as_user(
            &app,
            "u",
            ConfirmRequest {
                message_id: message,
                tool_call_id: "c1".into(),
                approved: false,
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(
        (again.code(), error_code(&again)),
        (Code::FailedPrecondition, "TOOL_CALL_SETTLED")
    );
}

#[tokio::test]
async fn errors_map_to_grpc_codes_and_users_are_isolated() {
    let app = spawn_pool_app().await;
    let server = setup(&app).await;
    let mut grpc = client(&app).await;

    let health = grpc.health(HealthRequest {}).await.unwrap().into_inner();
    assert_eq!(health.status, "SERVING");

    let anonymous = grpc
        .get_tools(GetToolsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        (anonymous.code(), error_code(&anonymous)),
        (Code::Unauthenticated, "UNAUTHORIZED")
    );
    let mut wrong_key = as_user(&app, "u", GetToolsRequest::default());
    wrong_key
        .metadata_mut()
        .insert("authorization", "Bearer not-a-key".parse().unwrap());
    let wrong_key = grpc.get_tools(wrong_key).await.unwrap_err();
    assert_eq!(wrong_key.code(), Code::Unauthenticated);
    let mut no_user = as_user(&app, "u", GetToolsRequest::default());
    no_user.metadata_mut().remove("x-user-id");
    let no_user = grpc.get_tools(no_user).await.unwrap_err();
    assert_eq!(
        (no_user.code(), error_code(&no_user)),
        (Code::InvalidArgument, "VALIDATION_ERROR")
    );

    // Another user sees nothing of u's: servers, tools, messages.
    let theirs = grpc
        .get_tools(as_user(&app, "mallory", GetToolsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert!(theirs.tools.is_empty(), "{theirs:?}");
    let call = grpc
        .call_tool(as_user(
            &app,
            "mallory",
            CallToolRequest {
                server_id: server.clone(),
                tool_name: "echo".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(
        (call.code(), error_code(&call)),
        (Code::NotFound, "MCP_SERVER_NOT_FOUND")
    );
    let message = Uuid::new_v4().to_string();
    grpc.call_tool(as_user(
        &app,
        "u",
        CallToolRequest {
            tool_name: "mcp__fx__add".into(),
            arguments_json: r#"{"a": 1, "b": 1}"#.into(),
            message_id: message.clone(),
            tool_call_id: "c1".into(),
            assistant_id: "a1".into(),
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    let hijack = grpc
        .confirm(as_user(
            &app,
            "mallory",
            ConfirmRequest {
                message_id: message,
                tool_call_id: "c1".into(),
                approved: true,
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(hijack.code(), Code::NotFound);

    let unknown_tool = grpc
        .call_tool(as_user(
            &app,
            "u",
            CallToolRequest {
                server_id: server,
                tool_name: "nope".into(),
                arguments_json: "not json".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(
        unknown_tool.code(),
        Code::InvalidArgument,
        "{unknown_tool:?}"
    );
}

#[tokio::test]
async fn a_servers_question_is_answered_over_grpc() {
    use mcp_pool::grpc::proto::AnswerElicitationRequest;
    let app = spawn_pool_app().await;
    let upstream = crate::upstreams::HttpUpstream::conformance_server().await;
    crate::elicitation::setup(&app, "u", &upstream).await;
    let server = crate::elicitation::server_of(&app, "u").await;
    app.user(
        "u",
        reqwest::Method::POST,
        &format!("/api/mcp-servers/{server}/connect"),
        None,
    )
    .await;
    let mut events = app.events("u").await;
    let mut grpc = client(&app).await;
    let mut calling = grpc.clone();
    let call = calling.call_tool(as_user(
        &app,
        "u",
        CallToolRequest {
            server_id: server.clone(),
            tool_name: "test_elicitation".into(),
            arguments_json: r#"{"message":"Your name?"}"#.into(),
            ..Default::default()
        },
    ));
    let answering = async {
        let question = crate::elicitation::next_question(&mut events).await;
        let id = question["id"].as_str().unwrap().to_owned();
        let answer = |user: &str, action: &str, content: &str| {
            as_user(
                &app,
                user,
                AnswerElicitationRequest {
                    id: id.clone(),
                    action: action.into(),
                    content_json: content.into(),
                },
            )
        };
        let foreign = grpc
            .answer_elicitation(answer("mallory", "accept", r#"{"response":"x"}"#))
            .await
            .unwrap_err();
        assert_eq!(foreign.code(), Code::NotFound);
        assert_eq!(error_code(&foreign), "ELICITATION_NOT_FOUND");
        let wrong = grpc
            .answer_elicitation(answer("u", "accept", r#"{"response":7}"#))
            .await
            .unwrap_err();
        assert_eq!(error_code(&wrong), "INVALID_ARGUMENTS", "{wrong:?}");
        grpc.answer_elicitation(answer("u", "accept", r#"{"response":"Grace"}"#))
            .await
            .unwrap();
    };
    let (called, ()) = tokio::join!(call, answering);
    let result: Value = serde_json::from_str(&called.unwrap().into_inner().result_json).unwrap();
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        text.contains("action=accept") && text.contains("Grace"),
        "{result}"
    );
}

#[tokio::test]
async fn a_servers_sampling_request_is_decided_over_grpc() {
    use crate::llm_script::{ScriptedLlm, openai_text};
    use mcp_pool::grpc::proto::DecideSamplingRequest;
    let llm = ScriptedLlm::openai().await;
    let app = crate::helpers::spawn_pool_app_with(|s| llm.configure(s, "scripted", &[])).await;
    let upstream = crate::upstreams::HttpUpstream::everything("streamableHttp").await;
    let server = app
        .create_server_ok(
            "u",
            serde_json::json!({"name": "every", "baseUrl": format!("{}/mcp", upstream.base),
                "sampling": {"policy": "ask", "provider": "scripted", "model": "m"}}),
        )
        .await;
    llm.push(openai_text("Decided over gRPC."));
    let mut events = app.events("u").await;
    let mut grpc = client(&app).await;
    let mut calling = grpc.clone();
    let call = calling.call_tool(as_user(
        &app,
        "u",
        CallToolRequest {
            server_id: server.clone(),
            tool_name: "trigger-sampling-request".into(),
            arguments_json: r#"{"prompt":"Hi"}"#.into(),
            ..Default::default()
        },
    ));
    let deciding = async {
        let request = crate::sampling::next_event(&mut events, "mcp.sampling.requested").await;
        let id = request["id"].as_str().unwrap().to_owned();
        let decide = |user: &str, action: &str| {
            as_user(
                &app,
                user,
                DecideSamplingRequest {
                    id: id.clone(),
                    action: action.into(),
                },
            )
        };
        let foreign = grpc
            .decide_sampling(decide("mallory", "approve"))
            .await
            .unwrap_err();
        assert_eq!(error_code(&foreign), "SAMPLING_REQUEST_NOT_FOUND");
        grpc.decide_sampling(decide("u", "approve")).await.unwrap();
    };
    let (called, ()) = tokio::join!(call, deciding);
    let result = called.unwrap().into_inner().result_json;
    assert!(result.contains("Decided over gRPC."), "{result}");
}

/// `as_task` starts the call as a task (as `Prefer: respond-async` does); GetTask follows it
/// and CancelTask stops one, with the REST API's codes.
#[tokio::test]
async fn a_call_runs_as_a_task_that_get_task_follows_and_cancel_task_stops() {
    use mcp_pool::grpc::proto::{CancelTaskRequest, GetTaskRequest};
    let app = spawn_pool_app().await;
    let server = setup(&app).await;
    let mut grpc = client(&app).await;
    let started = grpc
        .call_tool(as_user(
            &app,
            "u",
            CallToolRequest {
                server_id: server.clone(),
                tool_name: "slow".into(),
                arguments_json: r#"{"ms": 300}"#.into(),
                as_task: true,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let task = started.task.expect("a task");
    assert_eq!(task.status, "working");
    assert_eq!(task.origin, "grpc");
    let mut done = task.clone();
    for _ in 0..200 {
        done = grpc
            .get_task(as_user(
                &app,
                "u",
                GetTaskRequest {
                    task_id: task.task_id.clone(),
                },
            ))
            .await
            .unwrap()
            .into_inner();
        if done.status != "working" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(done.status, "completed", "{done:?}");
    let result: Value = serde_json::from_str(&done.result_json).unwrap();
    assert_eq!(result["content"][0]["text"], "slept 300 ms");

    let long = grpc
        .call_tool(as_user(
            &app,
            "u",
            CallToolRequest {
                server_id: server,
                tool_name: "slow".into(),
                arguments_json: r#"{"ms": 30000}"#.into(),
                as_task: true,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap();
    let cancelled = grpc
        .cancel_task(as_user(
            &app,
            "u",
            CancelTaskRequest {
                task_id: long.task_id.clone(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cancelled.status, "cancelled");
    let missing = grpc
        .get_task(as_user(
            &app,
            "mallory",
            GetTaskRequest {
                task_id: long.task_id,
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    assert_eq!(error_code(&missing), "TASK_NOT_FOUND");
}
