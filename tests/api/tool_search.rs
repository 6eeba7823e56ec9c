//! Tool search (issue 41, §2): an assistant's tools ranked against a request over REST,
//! the index following the servers' `list_changed`, and search mode, where the gateway and
//! the agent loop offer a model `search_tools`, `call_tool` and the pinned tools instead
//! of every tool, while calls still go by the real tool.

use reqwest::{Method, StatusCode};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::assistant_tools::names;
use crate::chat::{ChatStream, chat_app, chat_body, tool_messages};
use crate::gateway::connect;
use crate::helpers::{TestApp, spawn_pool_app, spawn_pool_app_with};
use crate::llm_script::{ScriptedLlm, openai_text, openai_tool_calls};
use crate::upstreams::{eventually, everything_preset};

/// `u`'s assistant `a1` with the fixture (`fx`, echo auto-approved) and the real
/// server-everything (`ev`); the fixture's id.
async fn two_servers(app: &TestApp) -> String {
    let fx = app.fixture_for_a1(&["echo"]).await;
    app.create_preset_ok(everything_preset()).await;
    let ev = app
        .create_server_ok("u", json!({"name": "ev", "preset": "everything"}))
        .await;
    app.bind_ok("u", "a1", [&fx, &ev]).await;
    fx
}

/// The names a search of `a1`'s tools lists, best first.
async fn found(app: &TestApp, query: &str) -> Vec<String> {
    let path = format!(
        "/api/assistants/a1/tools?format=openai&query={}",
        urlencoding(query)
    );
    let reply = app.user("u", Method::GET, &path, None).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["query"], query.trim(), "{}", reply.text);
    names(&reply.body, "/function/name")
}

fn urlencoding(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[tokio::test]
async fn a_search_ranks_the_assistants_tools_in_every_format_within_the_limit() {
    let app = spawn_pool_app().await;
    two_servers(&app).await;
    let all = app
        .user("u", Method::GET, "/api/assistants/a1/tools", None)
        .await;
    let total = all.body["tools"].as_array().unwrap().len();
    assert!(total > 20, "{}", all.text);

    // Each request finds its tool first, across both servers, by what the tool does.
    for (query, tool) in [
        (
            "compress a file with gzip",
            "mcp__ev__gzip-file-as-resource",
        ),
        ("the sum of two numbers", "mcp__ev__get-sum"),
        ("which process id does the server have", "mcp__fx__pid"),
        ("sleep for some milliseconds", "mcp__fx__slow"),
        (
            "list every environment variable to debug the configuration",
            "mcp__ev__get-env",
        ),
    ] {
        let ranked = found(&app, query).await;
        assert_eq!(
            ranked.first().map(String::as_str),
            Some(tool),
            "{query}: {ranked:?}"
        );
        assert!(ranked.len() <= 10, "the default limit: {ranked:?}");
    }
    // A request no tool speaks of finds nothing.
    assert!(found(&app, "quantum chromodynamics").await.is_empty());

    // The limit, and the other formats.
    let one = app
        .user(
            "u",
            Method::GET,
            "/api/assistants/a1/tools?format=anthropic&query=gzip%20compression&limit=1",
            None,
        )
        .await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.text);
    assert_eq!(
        names(&one.body, "/name"),
        ["mcp__ev__gzip-file-as-resource"]
    );
    assert!(
        one.body["tools"][0]["input_schema"].is_object(),
        "{}",
        one.text
    );
    let mcp = app
        .user(
            "u",
            Method::GET,
            "/api/assistants/a1/tools?query=tiny%20logo%20image&limit=3",
            None,
        )
        .await;
    assert_eq!(names(&mcp.body, "/name")[0], "mcp__ev__get-tiny-image");
    assert!(
        mcp.body["tools"][0]["inputSchema"].is_object(),
        "{}",
        mcp.text
    );

    // Bad searches are refused in words.
    for (query, words) in [
        ("query=%20%20", "empty"),
        ("query=echo&limit=0", "between 1 and 100"),
        ("query=echo&limit=101", "between 1 and 100"),
        ("limit=5", "needs a query"),
        (&format!("query={}", "a".repeat(1001)), "longer than 1000"),
    ] {
        let refused = app
            .user(
                "u",
                Method::GET,
                &format!("/api/assistants/a1/tools?{query}"),
                None,
            )
            .await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {}",
            refused.text
        );
        assert_eq!(
            refused.body["error"]["code"], "VALIDATION_ERROR",
            "{}",
            refused.text
        );
        assert!(refused.text.contains(words), "{query}: {}", refused.text);
    }
}

/// The sentence encoder tests/setup.sh installs (README, "Tool search").
fn model_dir() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/models/use-multilingual-v3"
    )
    .to_owned()
}

/// Requests in Chinese, sharing no word with any tool, and the tool each asks for.
const CHINESE_REQUESTS: [(&str, &str); 4] = [
    ("压缩一个文件", "mcp__ev__gzip-file-as-resource"),
    ("服务器的进程号是多少", "mcp__fx__pid"),
    ("等待几毫秒", "mcp__fx__slow"),
    ("返回一张很小的图片", "mcp__ev__get-tiny-image"),
];

#[tokio::test]
async fn with_the_sentence_encoder_a_request_in_another_language_finds_its_tool() {
    // Words alone (the default): the Chinese requests do not find their tools.
    let lexical = spawn_pool_app().await;
    two_servers(&lexical).await;
    for (query, tool) in CHINESE_REQUESTS {
        let ranked = found(&lexical, query).await;
        assert_ne!(
            ranked.first().map(String::as_str),
            Some(tool),
            "{query}: {ranked:?}"
        );
    }

    let app = spawn_pool_app_with(|settings| settings.tool_search.model_dir = model_dir()).await;
    two_servers(&app).await;
    for (query, tool) in CHINESE_REQUESTS {
        let ranked = found(&app, query).await;
        assert_eq!(
            ranked.first().map(String::as_str),
            Some(tool),
            "{query}: {ranked:?}"
        );
    }
    // English requests still find theirs, the words keeping the tool that names them on top.
    for (query, tool) in [
        (
            "compress a file with gzip",
            "mcp__ev__gzip-file-as-resource",
        ),
        ("the sum of two numbers", "mcp__ev__get-sum"),
        ("sleep for some milliseconds", "mcp__fx__slow"),
    ] {
        let ranked = found(&app, query).await;
        assert_eq!(
            ranked.first().map(String::as_str),
            Some(tool),
            "{query}: {ranked:?}"
        );
    }
    // By meaning every tool has a place: a request no tool speaks of still gets the
    // limit's worth, the nearest first.
    assert_eq!(found(&app, "quantum chromodynamics").await.len(), 10);

    // Through the gateway in search mode too: `search_tools` finds by meaning.
    let exposure = set_exposure(&app, "search").await;
    assert_eq!(exposure.status, StatusCode::OK, "{}", exposure.text);
    let token = app.gateway_token("u", "a1").await;
    let client = connect(&app, "a1", &token).await;
    let mut search = CallToolRequestParams::new("search_tools");
    search.arguments = json!({"query": "返回一张很小的图片", "limit": 3})
        .as_object()
        .cloned();
    let answer = client.call_tool(search).await.unwrap();
    let text = answer.content[0].as_text().unwrap().text.clone();
    let tools: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(tools["tools"][0]["name"], "ev__get-tiny-image", "{text}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_index_follows_a_servers_list_changed_and_the_users_curation() {
    let app = spawn_pool_app().await;
    let fx = app.fixture_for_a1(&["notify"]).await;
    assert!(found(&app, "appears").await.is_empty());

    // The fixture's `notify` adds the tool `extra` ("Appears after notify") and announces
    // tools/list_changed: the next search finds it.
    let message = uuid::Uuid::now_v7().to_string();
    let ran = app
        .submit_calls(
            "u",
            &message,
            "?wait=20",
            json!([{"id": "n", "name": "mcp__fx__notify", "arguments": {}}]),
        )
        .await;
    assert_eq!(ran.body["toolCalls"][0]["status"], "done", "{}", ran.text);
    eventually("the new tool is found", || async {
        found(&app, "appears").await == ["mcp__fx__extra"]
    })
    .await;

    // A description the user wrote is searched, and a hidden tool is not.
    let curated = app
        .user(
            "u",
            Method::PUT,
            "/api/assistants/a1/tool-overrides",
            Some(json!({"overrides": [
                {"serverId": fx, "tool": "echo", "description": "Repeats a parrot's words"},
                {"serverId": fx, "tool": "extra", "hidden": true},
            ]})),
        )
        .await;
    assert_eq!(curated.status, StatusCode::OK, "{}", curated.text);
    assert_eq!(found(&app, "parrot").await, ["mcp__fx__echo"]);
    assert!(found(&app, "appears").await.is_empty());
}

pub(crate) async fn set_exposure(app: &TestApp, exposure: &str) -> crate::helpers::Reply {
    app.user(
        "u",
        Method::PUT,
        "/api/assistants/a1/tool-exposure",
        Some(json!({"toolExposure": exposure})),
    )
    .await
}

/// The tools a search-mode `search_tools` answer names.
fn found_names(answer: &str) -> Vec<String> {
    let found: Value = serde_json::from_str(answer).expect("search_tools answers JSON");
    names(&found, "/name")
}

#[tokio::test]
async fn in_search_mode_a_gateway_client_finds_tools_and_calls_them_through_call_tool() {
    let app = spawn_pool_app().await;
    let fx = two_servers(&app).await;
    assert_eq!(
        app.user("u", Method::GET, "/api/assistants/a1/tool-exposure", None)
            .await
            .body["toolExposure"],
        "all"
    );
    let set = set_exposure(&app, "search").await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text);
    assert_eq!(set.body["toolExposure"], "search");
    let refused = set_exposure(&app, "some").await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert!(refused.text.contains("all, search"), "{}", refused.text);
    let pinned = app
        .user(
            "u",
            Method::PUT,
            "/api/assistants/a1/tool-overrides",
            Some(json!({"overrides": [{"serverId": fx, "tool": "add", "pinned": true}]})),
        )
        .await;
    assert_eq!(pinned.status, StatusCode::OK, "{}", pinned.text);

    let token = app.gateway_token("u", "a1").await;
    let client = connect(&app, "a1", &token).await;
    let listed: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(listed, ["search_tools", "call_tool", "fx__add"]);

    let mut search = CallToolRequestParams::new("search_tools");
    search.arguments = json!({"query": "echo text back", "limit": 3})
        .as_object()
        .cloned();
    let answer = client.call_tool(search).await.unwrap();
    let text = answer.content[0].as_text().unwrap().text.clone();
    let names = found_names(&text);
    assert!(names.len() <= 3 && !names.is_empty(), "{text}");
    assert!(
        names.iter().any(|n| n == "fx__echo") && names.iter().any(|n| n == "ev__echo"),
        "both servers' echo tools, by their gateway names: {text}"
    );

    // call_tool runs the found tool as itself: auto-approved (fx's echo is), audited as echo.
    let mut call = CallToolRequestParams::new("call_tool");
    call.arguments = json!({"name": "fx__echo", "arguments": {"text": "found it"}})
        .as_object()
        .cloned();
    let called = client.call_tool(call).await.unwrap();
    assert_eq!(called.is_error, Some(false), "{called:?}");
    assert_eq!(called.content[0].as_text().unwrap().text, "found it");
    let audit = app
        .admin(Method::GET, "/admin/audit?userId=u&tool=echo", None)
        .await;
    assert_eq!(
        audit.body["entries"][0]["serverName"], "fx",
        "{}",
        audit.text
    );

    // A call of an unknown tool is an error, and call_tool without a name an error result
    // the model reads.
    let mut unknown = CallToolRequestParams::new("call_tool");
    unknown.arguments = json!({"name": "fx__nothing"}).as_object().cloned();
    let error = client.call_tool(unknown).await.unwrap_err();
    assert!(error.to_string().contains("fx__nothing"), "{error}");
    let mut nameless = CallToolRequestParams::new("call_tool");
    nameless.arguments = json!({"arguments": {}}).as_object().cloned();
    let refused = client.call_tool(nameless).await.unwrap();
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert_eq!(
        refused.content[0].as_text().unwrap().text,
        "VALIDATION_ERROR: call_tool needs the tool's name: a string"
    );

    // Back to all: every tool again.
    set_exposure(&app, "all").await;
    let listed = client.list_all_tools().await.unwrap();
    assert!(listed.len() > 20, "{listed:?}");
    assert!(!listed.iter().any(|t| t.name == "search_tools"));
}

#[tokio::test]
async fn in_search_mode_the_agent_loop_offers_search_then_the_found_tool() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    let set = set_exposure(&app, "search").await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text);
    llm.push(openai_tool_calls(
        "Let me find a tool.",
        &[("call_1", "search_tools", json!({"query": "echo my text"}))],
    ));
    llm.push(openai_tool_calls(
        "Found it.",
        &[(
            "call_2",
            "call_tool",
            json!({"name": "mcp__fx__echo", "arguments": {"text": "two steps"}}),
        )],
    ));
    llm.push(openai_text("The tool said: two steps."));

    let mut stream = ChatStream::open(&app, "u", chat_body("echo two steps")).await;
    let (name, done) = stream.finish().await;
    assert_eq!(name, "message.completed", "{done}");
    assert_eq!(done["toolCalls"][0]["status"], "done", "{done}");
    assert_eq!(done["toolCalls"][0]["displayName"], "search_tools");
    assert_eq!(done["toolCalls"][1]["status"], "done", "{done}");
    assert_eq!(done["toolCalls"][1]["toolName"], "echo", "{done}");
    assert_eq!(done["toolCalls"][1]["response"][0]["text"], "two steps");

    let requests = llm.requests();
    let offered = |request: &Value| names(request, "/function/name");
    // First round: the two search tools only (nothing pinned).
    assert_eq!(offered(&requests[0]), ["search_tools", "call_tool"]);
    // Second: the search's answer went back, and the tools it found are offered.
    let results = tool_messages(&requests[1]);
    let found = found_names(results[0]["content"].as_str().unwrap());
    assert_eq!(found[0], "mcp__fx__echo", "{found:?}");
    let second = offered(&requests[1]);
    assert_eq!(&second[..2], ["search_tools", "call_tool"]);
    assert!(second.contains(&"mcp__fx__echo".to_owned()), "{second:?}");
    assert!(second.len() < 2 + 6, "only what was found: {second:?}");
    // Third: the echo's result.
    assert_eq!(tool_messages(&requests[2])[1]["content"], "two steps");
}
