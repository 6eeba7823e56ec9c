//! A server's questions back (elicitation) reach the caller of the call they belong to:
//! the gateway client that made it, or for a REST call its user (event stream, then
//! `POST /api/elicitations/{id}`), and nobody else; nobody answers on the user's behalf.

use reqwest::{Method, StatusCode};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ElicitRequestParams, ElicitResult, ElicitationAction};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ErrorData, RoleClient};
use serde_json::json;

use crate::helpers::{TestApp, spawn_pool_app};
use crate::tasks::discover;
use crate::upstreams::{HttpUpstream, text_of};

/// A gateway client whose user answers every question with `answer`.
#[derive(Clone)]
struct Answering {
    answer: &'static str,
}

impl rmcp::ClientHandler for Answering {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "answering", "version": "1"}
        }))
        .unwrap()
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"response": self.answer})))
    }
}

pub async fn setup(app: &TestApp, user: &str, upstream: &HttpUpstream) -> String {
    let server = app
        .create_server_ok(
            user,
            json!({"name": "every", "baseUrl": format!("{}/mcp", upstream.base),
                   "autoApproveTools": ["test_elicitation"]}),
        )
        .await;
    app.bind_ok(user, "a1", [&server]).await;
    let created = app
        .user(
            user,
            Method::POST,
            "/api/assistants/a1/gateway-tokens",
            Some(json!({"name": "t"})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    created.body["token"].as_str().unwrap().to_owned()
}

fn ask(message: &str) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new("every__test_elicitation");
    params.arguments = json!({"message": message}).as_object().cloned();
    params
}

#[tokio::test]
async fn a_servers_question_reaches_the_gateway_client_of_its_own_call_only() {
    let app = spawn_pool_app().await;
    let upstream = HttpUpstream::conformance_server().await;
    let alice_token = setup(&app, "alice", &upstream).await;
    let bob_token = setup(&app, "bob", &upstream).await;
    let connect = |token: String, answer: &'static str| {
        let config = app.gateway_client_config("a1", &token);
        async move {
            Answering { answer }
                .serve(StreamableHttpClientTransport::from_config(config))
                .await
                .unwrap()
        }
    };
    let alice = connect(alice_token, "from alice").await;
    let bob = connect(bob_token, "from bob").await;

    // The server's question goes to the gateway client that made the call. (The
    // everything-server drops a question it sends before the client's GET stream is
    // open: a first call may come back without an answer.)
    let mut said = String::new();
    for _ in 0..3 {
        let (for_alice, for_bob) =
            tokio::join!(alice.call_tool(ask("alice?")), bob.call_tool(ask("bob?")));
        let (for_alice, for_bob) = (for_alice.unwrap(), for_bob.unwrap());
        said = format!("{:?} | {:?}", for_alice.content, for_bob.content);
        if said.contains("action=accept") && said.matches("action=accept").count() == 2 {
            break;
        }
    }
    let (alices, bobs) = said.split_once(" | ").unwrap();
    assert!(
        alices.contains("from alice") && !alices.contains("from bob"),
        "{said}"
    );
    assert!(
        bobs.contains("from bob") && !bobs.contains("from alice"),
        "{said}"
    );
}

/// The next `mcp.elicitation.requested` on a user's event stream.
pub async fn next_question(
    events: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
) -> serde_json::Value {
    use futures::StreamExt;
    let mut text = String::new();
    loop {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(20), events.next())
            .await
            .expect("a question within 20 s")
            .expect("the stream goes on")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(at) = text.find("event: mcp.elicitation.requested") {
            let rest = &text[at..];
            if let Some(data) = rest.lines().find_map(|l| l.strip_prefix("data: "))
                && rest.contains("\n\n")
            {
                return serde_json::from_str(data).unwrap();
            }
        }
    }
}

#[tokio::test]
async fn a_rest_calls_question_is_parked_for_its_user_and_answered_through_the_api() {
    let app = crate::helpers::spawn_pool_app_with(|s| s.elicitation.timeout_secs = 2).await;
    let upstream = HttpUpstream::conformance_server().await;
    setup(&app, "alice", &upstream).await;
    let server = server_of(&app, "alice").await;
    let mut events = app.events("alice").await;
    // The everything-server drops a question sent before the pool's GET stream is open:
    // connect first.
    assert_eq!(
        app.user(
            "alice",
            Method::POST,
            &format!("/api/mcp-servers/{server}/connect"),
            None
        )
        .await
        .status,
        StatusCode::OK
    );
    let call = {
        let (app, server) = (&app, server.clone());
        async move {
            app.call(
                "alice",
                &server,
                "test_elicitation",
                json!({"message": "Your name?"}),
            )
            .await
        }
    };
    let answering = async {
        let question = next_question(&mut events).await;
        assert_eq!(question["message"], "Your name?", "{question}");
        assert_eq!(question["mode"], "form");
        assert_eq!(question["serverId"], server.as_str());
        assert!(
            question["requestedSchema"]["properties"]["response"].is_object(),
            "{question}"
        );
        let id = question["id"].as_str().unwrap().to_owned();
        let path = format!("/api/elicitations/{id}");
        // Only its user can answer it.
        let foreign = app
            .user(
                "bob",
                Method::POST,
                &path,
                Some(json!({"action": "accept", "content": {"response": "bob"}})),
            )
            .await;
        assert_eq!(foreign.code(), "ELICITATION_NOT_FOUND", "{}", foreign.text);
        // The content must match the schema.
        let wrong = app
            .user(
                "alice",
                Method::POST,
                &path,
                Some(json!({"action": "accept", "content": {"response": 7}})),
            )
            .await;
        assert_eq!(
            (wrong.status, wrong.code()),
            (StatusCode::UNPROCESSABLE_ENTITY, "INVALID_ARGUMENTS"),
            "{}",
            wrong.text
        );
        let answered = app
            .user(
                "alice",
                Method::POST,
                &path,
                Some(json!({"action": "accept", "content": {"response": "Alice"}})),
            )
            .await;
        assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
        let again = app
            .user(
                "alice",
                Method::POST,
                &path,
                Some(json!({"action": "decline"})),
            )
            .await;
        assert_eq!(
            again.code(),
            "ELICITATION_NOT_FOUND",
            "answered once: {}",
            again.text
        );
    };
    let (reply, ()) = tokio::join!(call, answering);
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let text = text_of(&reply.body);
    assert!(
        text.contains("action=accept") && text.contains("Alice"),
        "{text}"
    );

    // Declined: the server hears exactly that.
    let declining = async {
        let question = next_question(&mut events).await;
        let id = question["id"].as_str().unwrap();
        let declined = app
            .user(
                "alice",
                Method::POST,
                &format!("/api/elicitations/{id}"),
                Some(json!({"action": "decline"})),
            )
            .await;
        assert_eq!(declined.status, StatusCode::OK, "{}", declined.text);
    };
    let asking = app.call(
        "alice",
        &server,
        "test_elicitation",
        json!({"message": "Your age?"}),
    );
    let (reply, ()) = tokio::join!(asking, declining);
    let text = text_of(&reply.body);
    assert!(text.contains("action=decline"), "{text}");

    // Unanswered, the question is withdrawn as a cancel, not answered for the user.
    let reply = app
        .call(
            "alice",
            &server,
            "test_elicitation",
            json!({"message": "Anyone?"}),
        )
        .await;
    let text = text_of(&reply.body);
    assert!(text.contains("action=cancel"), "{text}");
}

pub async fn server_of(app: &TestApp, user: &str) -> String {
    let listed = app.user(user, Method::GET, "/api/mcp-servers", None).await;
    listed.body["servers"][0]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn questions_of_concurrent_calls_reach_their_user_on_the_event_stream() {
    // Two REST calls in flight on one upstream session: a question cannot be tied to
    // either, so it goes to the connection's user, never nowhere and never to another.
    let app = spawn_pool_app().await;
    let upstream = HttpUpstream::everything("streamableHttp").await;
    let server = app
        .create_server_ok(
            "alice",
            json!({"name": "every", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    let mut events = app.events("alice").await;
    let ask = || app.call("alice", &server, "trigger-elicitation-request", json!({}));
    let answering = async {
        use futures::StreamExt;
        // Both questions may come in one chunk: read events off one buffer.
        let (mut buffer, mut answered) = (String::new(), 0);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        while answered < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{answered} of 2 questions reached the user"
            );
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                if !block.contains("event: mcp.elicitation.requested") {
                    continue;
                }
                let data = block
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .unwrap();
                let question: serde_json::Value = serde_json::from_str(data).unwrap();
                let id = question["id"].as_str().unwrap();
                let reply = app
                    .user(
                        "alice",
                        Method::POST,
                        &format!("/api/elicitations/{id}"),
                        Some(json!({"action": "accept", "content": {"name": "Alice"}})),
                    )
                    .await;
                assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
                answered += 1;
            }
            let chunk = tokio::time::timeout(std::time::Duration::from_secs(20), events.next())
                .await
                .expect("both questions within 20 s")
                .unwrap()
                .unwrap();
            buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    let (first, second, ()) = tokio::join!(ask(), ask(), answering);
    for reply in [first, second] {
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert!(
            text_of(&reply.body).contains("User provided the requested information"),
            "{}",
            reply.text
        );
    }
}

/// A 2026-07-28 gateway client (no session, no server-to-client requests) whose user
/// answers every question with `answer`.
#[derive(Clone)]
struct RoundAnswering;

impl rmcp::ClientHandler for RoundAnswering {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2026-07-28",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "round-answering", "version": "1"}
        }))
        .unwrap()
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"response": "in rounds"})))
    }
}

#[tokio::test]
async fn a_2026_07_28_client_answers_a_servers_question_in_rounds() {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let app = spawn_pool_app().await;
    let upstream = HttpUpstream::conformance_server().await;
    let token = setup(&app, "alice", &upstream).await;
    let server = server_of(&app, "alice").await;
    // The everything-server drops a question sent before the pool's GET stream is open.
    app.user(
        "alice",
        Method::POST,
        &format!("/api/mcp-servers/{server}/connect"),
        None,
    )
    .await;
    let config = app.gateway_client_config("a1", &token);
    let client = RoundAnswering
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(config),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    // The gateway returns the question as an InputRequiredResult; rmcp's client answers
    // it through its handler and retries with the answer and the requestState.
    let result = client.call_tool(ask("Your name?")).await.unwrap();
    let said = result.content[0].as_text().unwrap().text.clone();
    assert!(
        said.contains("action=accept") && said.contains("in rounds"),
        "{said}"
    );
}

/// A server of both revisions shows a 2025-11-25 client what it keeps from 2026-07-28
/// ones (here a tool that asks by server-to-client request): through the gateway such a
/// client gets it too, and its question, although the pool speaks 2026-07-28 to the server
/// on its own account.
#[tokio::test]
async fn a_2025_11_25_client_gets_what_a_server_of_both_revisions_shows_its_revision() {
    let app = spawn_pool_app().await;
    let upstream = HttpUpstream::fixture_with(&[]).await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "baseUrl": format!("{}/mcp", upstream.base), "autoApproveTools": ["ask_session", "echo"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&server]).await;
    let token = app.gateway_token("u", "a1").await;
    // The pool's own session is the newest revision.
    let connected = app.connect("u", &server).await;
    assert_eq!(
        connected.body["protocolVersion"], "2026-07-28",
        "{}",
        connected.text
    );

    let client = Answering {
        answer: "from 2025",
    }
    .serve(StreamableHttpClientTransport::from_config(
        app.gateway_client_config("a1", &token),
    ))
    .await
    .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == "fx__ask_session"),
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    let mut params = CallToolRequestParams::new("fx__ask_session");
    params.arguments = Some(Default::default());
    let asked = client.call_tool(params).await.unwrap();
    assert_eq!(
        asked.content[0].as_text().unwrap().text,
        "answered: from 2025",
        "{asked:?}"
    );
    // A 2026-07-28 client is shown what the server shows its revision.
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let modern = RoundAnswering
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(app.gateway_client_config("a1", &token)),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    let tools = modern.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "fx__echo"));
    assert!(
        !tools.iter().any(|t| t.name == "fx__ask_session"),
        "{tools:?}"
    );
}

/// Behind a load balancer a user's answer may reach another instance than the one whose
/// connection asked: it is handed to that instance (checked there, answered once), as
/// approvals are. Instances talk over PostgreSQL; on SQLite there is one instance.
#[tokio::test]
async fn a_question_is_answered_through_another_instance() {
    let app = crate::helpers::spawn_pool_app_with(|s| s.elicitation.timeout_secs = 20).await;
    if !app.on_postgres() {
        return;
    }
    let other = app.another_instance().await;
    let upstream = HttpUpstream::conformance_server().await;
    setup(&app, "alice", &upstream).await;
    let server = server_of(&app, "alice").await;
    let mut events = app.events("alice").await;
    assert_eq!(app.connect("alice", &server).await.status, StatusCode::OK);
    let call = {
        let (app, server) = (&app, server.clone());
        async move {
            app.call(
                "alice",
                &server,
                "test_elicitation",
                json!({"message": "Your name?"}),
            )
            .await
        }
    };
    let answering = async {
        let question = next_question(&mut events).await;
        let path = format!("/api/elicitations/{}", question["id"].as_str().unwrap());
        // Checked where it waits: the schema's problems come back.
        let wrong = other
            .user(
                "alice",
                Method::POST,
                &path,
                Some(json!({"action": "accept", "content": {"response": 7}})),
            )
            .await;
        assert_eq!(wrong.code(), "INVALID_ARGUMENTS", "{}", wrong.text);
        let foreign = other
            .user(
                "bob",
                Method::POST,
                &path,
                Some(json!({"action": "decline"})),
            )
            .await;
        assert_eq!(foreign.code(), "ELICITATION_NOT_FOUND", "{}", foreign.text);
        let answered = other
            .user(
                "alice",
                Method::POST,
                &path,
                Some(json!({"action": "accept", "content": {"response": "Elsewhere"}})),
            )
            .await;
        assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
        let again = other
            .user(
                "alice",
                Method::POST,
                &path,
                Some(json!({"action": "decline"})),
            )
            .await;
        assert_eq!(
            again.code(),
            "ELICITATION_NOT_FOUND",
            "answered once: {}",
            again.text
        );
    };
    let (reply, ()) = tokio::join!(call, answering);
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(text_of(&reply.body).contains("Elsewhere"), "{}", reply.text);
}

/// Behind a load balancer a 2026-07-28 client's retry of a round may reach another
/// instance than the one whose call asked: it is handed there, and what the round came to
/// (here the call's result) comes back. Instances talk over PostgreSQL; on SQLite there is
/// one instance.
#[tokio::test]
async fn a_round_is_resumed_through_another_instance() {
    let app = spawn_pool_app().await;
    if !app.on_postgres() {
        return;
    }
    let other = app.another_instance().await;
    let mut preset = crate::upstreams::fixture_preset();
    preset["name"] = json!("task-fixture");
    preset["args"] = json!(["stdio", "--task-tools"]);
    app.create_preset_ok(preset).await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "preset": "task-fixture", "autoApproveTools": ["confirm_delete"]}),
        )
        .await;
    app.bind_ok("u", "a1", [&server]).await;
    let token = app.gateway_token("u", "a1").await;
    let here = discover(&app, "a1", &token, RoundAnswering).await;
    let there = discover(&other, "a1", &token, RoundAnswering).await;
    let mut params = CallToolRequestParams::new("fx__confirm_delete");
    params.arguments = Some(
        json!({"filename": "notes.txt"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let first = here.call_tool_once(params.clone()).await.unwrap();
    let rmcp::model::CallToolResponse::InputRequired(asked) = first else {
        panic!("the server's question comes back as a round: {first:?}")
    };
    let (key, _) = asked
        .input_requests
        .as_ref()
        .and_then(|requests| requests.iter().next())
        .expect("one question");
    params.input_responses = Some(
        [(
            key.clone(),
            json!({"action": "accept", "content": {"confirm": true}}),
        )]
        .into(),
    );
    params.request_state = asked.request_state.clone();
    let resumed = there.call_tool_once(params.clone()).await.unwrap();
    let rmcp::model::CallToolResponse::Complete(result) = resumed else {
        panic!("the retry through the other instance gets the call's result: {resumed:?}")
    };
    assert_eq!(
        result.content[0].as_text().unwrap().text,
        "deleted notes.txt",
        "{result:?}"
    );
    // Resumed once: the same retry again is refused, wherever it goes.
    let again = here.call_tool_once(params).await;
    assert!(again.is_err(), "{again:?}");
}

/// A 2026-07-28 gateway client whose user answers a name.
#[derive(Clone)]
struct NameAnswering;

impl rmcp::ClientHandler for NameAnswering {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2026-07-28",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "name-answering", "version": "1"}
        }))
        .unwrap()
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": "Ada"})))
    }
}

/// A 2026-07-28 server's round on `resources/read` goes to the 2026-07-28 gateway client
/// that read it, as its rounds on `tools/call` and `prompts/get` do (the pool answered it
/// itself, asking the user's event stream, where nobody waited).
#[tokio::test]
async fn a_2026_07_28_client_answers_a_resources_round_itself() {
    let app = crate::helpers::spawn_pool_app_with(|s| s.elicitation.timeout_secs = 2).await;
    let upstream = HttpUpstream::fixture_with(&[]).await;
    let server = app
        .create_server_ok(
            "u",
            json!({"name": "fx", "baseUrl": format!("{}/mcp", upstream.base)}),
        )
        .await;
    app.bind_ok("u", "a1", [&server]).await;
    let token = app.gateway_token("u", "a1").await;
    let client = discover(&app, "a1", &token, NameAnswering).await;
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "fixture://asking",
        ))
        .await
        .unwrap();
    let text = match &read.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("text: {other:?}"),
    };
    assert_eq!(text, "hello Ada");
}
