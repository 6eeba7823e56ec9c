//! A server's sampling requests during REST calls follow the server's `sampling` policy:
//! denied by default, run on the configured model (`auto`), or put to the user first
//! (`ask`); and `roots/list` answers the server's configured roots. The server is the MCP
//! conformance suite's everything-server (`test_sampling`) and server-everything
//! (`get-roots-list`); the model is a scripted OpenAI-compatible endpoint on loopback.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_pool_app_with};
use crate::llm_script::{ScriptedLlm, openai_text};
use crate::upstreams::{HttpUpstream, text_of};

async fn app_with_model(
    llm: &ScriptedLlm,
    adjust: impl FnOnce(&mut mcp_pool::Settings),
) -> TestApp {
    spawn_pool_app_with(|s| {
        llm.configure(s, "scripted", &[]);
        adjust(s);
    })
    .await
}

/// server-everything for `user` with `sampling` as its policy.
async fn sampling_server(
    app: &TestApp,
    user: &str,
    upstream: &HttpUpstream,
    sampling: Value,
) -> String {
    app.create_server_ok(
        user,
        json!({"name": "every", "baseUrl": format!("{}/mcp", upstream.base), "sampling": sampling}),
    )
    .await
}

async fn sample(app: &TestApp, user: &str, server: &str, prompt: &str) -> String {
    let reply = app
        .call(
            user,
            server,
            "trigger-sampling-request",
            json!({"prompt": prompt, "maxTokens": 100}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    text_of(&reply.body).to_owned()
}

/// The next event called `name` on a user's event stream.
pub async fn next_event(
    events: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    name: &str,
) -> Value {
    use futures::StreamExt;
    let mut text = String::new();
    let marker = format!("event: {name}\n");
    loop {
        if let Some(at) = text.find(&marker) {
            let rest = &text[at..];
            if let Some(end) = rest.find("\n\n") {
                let data = rest[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .expect("the event has data");
                return serde_json::from_str(data).unwrap();
            }
        }
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(20), events.next())
            .await
            .expect("the event within 20 s")
            .expect("the stream goes on")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn sampling_is_denied_by_default_and_a_policy_that_runs_it_must_name_a_model() {
    let llm = ScriptedLlm::openai().await;
    let app = app_with_model(&llm, |_| {}).await;
    let upstream = HttpUpstream::everything("streamableHttp").await;
    let server = sampling_server(&app, "u", &upstream, json!({"policy": "deny"})).await;

    let text = sample(&app, "u", &server, "Hello?").await;
    assert!(
        text.contains("denied"),
        "the server is told sampling is denied: {text}"
    );
    assert!(llm.requests().is_empty(), "no model was asked");

    let shown = app
        .user(
            "u",
            Method::GET,
            &format!("/api/mcp-servers/{server}"),
            None,
        )
        .await;
    assert_eq!(
        shown.body["sampling"],
        json!({"policy": "deny"}),
        "{}",
        shown.text
    );
    let path = format!("/api/mcp-servers/{server}");
    for (sampling, problem) in [
        (json!({"policy": "auto"}), "required"),
        (
            json!({"policy": "ask", "provider": "nope", "model": "m"}),
            "not a configured",
        ),
        (json!({"policy": "always"}), "always"),
    ] {
        let refused = app
            .user("u", Method::PUT, &path, Some(json!({"sampling": sampling})))
            .await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            refused.text
        );
        assert!(
            refused.text.contains(problem),
            "{sampling}: {}",
            refused.text
        );
    }
}

#[tokio::test]
async fn auto_runs_the_request_on_the_servers_configured_model_within_the_token_limit() {
    let llm = ScriptedLlm::openai().await;
    let app = app_with_model(&llm, |s| s.llm.max_tokens = 64).await;
    let upstream = HttpUpstream::everything("streamableHttp").await;
    let server = sampling_server(
        &app,
        "u",
        &upstream,
        json!({"policy": "auto", "provider": "scripted", "model": "small-model"}),
    )
    .await;
    llm.push(openai_text("Paris."));

    let text = sample(&app, "u", &server, "Capital of France?").await;
    assert!(text.contains(r#""text": "Paris.""#), "{text}");
    assert!(text.contains(r#""model": "small-model""#), "{text}");
    let requests = llm.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let request = &requests[0];
    assert_eq!(request["model"], "small-model");
    assert_eq!(
        request["messages"],
        json!([
            {"role": "system", "content": "You are a helpful test server."},
            {"role": "user", "content": "Resource trigger-sampling-request context: Capital of France?"},
        ])
    );
    // The server asked for 100 tokens; the service allows 64.
    assert_eq!(request["max_tokens"], 64);
}

#[tokio::test]
async fn ask_parks_the_request_for_its_user_until_approved_rejected_or_expired() {
    let llm = ScriptedLlm::openai().await;
    let app = app_with_model(&llm, |s| s.sampling.timeout_secs = 2).await;
    let upstream = HttpUpstream::everything("streamableHttp").await;
    let server = sampling_server(
        &app,
        "alice",
        &upstream,
        json!({"policy": "ask", "provider": "scripted", "model": "m"}),
    )
    .await;
    let mut events = app.events("alice").await;
    llm.push(openai_text("Approved answer."));

    // Approved: it runs, and only its user could decide.
    let deciding = async {
        let request = next_event(&mut events, "mcp.sampling.requested").await;
        assert_eq!(request["serverId"], server.as_str());
        assert_eq!(request["model"], "m");
        assert_eq!(
            request["messages"][0]["content"]["text"],
            "Resource trigger-sampling-request context: Tell me a secret",
            "the user sees what the server wants to send: {request}"
        );
        assert!(llm.requests().is_empty(), "nothing runs before approval");
        let path = format!("/api/sampling/{}", request["id"].as_str().unwrap());
        let foreign = app
            .user(
                "bob",
                Method::POST,
                &path,
                Some(json!({"action": "approve"})),
            )
            .await;
        assert_eq!(
            (foreign.status, foreign.code()),
            (StatusCode::NOT_FOUND, "SAMPLING_REQUEST_NOT_FOUND"),
            "{}",
            foreign.text
        );
        let bad = app
            .user(
                "alice",
                Method::POST,
                &path,
                Some(json!({"action": "maybe"})),
            )
            .await;
        assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text);
        let approved = app
            .user(
                "alice",
                Method::POST,
                &path,
                Some(json!({"action": "approve"})),
            )
            .await;
        assert_eq!(approved.status, StatusCode::OK, "{}", approved.text);
        let completed = next_event(&mut events, "mcp.sampling.completed").await;
        assert_eq!(completed["outcome"], "approved");
    };
    let (text, ()) = tokio::join!(sample(&app, "alice", &server, "Tell me a secret"), deciding);
    assert!(text.contains(r#""text": "Approved answer.""#), "{text}");

    // Rejected: the server hears the user said no, and no model is asked.
    let deciding = async {
        let request = next_event(&mut events, "mcp.sampling.requested").await;
        let path = format!("/api/sampling/{}", request["id"].as_str().unwrap());
        let rejected = app
            .user(
                "alice",
                Method::POST,
                &path,
                Some(json!({"action": "reject"})),
            )
            .await;
        assert_eq!(rejected.status, StatusCode::OK, "{}", rejected.text);
    };
    let (text, ()) = tokio::join!(sample(&app, "alice", &server, "Again"), deciding);
    assert!(text.contains("rejected"), "{text}");

    // Unanswered: refused once sampling.timeout_secs pass.
    let text = sample(&app, "alice", &server, "Anyone?").await;
    assert!(text.contains("did not answer"), "{text}");
    assert_eq!(llm.requests().len(), 1, "only the approved request ran");
}

#[tokio::test]
async fn roots_list_answers_the_servers_configured_roots() {
    let app = crate::helpers::spawn_pool_app().await;
    let upstream = HttpUpstream::everything("streamableHttp").await;
    let refused = app
        .user(
            "u",
            Method::POST,
            "/api/mcp-servers",
            Some(
                json!({"name": "every", "baseUrl": format!("{}/mcp", upstream.base),
                        "roots": [{"uri": "https://example.com/"}]}),
            ),
        )
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert!(refused.text.contains("file://"), "{}", refused.text);

    let server = app
        .create_server_ok(
            "u",
            json!({"name": "every", "baseUrl": format!("{}/mcp", upstream.base),
                   "roots": [{"uri": "file:///srv/project", "name": "project"}]}),
        )
        .await;
    let reply = app.call("u", &server, "get-roots-list", json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let text = text_of(&reply.body);
    assert!(
        text.contains("file:///srv/project") && text.contains("project"),
        "{text}"
    );
}

#[tokio::test]
async fn a_sampling_token_quota_counts_what_the_provider_reports_and_refuses_past_it() {
    let llm = ScriptedLlm::openai().await;
    let app = app_with_model(&llm, |_| {}).await;
    let upstream = HttpUpstream::everything("streamableHttp").await;
    let server = sampling_server(
        &app,
        "u",
        &upstream,
        json!({"policy": "auto", "provider": "scripted", "model": "small-model"}),
    )
    .await;
    let bad = app
        .admin(
            Method::PUT,
            "/admin/policies",
            Some(
                json!({"quotas": [{"name": "t", "counts": "samplingTokens", "limit": 10,
                                    "window": "day", "when": "server.name == \"every\""}]}),
            ),
        )
        .await;
    assert_eq!(bad.code(), "VALIDATION_ERROR", "{}", bad.text);
    let saved = app
        .admin(
            Method::PUT,
            "/admin/policies",
            Some(
                json!({"quotas": [{"name": "tokens-daily", "counts": "samplingTokens",
                                    "limit": 10, "window": "day"}]}),
            ),
        )
        .await;
    assert_eq!(saved.status, StatusCode::OK, "{}", saved.text);
    // The scripted provider reports 9 tokens an answer: under 10 after one, past it after two.
    for answer in ["Paris.", "Rome."] {
        llm.push(openai_text(answer));
        let text = sample(&app, "u", &server, "A capital?").await;
        assert!(text.contains(answer), "{text}");
    }
    llm.push(openai_text("never asked"));
    let refused = app
        .call(
            "u",
            &server,
            "trigger-sampling-request",
            json!({"prompt": "More?", "maxTokens": 10}),
        )
        .await;
    assert!(
        refused.text.contains("tokens-daily") && refused.text.contains("sampling tokens"),
        "{}",
        refused.text
    );
    assert_eq!(llm.requests().len(), 2, "the third never reached the model");
    let used = app.admin(Method::GET, "/admin/users/u/quotas", None).await;
    assert_eq!(used.body["quotas"][0]["used"], 18, "{}", used.text);
}
