//! Completions and subscriptions through the gateway, with an rmcp client, against
//! server-everything (stdio): a prompt argument is completed by the prompt's server, and
//! a subscribed resource's updates reach the subscribing session.

// resources/subscribe is legacy-only in 2026-07-28 but is what 2025-11-25 clients use.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::NotificationContext;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;
use tokio::sync::Notify;

use crate::helpers::spawn_pool_app;
use crate::upstreams::everything_preset;

/// A gateway client that notes resource updates.
#[derive(Clone, Default)]
struct Subscriber(Arc<Notify>);

impl rmcp::ClientHandler for Subscriber {
    async fn on_resource_updated(
        &self,
        _params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.notify_one();
    }
}

#[tokio::test]
async fn prompt_arguments_complete_and_subscribed_updates_arrive_through_the_gateway() {
    let app = spawn_pool_app().await;
    app.create_preset_ok(everything_preset()).await;
    let every = app
        .create_server_ok(
            "u",
            json!({"name": "every", "preset": "everything",
                   "autoApproveTools": ["toggle-subscriber-updates"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&every]).await;
    let token = app.gateway_token("u", "a1").await;
    let config = app.gateway_client_config("a1", &token);
    let subscriber = Subscriber::default();
    let client = subscriber
        .clone()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap();

    // Completions: the prompt's server completes its argument under the gateway's name.
    let prompts = client.list_all_prompts().await.unwrap();
    let prompt = prompts
        .iter()
        .find(|p| p.name.ends_with("completable-prompt"))
        .unwrap_or_else(|| panic!("{prompts:?}"));
    let completed = client
        .complete(
            serde_json::from_value(json!({
                "ref": {"type": "ref/prompt", "name": prompt.name},
                "argument": {"name": "department", "value": "Eng"}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(completed.completion.values, vec!["Engineering".to_owned()]);

    // Subscriptions: updates of a subscribed resource reach this session.
    let resources = client.list_all_resources().await.unwrap();
    let uri = resources
        .iter()
        .map(|r| r.uri.clone())
        .find(|uri| uri.starts_with("demo://resource/static/document/"))
        .unwrap_or_else(|| panic!("{resources:?}"));
    client
        .subscribe(serde_json::from_value(json!({"uri": uri})).unwrap())
        .await
        .unwrap();
    client
        .call_tool(CallToolRequestParams::new(
            "every__toggle-subscriber-updates",
        ))
        .await
        .unwrap();
    // server-everything sends its simulated updates every 5 s.
    tokio::time::timeout(std::time::Duration::from_secs(15), subscriber.0.notified())
        .await
        .expect("notifications/resources/updated reached the subscribed session");
}
