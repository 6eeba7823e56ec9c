//! The agent loop against scripted providers on loopback and the real fixture server:
//! streamed answers, tool rounds, confirmation mid-stream, limits, provider failures,
//! prompt mode, persistence and cancellation.

use std::time::Duration;

use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_pool_app_with};
use crate::llm_script::{
    Reply, ScriptedLlm, anthropic_reply, openai_text, openai_text_events, openai_tool_calls,
};
use crate::upstreams::eventually;

/// The fixture bound to assistant `a1` of user `u`; `echo` is auto-approved, `add` is not.
pub(crate) async fn chat_app(
    llm: &ScriptedLlm,
    adjust: impl FnOnce(&mut mcp_pool::Settings),
) -> TestApp {
    let app = spawn_pool_app_with(|settings| {
        llm.configure(settings, "scripted", &["plain-model"]);
        adjust(settings);
    })
    .await;
    app.fixture_for_a1(&["echo"]).await;
    app
}

pub(crate) fn chat_body(message: &str) -> Value {
    json!({
        "assistantId": "a1",
        "message": message,
        "model": {"provider": "scripted", "name": "gpt-test"},
    })
}

/// A chat response read as server-sent events.
pub(crate) struct ChatStream {
    events: std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>,
    >,
    seen: Vec<(String, Value)>,
}

impl ChatStream {
    pub(crate) async fn open(app: &TestApp, user: &str, body: Value) -> Self {
        let response = app
            .request(Method::POST, "/api/chat")
            .bearer_auth(&app.service_key)
            .header("X-User-Id", user)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "the chat answers as server-sent events"
        );
        Self {
            events: Box::pin(sse_stream::SseStream::from_bytes_stream(
                response.bytes_stream(),
            )),
            seen: Vec::new(),
        }
    }

    /// The next named event (heartbeat comments are skipped).
    async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            let item = tokio::time::timeout(Duration::from_secs(30), self.events.next())
                .await
                .expect("an event within 30 s")?;
            let sse = item.expect("a well-formed event");
            let (Some(name), Some(data)) = (sse.event, sse.data) else {
                continue;
            };
            let data: Value = serde_json::from_str(&data).expect("event data is JSON");
            self.seen.push((name.clone(), data.clone()));
            return Some((name, data));
        }
    }

    /// Reads until the turn ends; returns the final event.
    pub(crate) async fn finish(&mut self) -> (String, Value) {
        while let Some((name, data)) = self.next().await {
            if name == "message.completed" || name == "chat.error" {
                return (name, data);
            }
        }
        panic!(
            "the stream ended without message.completed: {:?}",
            self.seen
        );
    }

    /// Reads until a tool-call update with the given status.
    async fn until_tool_status(&mut self, status: &str) -> Value {
        while let Some((name, data)) = self.next().await {
            if name == "assistant.toolCall.updated" && data["toolCall"]["status"] == status {
                return data;
            }
        }
        panic!("no tool call became {status}: {:?}", self.seen);
    }

    fn text(&self) -> String {
        self.seen
            .iter()
            .filter(|(name, _)| name == "message.delta")
            .map(|(_, data)| data["text"].as_str().unwrap().to_owned())
            .collect()
    }

    fn names(&self) -> Vec<&str> {
        self.seen.iter().map(|(name, _)| name.as_str()).collect()
    }
}

pub(crate) fn tool_messages(request: &Value) -> Vec<&Value> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect()
}

#[tokio::test]
async fn a_plain_answer_is_streamed_and_stored() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    llm.push(openai_text("Hello there, friend."));

    let mut stream = ChatStream::open(&app, "u", chat_body("Hi!")).await;
    let (name, done) = stream.finish().await;
    assert_eq!(name, "message.completed", "{done}");
    assert_eq!(stream.names()[0], "message.created");
    assert_eq!(stream.text(), "Hello there, friend.");
    assert!(
        stream
            .names()
            .iter()
            .filter(|n| **n == "message.delta")
            .count()
            > 1,
        "the answer arrives in several deltas"
    );
    assert_eq!(done["finishReason"], "stop");
    assert_eq!(done["content"], "Hello there, friend.");
    assert_eq!(done["rounds"], 1);

    let request = &llm.requests()[0];
    assert_eq!(request["model"], "gpt-test");
    assert_eq!(request["stream"], true);
    let tools: Vec<&str> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"mcp__fx__echo"), "{tools:?}");
    assert_eq!(
        request["messages"].as_array().unwrap().last().unwrap()["content"],
        "Hi!"
    );

    let conversation = done["conversationId"].as_str().unwrap();
    let stored = app
        .user(
            "u",
            Method::GET,
            &format!("/api/chat/conversations/{conversation}"),
            None,
        )
        .await;
    assert_eq!(stored.status, StatusCode::OK, "{}", stored.text);
    assert_eq!(stored.body["title"], "Hi!");
    let messages = stored.body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["content"], "Hi!");
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["content"], "Hello there, friend.");
    assert_eq!(messages[1]["metadata"]["finishReason"], "stop");
}

#[tokio::test]
async fn an_auto_approved_call_runs_and_its_result_goes_back_to_the_model() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    llm.push(openai_tool_calls(
        "Let me echo.",
        &[("call_1", "mcp__fx__echo", json!({"text": "ping"}))],
    ));
    llm.push(openai_text("The tool said ping."));

    let mut stream = ChatStream::open(&app, "u", chat_body("echo ping")).await;
    let (name, done) = stream.finish().await;
    assert_eq!(name, "message.completed", "{done}");
    let statuses: Vec<&str> = stream
        .seen
        .iter()
        .filter(|(n, _)| n == "assistant.toolCall.updated")
        .map(|(_, d)| d["toolCall"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, vec!["invoking", "done"]);
    assert_eq!(done["toolCalls"][0]["status"], "done");
    assert_eq!(done["toolCalls"][0]["response"][0]["text"], "ping");
    assert_eq!(done["content"], "Let me echo.\n\nThe tool said ping.");
    assert_eq!(done["rounds"], 2);

    let second = &llm.requests()[1];
    let messages = second["messages"].as_array().unwrap();
    let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(assistant["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        serde_json::from_str::<Value>(
            assistant["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap()
        )
        .unwrap(),
        json!({"text": "ping"}),
        "the arguments split across chunks were assembled"
    );
    let results = tool_messages(second);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["tool_call_id"], "call_1");
    assert_eq!(results[0]["content"], "ping");

    let message = app
        .user(
            "u",
            Method::GET,
            &format!("/api/messages/{}", done["messageId"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(message.body["toolCalls"][0]["status"], "done");
}

#[tokio::test]
async fn three_tool_rounds_then_an_answer() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    for round in 1..=3 {
        llm.push(openai_tool_calls(
            "",
            &[(
                &format!("call_{round}"),
                "mcp__fx__echo",
                json!({"text": format!("r{round}")}),
            )],
        ));
    }
    llm.push(openai_text("All three done."));

    let mut stream = ChatStream::open(&app, "u", chat_body("go")).await;
    let (_, done) = stream.finish().await;
    assert_eq!(done["finishReason"], "stop", "{done}");
    assert_eq!(done["rounds"], 4);
    assert_eq!(done["toolCalls"].as_array().unwrap().len(), 3);
    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    let results: Vec<&str> = tool_messages(&requests[3])
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(results, vec!["r1", "r2", "r3"], "every result, in order");
}

#[tokio::test]
async fn parallel_calls_in_one_round_all_run() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    llm.push(openai_tool_calls(
        "",
        &[
            ("call_a", "mcp__fx__echo", json!({"text": "first"})),
            ("call_b", "mcp__fx__echo", json!({"text": "second"})),
            ("call_c", "mcp__fx__nope", json!({})),
            ("call_d", "mcp__fx__echo", json!({"text": 42})),
        ],
    ));
    llm.push(openai_text("ok"));

    let mut stream = ChatStream::open(&app, "u", chat_body("both")).await;
    let (_, done) = stream.finish().await;
    let calls = done["toolCalls"].as_array().unwrap();
    assert_eq!(calls.len(), 4, "{done}");
    assert_eq!(calls[0]["response"][0]["text"], "first");
    assert_eq!(calls[1]["response"][0]["text"], "second");
    assert_eq!(calls[2]["status"], "error", "an unknown tool fails alone");
    let results = tool_messages(&llm.requests()[1])
        .iter()
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect::<Vec<_>>();
    assert_eq!(results[0], ("call_a".into(), "first".into()));
    assert_eq!(results[1], ("call_b".into(), "second".into()));
    assert!(
        results[2].1.contains("Unknown or disabled tool"),
        "{results:?}"
    );
    assert_eq!(
        calls[3]["status"], "error",
        "arguments are checked before the call"
    );
    assert!(results[3].1.contains("input schema"), "{results:?}");
}

#[tokio::test]
async fn a_provider_that_goes_silent_times_out_with_a_clear_error() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |s| s.llm.stream_idle_timeout_secs = 1).await;
    let mut events = openai_text_events("Partial answ");
    events.truncate(3);
    llm.push(Reply::Stall(events));
    let mut stream = ChatStream::open(&app, "u", chat_body("hello")).await;
    let (name, failed) = stream.finish().await;
    assert_eq!(name, "chat.error", "{failed}");
    assert_eq!(failed["error"]["code"], "LLM_TIMEOUT");
    assert_eq!(
        llm.requests().len(),
        1,
        "nothing is retried once text was streamed"
    );
    assert_eq!(stream.text(), "Partial ", "the client saw what arrived");
    let message = failed["messageId"].as_str().unwrap();
    let stored = app
        .user("u", Method::GET, &format!("/api/messages/{message}"), None)
        .await;
    assert_eq!(stored.body["role"], "assistant");
}

#[tokio::test]
async fn a_parked_call_approved_mid_stream_runs_and_the_turn_continues() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    llm.push(openai_tool_calls(
        "",
        &[("call_add", "mcp__fx__add", json!({"a": 1, "b": 2}))],
    ));
    llm.push(openai_text("1 + 2 = 3"));

    let mut stream = ChatStream::open(&app, "u", chat_body("add 1 and 2")).await;
    let pending = stream.until_tool_status("pending").await;
    assert_eq!(llm.requests().len(), 1, "the model waits for the decision");
    app.confirm_ok(pending["messageId"].as_str().unwrap(), "call_add", true)
        .await;
    let (name, done) = stream.finish().await;
    assert_eq!(name, "message.completed", "{done}");
    assert_eq!(done["toolCalls"][0]["status"], "done");
    assert_eq!(tool_messages(&llm.requests()[1])[0]["content"], "3");
    assert_eq!(done["content"], "1 + 2 = 3");
}

#[tokio::test]
async fn a_rejection_is_told_to_the_model() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    llm.push(openai_tool_calls(
        "",
        &[("call_add", "mcp__fx__add", json!({"a": 1, "b": 2}))],
    ));
    llm.push(openai_text("Understood, I will not add."));

    let mut stream = ChatStream::open(&app, "u", chat_body("add")).await;
    let pending = stream.until_tool_status("pending").await;
    app.confirm_ok(pending["messageId"].as_str().unwrap(), "call_add", false)
        .await;
    let (_, done) = stream.finish().await;
    assert_eq!(done["toolCalls"][0]["status"], "cancelled", "{done}");
    let told = tool_messages(&llm.requests()[1])[0]["content"].clone();
    assert!(told.as_str().unwrap().contains("rejected"), "{told}");
    assert_eq!(done["finishReason"], "stop");
}

#[tokio::test]
async fn the_round_limit_ends_the_turn_without_running_the_last_calls() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    for round in 1..=2 {
        llm.push(openai_tool_calls(
            "",
            &[(
                &format!("call_{round}"),
                "mcp__fx__echo",
                json!({"text": "again"}),
            )],
        ));
    }
    let mut body = chat_body("loop forever");
    body["maxRounds"] = json!(2);
    let mut stream = ChatStream::open(&app, "u", body).await;
    let (_, done) = stream.finish().await;
    assert_eq!(done["finishReason"], "max_rounds", "{done}");
    assert_eq!(llm.requests().len(), 2, "no request after the last round");
    let calls = done["toolCalls"].as_array().unwrap();
    assert_eq!(calls[0]["status"], "done");
    assert_eq!(calls[1]["status"], "cancelled");
    assert!(
        calls[1]["response"]
            .as_str()
            .unwrap()
            .contains("limit of 2")
    );
}

#[tokio::test]
async fn provider_failures_are_retried_then_reported() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |s| s.llm.max_retries = 2).await;
    // A 429 with Retry-After: retried, and the client is told.
    llm.push(Reply::Status(
        429,
        json!({"error": {"message": "slow down"}}),
        Some(0),
    ));
    llm.push(openai_text("after the wait"));
    let mut stream = ChatStream::open(&app, "u", chat_body("one")).await;
    let (name, done) = stream.finish().await;
    assert_eq!(name, "message.completed", "{done}");
    let retry = stream
        .seen
        .iter()
        .find(|(n, _)| n == "llm.retrying")
        .expect("a retry event");
    assert_eq!(retry.1["error"]["code"], "LLM_RATE_LIMITED");
    assert_eq!(done["content"], "after the wait");

    // 500 on every attempt: three requests, then an error event with the provider's words.
    for _ in 0..3 {
        llm.push(Reply::Status(
            500,
            json!({"error": {"message": "upstream exploded"}}),
            None,
        ));
    }
    let before = llm.requests().len();
    let mut stream = ChatStream::open(&app, "u", chat_body("two")).await;
    let (name, failed) = stream.finish().await;
    assert_eq!(name, "chat.error");
    assert_eq!(failed["error"]["code"], "LLM_PROVIDER_ERROR");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("upstream exploded")
    );
    assert_eq!(failed["finishReason"], "error");
    assert_eq!(llm.requests().len() - before, 3);

    // Without streaming, a rate limit is a 429 with Retry-After.
    for _ in 0..3 {
        llm.push(Reply::Status(
            429,
            json!({"error": {"message": "quota"}}),
            Some(1),
        ));
    }
    let reply = app
        .user(
            "u",
            Method::POST,
            "/api/chat/message",
            Some(chat_body("three")),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        reply.text
    );
    assert_eq!(reply.code(), "LLM_RATE_LIMITED");
    assert_eq!(reply.headers["retry-after"], "1");
}

#[tokio::test]
async fn anthropic_tool_use_round_trip() {
    let llm = ScriptedLlm::anthropic().await;
    let app = chat_app(&llm, |_| {}).await;
    llm.push(anthropic_reply(
        "Checking.",
        &[("toolu_1", "mcp__fx__echo", json!({"text": "from claude"}))],
    ));
    llm.push(anthropic_reply("It echoed.", &[]));

    let mut body = chat_body("echo via claude");
    body["systemPrompt"] = json!("Be terse.");
    let mut stream = ChatStream::open(&app, "u", body).await;
    let (name, done) = stream.finish().await;
    assert_eq!(name, "message.completed", "{done}");
    assert_eq!(stream.text(), "Checking.It echoed.");
    assert_eq!(
        done["toolCalls"][0]["arguments"],
        json!({"text": "from claude"})
    );
    assert_eq!(llm.paths(), vec!["/v1/messages", "/v1/messages"]);

    let second = &llm.requests()[1];
    assert_eq!(second["system"], "Be terse.");
    assert_eq!(second["tools"][0]["input_schema"]["type"], "object");
    let roles: Vec<&str> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, vec!["user", "assistant", "user"]);
    let assistant = &second["messages"][1]["content"];
    assert_eq!(assistant[1]["type"], "tool_use");
    assert_eq!(assistant[1]["input"], json!({"text": "from claude"}));
    let result = &second["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_1");
    assert_eq!(result["content"], "from claude");
}

#[tokio::test]
async fn prompt_mode_parses_instructions_from_plain_text() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    // A trailing comma and prose around the block, as such models write it.
    llm.push(openai_text(
        "I'll use the tool.\n```json\n{\"type\": \"use_mcp_tool\", \"server_name\": \"fx\", \"tool_name\": \"echo\", \"arguments\": {\"text\": \"prompted\"},}\n```",
    ));
    llm.push(openai_text("The echo was: prompted"));

    let mut body = chat_body("echo in prompt mode");
    body["model"]["name"] = json!("plain-model");
    let mut stream = ChatStream::open(&app, "u", body).await;
    let (_, done) = stream.finish().await;
    assert_eq!(done["finishReason"], "stop", "{done}");
    assert_eq!(done["toolCalls"][0]["status"], "done");
    assert_eq!(done["toolCalls"][0]["displayName"], "mcp__fx__echo");
    assert!(
        !stream.text().contains("use_mcp_tool"),
        "instructions are not shown: {}",
        stream.text()
    );
    assert_eq!(
        done["content"],
        "I'll use the tool.\n\nThe echo was: prompted"
    );

    let requests = llm.requests();
    assert!(
        requests[0].get("tools").is_none(),
        "no native tools in prompt mode"
    );
    let system = requests[0]["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("use_mcp_tool") && system.contains("\"echo\""),
        "{system}"
    );
    let last = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .starts_with("Tool results:")
    );
    assert!(last["content"].as_str().unwrap().contains("prompted"));
}

#[tokio::test]
async fn a_second_turn_sends_the_whole_history() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    llm.push(openai_tool_calls(
        "",
        &[("call_1", "mcp__fx__echo", json!({"text": "one"}))],
    ));
    llm.push(openai_text("first answer"));
    llm.push(openai_text("second answer"));

    let reply = app
        .user(
            "u",
            Method::POST,
            "/api/chat/message",
            Some(chat_body("first")),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["content"], "first answer");
    let conversation = reply.body["conversationId"].as_str().unwrap().to_owned();

    let mut body = chat_body("second");
    body["conversationId"] = json!(conversation);
    let reply = app
        .user("u", Method::POST, "/api/chat/message", Some(body))
        .await;
    assert_eq!(reply.body["content"], "second answer", "{}", reply.text);

    let third = &llm.requests()[2];
    let shape: Vec<String> = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}:{}",
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            "user:first",
            "assistant:",
            "tool:one",
            "assistant:first answer",
            "user:second"
        ]
    );
    let stored = app
        .user(
            "u",
            Method::GET,
            &format!("/api/chat/conversations/{conversation}"),
            None,
        )
        .await;
    assert_eq!(stored.body["messages"].as_array().unwrap().len(), 4);
    // Another user cannot read it.
    let other = app
        .user(
            "v",
            Method::GET,
            &format!("/api/chat/conversations/{conversation}"),
            None,
        )
        .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    assert_eq!(other.code(), "CONVERSATION_NOT_FOUND");
}

#[tokio::test]
async fn closing_the_stream_stops_the_turn_and_cancels_parked_calls() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    llm.push(openai_tool_calls(
        "",
        &[("call_add", "mcp__fx__add", json!({"a": 1, "b": 1}))],
    ));

    let mut stream = ChatStream::open(&app, "u", chat_body("add")).await;
    let created = stream.next().await.unwrap();
    let conversation = created.1["conversationId"].as_str().unwrap().to_owned();
    let pending = stream.until_tool_status("pending").await;
    let message = pending["messageId"].as_str().unwrap().to_owned();
    drop(stream);

    eventually("the parked call is cancelled", || async {
        let stored = app
            .user("u", Method::GET, &format!("/api/messages/{message}"), None)
            .await;
        stored.body["toolCalls"][0]["status"] == "cancelled"
    })
    .await;
    let stored = app
        .user("u", Method::GET, &format!("/api/messages/{message}"), None)
        .await;
    assert!(
        stored.body["toolCalls"][0]["response"]
            .as_str()
            .unwrap()
            .contains("closed")
    );
    assert_eq!(llm.requests().len(), 1, "the model is not asked again");
    // The conversation is free for the next turn once the closed one has wound up (it
    // stores its end after cancelling, so a moment of 409 is expected, not more).
    llm.push(openai_text("fresh start"));
    let mut body = chat_body("again");
    body["conversationId"] = json!(conversation);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let reply = loop {
        let reply = app
            .user("u", Method::POST, "/api/chat/message", Some(body.clone()))
            .await;
        if reply.status != StatusCode::CONFLICT || std::time::Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
}

#[tokio::test]
async fn bad_chat_requests_get_clear_errors() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |settings| {
        settings.llm.providers.insert(
            "keyed".into(),
            mcp_pool::config::ProviderSettings {
                kind: mcp_pool::config::ProviderKind::Openai,
                base_url: llm.base_url.clone(),
                api_key_env: "MCP_POOL_TEST_KEY_THAT_IS_NEVER_SET".into(),
                models: vec!["only-this".into()],
                prompt_mode_models: vec![],
            },
        );
    })
    .await;
    let cases: Vec<(Value, StatusCode, &str)> = vec![
        (
            json!({"model": {"provider": "nope", "name": "x"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "LLM_PROVIDER_NOT_FOUND",
        ),
        (
            json!({"model": {"provider": "keyed", "name": "other"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "LLM_MODEL_NOT_ALLOWED",
        ),
        (
            json!({"model": {"provider": "keyed", "name": "only-this"}}),
            StatusCode::SERVICE_UNAVAILABLE,
            "LLM_NOT_CONFIGURED",
        ),
        (
            json!({"message": "   "}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
        (
            json!({"maxRounds": 0}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
        (
            json!({"maxRounds": 21}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
        (
            json!({"message": "x".repeat(70_000)}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
        (
            json!({"conversationId": "not-a-uuid"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
        (
            json!({"model": {"provider": "scripted", "name": "m", "toolMode": "telepathy"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
        (
            json!({"surprise": true}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "VALIDATION_ERROR",
        ),
    ];
    for (patch, status, code) in cases {
        let mut body = chat_body("hello");
        for (key, value) in patch.as_object().unwrap() {
            body[key] = value.clone();
        }
        let reply = app
            .user("u", Method::POST, "/api/chat", Some(body.clone()))
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{body}: {}",
            reply.text
        );
    }
    assert!(llm.requests().is_empty(), "nothing reached the provider");

    // Another user's conversation is not found; a busy one is a conflict.
    llm.push(openai_tool_calls(
        "",
        &[("c", "mcp__fx__add", json!({"a": 1, "b": 1}))],
    ));
    let mut stream = ChatStream::open(&app, "u", chat_body("park")).await;
    let conversation = stream.next().await.unwrap().1["conversationId"].clone();
    stream.until_tool_status("pending").await;
    let mut body = chat_body("meanwhile");
    body["conversationId"] = conversation;
    let other = app
        .user("v", Method::POST, "/api/chat", Some(body.clone()))
        .await;
    assert_eq!(other.code(), "CONVERSATION_NOT_FOUND", "{}", other.text);
    let busy = app.user("u", Method::POST, "/api/chat", Some(body)).await;
    assert_eq!(
        (busy.status, busy.code()),
        (StatusCode::CONFLICT, "CONFLICT")
    );
}

#[tokio::test]
async fn chat_tools_lists_the_assistants_tools() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |_| {}).await;
    let reply = app
        .user("u", Method::GET, "/api/chat/tools?assistantId=a1", None)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let tools = reply.body["tools"].as_array().unwrap();
    let echo = tools.iter().find(|t| t["toolName"] == "echo").unwrap();
    assert_eq!(echo["serverName"], "fx");
    assert_eq!(echo["displayName"], "mcp__fx__echo");
    assert_eq!(echo["autoApprove"], true);
    assert_eq!(echo["inputSchema"]["required"], json!(["text"]));
    let missing = app.user("u", Method::GET, "/api/chat/tools", None).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST, "{}", missing.text);
}

#[tokio::test]
async fn chat_turns_over_the_limit_get_429_before_reaching_the_provider() {
    let llm = ScriptedLlm::openai().await;
    let app = chat_app(&llm, |s| s.limits.chats_per_minute = 1).await;
    llm.push(openai_text("First and only."));
    let mut stream = ChatStream::open(&app, "u", chat_body("one")).await;
    let (name, done) = stream.finish().await;
    assert_eq!(name, "message.completed", "{done}");

    let second = app
        .user(
            "u",
            Method::POST,
            "/api/chat/message",
            Some(chat_body("two")),
        )
        .await;
    assert_eq!(
        second.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        second.text
    );
    assert_eq!(second.code(), "RATE_LIMITED");
    assert!(second.headers.contains_key("retry-after"));
    assert_eq!(
        llm.requests().len(),
        1,
        "the provider saw only the first turn"
    );
}

#[tokio::test]
async fn a_servers_question_during_a_turn_is_on_the_chat_stream_and_answered_through_the_api() {
    let llm = ScriptedLlm::openai().await;
    let app = spawn_pool_app_with(|settings| {
        llm.configure(settings, "scripted", &["plain-model"]);
    })
    .await;
    let upstream = crate::upstreams::HttpUpstream::conformance_server().await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "every", "baseUrl": format!("{}/mcp", upstream.base),
                   "autoApproveTools": ["test_elicitation"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&server]).await;
    // The everything-server drops a question sent before the pool's GET stream is open.
    app.user(
        "u",
        Method::POST,
        &format!("/api/mcp-servers/{server}/connect"),
        None,
    )
    .await;
    llm.push(openai_tool_calls(
        "Let me ask.",
        &[(
            "call_1",
            "mcp__every__test_elicitation",
            json!({"message": "Your name?"}),
        )],
    ));
    llm.push(openai_text("Thanks."));

    let mut stream = ChatStream::open(&app, "u", chat_body("ask me")).await;
    let question = loop {
        let (name, data) = stream.next().await.expect("the stream goes on");
        if name == "mcp.elicitation.requested" {
            break data;
        }
    };
    assert_eq!(question["message"], "Your name?", "{question}");
    let answered = app
        .user(
            "u",
            Method::POST,
            &format!("/api/elicitations/{}", question["id"].as_str().unwrap()),
            Some(json!({"action": "accept", "content": {"response": "Alice"}})),
        )
        .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    let (name, done) = stream.finish().await;
    assert_eq!(name, "message.completed", "{done}");
    let response = done["toolCalls"][0]["response"].to_string();
    assert!(
        response.contains("action=accept") && response.contains("Alice"),
        "{response}"
    );
}
