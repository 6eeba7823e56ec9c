//! What servers announce reaches the right people: log messages their user's event
//! stream (`mcp.log`) and gateway sessions at their level, resource and prompt list
//! changes the gateway's clients.

// Logging is deprecated in 2026-07-28 but is what 2025-11-25 clients take.
#![allow(deprecated)]

use std::sync::Arc;

use reqwest::StatusCode;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::NotificationContext;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;
use tokio::sync::Notify;

use crate::helpers::spawn_pool_app;
use crate::upstreams::fixture_preset;

#[tokio::test]
async fn a_servers_log_messages_reach_its_user_on_the_event_stream() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let server = app
        .create_server_ok("alice", json!({"name": "fx", "preset": "fixture"}))
        .await;
    let mut events = app.events("alice").await;
    let logged = app
        .call(
            "alice",
            &server,
            "log",
            json!({"text": "disk almost full", "level": "warning"}),
        )
        .await;
    assert_eq!(logged.status, StatusCode::OK, "{}", logged.text);
    let event = crate::sampling::next_event(&mut events, "mcp.log").await;
    assert_eq!(event["serverId"], server.as_str());
    assert_eq!(event["level"], "warning");
    assert_eq!(event["logger"], "fixture");
    assert_eq!(event["data"], "disk almost full");
}

/// A gateway client that notes the list changes it is told of.
#[derive(Clone, Default)]
struct Listening {
    resources: Arc<Notify>,
    prompts: Arc<Notify>,
}

impl rmcp::ClientHandler for Listening {
    async fn on_resource_list_changed(&self, _context: NotificationContext<rmcp::RoleClient>) {
        self.resources.notify_one();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<rmcp::RoleClient>) {
        self.prompts.notify_one();
    }
}

#[tokio::test]
async fn resource_and_prompt_list_changes_reach_gateway_clients() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "preset": "fixture", "autoApproveTools": ["announce"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&server]).await;
    let token = app.gateway_token("u", "a1").await;
    let config = app.gateway_client_config("a1", &token);
    let listening = Listening::default();
    let client = listening
        .clone()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap();
    let capabilities = client.peer_info().unwrap().capabilities.clone();
    assert_eq!(
        capabilities.resources.and_then(|r| r.list_changed),
        Some(true)
    );
    assert_eq!(
        capabilities.prompts.and_then(|p| p.list_changed),
        Some(true)
    );
    // The session's listener starts with it; give the first call a moment to find it.
    client.list_all_tools().await.unwrap();
    client
        .call_tool(CallToolRequestParams::new("fx__announce"))
        .await
        .unwrap();
    let within = std::time::Duration::from_secs(10);
    tokio::time::timeout(within, listening.resources.notified())
        .await
        .expect("resources/list_changed reached the client");
    tokio::time::timeout(within, listening.prompts.notified())
        .await
        .expect("prompts/list_changed reached the client");
}

/// A gateway client that keeps the log messages it is sent.
#[derive(Clone)]
struct Logged(tokio::sync::mpsc::UnboundedSender<String>);

impl rmcp::ClientHandler for Logged {
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self
            .0
            .send(params.data.as_str().unwrap_or_default().to_owned());
    }
}

#[tokio::test]
async fn a_gateway_session_gets_log_messages_at_or_above_its_level() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(fixture_preset()).await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "preset": "fixture", "autoApproveTools": ["log"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&server]).await;
    let token = app.gateway_token("u", "a1").await;
    let config = app.gateway_client_config("a1", &token);
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel();
    let client = Logged(sent)
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap();
    assert!(client.peer_info().unwrap().capabilities.logging.is_some());
    client
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Warning,
        ))
        .await
        .unwrap();
    for (text, level) in [("quiet", "info"), ("loud", "error")] {
        let mut call = CallToolRequestParams::new("fx__log");
        call.arguments = json!({"text": text, "level": level}).as_object().cloned();
        client.call_tool(call).await.unwrap();
    }
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), received.recv())
        .await
        .expect("a log message within 10 s")
        .unwrap();
    assert_eq!(
        first, "loud",
        "the info message is below the session's level"
    );
}
