//! What a server that asks too much can make the service hold or do: questions
//! (elicitation) and sampling requests are capped, a URL-mode question never sends the
//! user to a script, a global server's question is refused at once, and a question's
//! schema defaults are filled in for the user (SEP-1034). The server is the fixture over
//! stdio with `--asking-tools`.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_pool_app_with};
use crate::llm_script::ScriptedLlm;
use crate::upstreams::{fixture_binary, text_of};

/// User `u`'s fixture server with the asking tools, every tool auto-approved.
async fn asking_server(app: &TestApp, extra: Value) -> String {
    app.create_preset_ok(json!({
        "name": "asker",
        "command": fixture_binary(),
        "args": ["stdio", "--asking-tools"],
    }))
    .await;
    let mut body = json!({
        "name": "asker",
        "preset": "asker",
        "autoApproveTools": ["ask_many", "ask_url", "sample"],
    });
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    app.create_server_ok("u", body).await
}

/// The tool's text answer, parsed when it is JSON.
async fn call(app: &TestApp, server: &str, tool: &str, arguments: Value) -> String {
    let reply = app.call("u", server, tool, arguments).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    text_of(&reply.body).to_owned()
}

#[tokio::test]
async fn a_server_cannot_park_more_questions_than_its_limit() {
    let app = spawn_pool_app_with(|s| {
        // Unanswered questions end quickly as cancelled.
        s.elicitation.timeout_secs = 1;
        s.elicitation.max_open_per_server = 4;
    })
    .await;
    let server = asking_server(&app, json!({})).await;
    let outcome: Value =
        serde_json::from_str(&call(&app, &server, "ask_many", json!({"count": 40})).await).unwrap();
    assert_eq!(
        outcome["cancel"], 4,
        "four were parked, then withdrawn: {outcome}"
    );
    assert_eq!(outcome["error"], 36, "the rest refused at once: {outcome}");
    assert!(
        outcome["firstError"]
            .as_str()
            .is_some_and(|e| e.contains("at most 4")),
        "the server is told why: {outcome}"
    );
}

#[tokio::test]
async fn a_url_question_never_sends_the_user_to_a_script_or_plain_http() {
    let app = spawn_pool_app_with(|s| {
        s.elicitation.timeout_secs = 1;
    })
    .await;
    let server = asking_server(&app, json!({})).await;
    for url in [
        "javascript:alert(document.cookie)",
        "data:text/html,<script>alert(1)</script>",
        "http://phish.example.com/login",
        "https://accounts.example.com@phish.example.com/login",
    ] {
        let answer = call(&app, &server, "ask_url", json!({"url": url})).await;
        assert!(
            answer.starts_with("error:")
                && (answer.contains("https") || answer.contains("user name")),
            "{url} is refused to the server at once: {answer}"
        );
    }
    // An https one is put to the user (and withdrawn unanswered here).
    let answer = call(
        &app,
        &server,
        "ask_url",
        json!({"url": "https://example.com/consent"}),
    )
    .await;
    assert_eq!(answer, r#"answered: "cancel""#);
}

#[tokio::test]
async fn an_accepted_answer_gets_the_schemas_defaults_for_the_fields_left_out() {
    let app = spawn_pool_app_with(|_| {}).await;
    let server = asking_server(&app, json!({})).await;
    let mut events = app.events("u").await;
    let calling = call(&app, &server, "ask_many", json!({"count": 1}));
    let answering = async {
        let question = crate::elicitation::next_question(&mut events).await;
        let id = question["id"].as_str().unwrap();
        let answered = app
            .user(
                "u",
                Method::POST,
                &format!("/api/elicitations/{id}"),
                Some(json!({"action": "accept", "content": {"name": "Ada"}})),
            )
            .await;
        assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    };
    let (answer, ()) = tokio::join!(calling, answering);
    let outcome: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        outcome["contents"],
        json!([{"name": "Ada", "color": "blue"}]),
        "{outcome}"
    );
}

#[tokio::test]
async fn a_global_servers_question_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("servers.toml");
    std::fs::write(
        &file,
        format!(
            "[servers.asker]\ntype = \"stdio\"\ncommand = \"{}\"\nargs = [\"stdio\", \"--asking-tools\"]\nauto_approve_tools = [\"ask_many\"]\n",
            fixture_binary()
        ),
    )
    .unwrap();
    let path = file.display().to_string();
    let app = spawn_pool_app_with(|s| {
        s.global_servers.file = path;
        // Were the question parked, it would end as a cancel after this.
        s.elicitation.timeout_secs = 1;
    })
    .await;
    let record =
        crate::global_servers::call(&app, "mcp__asker__ask_many", json!({"count": 1})).await;
    let text = record["response"][0]["text"].as_str().unwrap_or_default();
    let outcome: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    assert_eq!(outcome["error"], 1, "{record}");
    assert!(
        outcome["firstError"]
            .as_str()
            .is_some_and(|e| e.contains("shared by all users")),
        "{outcome}"
    );
}

#[tokio::test]
async fn a_sampling_prompt_over_the_cap_never_reaches_the_model() {
    let llm = ScriptedLlm::openai().await;
    let app = spawn_pool_app_with(|s| {
        llm.configure(s, "scripted", &[]);
        s.sampling.max_prompt_bytes = 64 * 1024;
    })
    .await;
    let server = asking_server(
        &app,
        json!({"sampling": {"policy": "auto", "provider": "scripted", "model": "small-model"}}),
    )
    .await;
    let answer = call(&app, &server, "sample", json!({"bytes": 2 * 1024 * 1024})).await;
    assert!(
        answer.starts_with("error:") && answer.contains("sampling.max_prompt_bytes"),
        "{answer}"
    );
    assert!(llm.requests().is_empty(), "the model was asked");
}

#[tokio::test]
async fn an_event_without_end_is_cut_at_the_message_limit() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A server whose every answer is an event stream of one `data:` line that never ends.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: ";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'x'; 64 * 1024];
                // 64 MiB at most, then the stream ends.
                for _ in 0..1024 {
                    if socket.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let app = spawn_pool_app_with(|s| s.pool.max_message_bytes = 1024 * 1024).await;
    // Legacy SSE reads it as its event stream, streamable HTTP as the answer to initialize.
    for kind in ["sse", "streamableHttp"] {
        let server = app
            .create_server_ok(
                "u",
                json!({"name": format!("endless-{kind}"), "type": kind, "baseUrl": format!("{base}/mcp")}),
            )
            .await;
        let connected = app.connect("u", &server).await;
        assert_eq!(
            connected.status,
            StatusCode::BAD_GATEWAY,
            "{kind}: {}",
            connected.text
        );
        assert!(
            connected.text.contains("1048576"),
            "{kind}: the error says the stream passed the limit: {}",
            connected.text
        );
    }
}
