//! mcp-fixture: a small MCP server with predictable tools, for tests and the load tool.
//!
//! `mcp-fixture stdio` speaks MCP on stdin/stdout. `mcp-fixture http [--port N]` serves
//! streamable HTTP at `/mcp` and the legacy HTTP+SSE transport at `/sse` (+ `POST
//! /message?sessionId=..`), and prints `listening on http://127.0.0.1:PORT` once ready.
//! With `--modern-only`, `/mcp` speaks MCP 2026-07-28 alone: it refuses `initialize` and
//! serves `server/discover` and per-request metadata, without sessions.
//! With `--require-basic USER:PASS` and/or `--require-query NAME=VALUE`, `/mcp` answers 401
//! to a request without those credentials (as servers that take their key in the URL do).
//! With `--tls-cert PEM --tls-key PEM` it serves HTTPS, offering HTTP/2 and HTTP/1.1 by
//! ALPN, and announces `https://…`; see `mcp-fixture/tls.rs`.
//!
//! With `--oauth`, `/mcp` is an OAuth 2.1 protected resource and the same origin runs a
//! small authorization server for it (metadata, DCR, CIMD, automatic consent, refresh
//! rotation, revocation; counters at `GET /oauth-fixture/stats`); see `mcp-fixture/oauth.rs`.
//! Its options (each needs `--oauth`):
//! - `--oauth-scopes "read write"`: `scopes_supported`; a tool call needs the first, the
//!   write tool the second as well (403 `insufficient_scope` without). `""`: no scopes.
//! - `--oauth-write-tool NAME`: the tool that needs the second scope (default `admin_tool`,
//!   a tool listed only in this mode).
//! - `--oauth-metadata path|root|none`: Protected Resource Metadata at
//!   `/.well-known/oauth-protected-resource/mcp`, at `/.well-known/oauth-protected-resource`,
//!   or not at all (a 2025-03-26 server).
//! - `--no-header-metadata`: the 401's `WWW-Authenticate` carries no `resource_metadata`.
//! - `--as-metadata oauth|oidc|none`: `/.well-known/oauth-authorization-server`,
//!   `/.well-known/openid-configuration`, or neither (default endpoints `/authorize`,
//!   `/token`, `/register`).
//! - `--token-auth client_secret_basic|client_secret_post|none`: the client authentication
//!   the AS advertises and requires (default `client_secret_basic`).
//! - `--cimd`: `client_id_metadata_document_supported`; an `http(s)` client id is fetched.
//! - `--preregistered CLIENT_ID:SECRET`: a client known without registration.
//! - `--access-ttl SECS`: access token lifetime (default 3600).
//! - `--no-dcr`: no `/register` and no `registration_endpoint`.
//!
//! Sessions of `/mcp`: `GET /fixture/sessions` counts them (`live`, and `deleted`: DELETEs
//! answered 2xx); `POST /fixture/sessions/forget` ends them all without telling the
//! clients, as a restarted server would (their next request gets 404).
//!
//! Tools: `echo`, `add`, `slow` (sleeps, honours cancellation), `fail` (an error result),
//! `big` (a result of N bytes), `crash` (exits the process), `notify` (adds the tool
//! `extra` and sends tools/list_changed), `announce` (resources and prompts
//! list_changed), `log` (a log message), `progress` (progress notifications), `env` (reads
//! an environment variable), `pid`; with `stdio --form-tool` also `form` (every kind of
//! input field; answers its arguments); with `stdio --clock-tool` also `clock` (the
//! monotonic clock when the call arrived, in ns: the load tool times approve → upstream
//! with it, the clock being shared by all processes); with `stdio --asking-tools` also
//! `ask_many` (N form questions at once; answers how each ended), `ask_url` (one URL-mode
//! question) and `sample` (a sampling request with a prompt of N bytes): a server that
//! asks more than it should, for the security tests. Resources `fixture://greeting` and
//! `fixture://cancellations` (requests cancelled by the client so far); one prompt `greet`.

// Test and load clients dial what they are told: the outbound-client rule (clippy.toml)
// is for the service.
#![allow(clippy::disallowed_methods)]
// Logging is deprecated in 2026-07-28 but is what 2025-11-25 clients take.
#![allow(deprecated)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::{get, post};
use futures::StreamExt;
use rmcp::model::*;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

#[path = "mcp-fixture/oauth.rs"]
mod oauth;
#[path = "mcp-fixture/tls.rs"]
mod tls;

/// Requests this process saw cancelled (`notifications/cancelled`), readable as the
/// resource `fixture://cancellations`.
static CANCELLATIONS: AtomicU64 = AtomicU64::new(0);

/// Executions of `tally` per key: what the storage-fault tests count an approval's runs by.
static TALLIES: std::sync::Mutex<std::collections::BTreeMap<String, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

#[derive(Clone, Default)]
struct Fixture {
    /// Set by `notify`: the tool list then includes `extra`.
    extra_tool: Arc<AtomicBool>,
    /// `--oauth`: lists `admin_tool`, the default tool that needs the write scope.
    admin_tool: bool,
    /// `--modern-only`: speaks 2026-07-28 alone (no `initialize`, no sessions).
    modern_only: bool,
    /// `stdio --form-tool`: lists `form`, whose input schema has every kind of field a
    /// generated form must handle (the console's tests); it answers its arguments.
    form_tool: bool,
    /// `stdio --clock-tool`: lists `clock`.
    clock_tool: bool,
    /// `stdio --asking-tools`: lists `ask_many`, `ask_url` and `sample`.
    asking_tools: bool,
}

fn schema(value: Value) -> Arc<JsonObject> {
    Arc::new(value.as_object().cloned().expect("schema is an object"))
}

fn text(value: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(value)]).into()
}

fn argument<'a>(request: &'a CallToolRequestParams, name: &str) -> Option<&'a Value> {
    request.arguments.as_ref().and_then(|args| args.get(name))
}

impl Fixture {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            Tool::new(
                "echo",
                "Returns its text",
                schema(json!({
                    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]
                })),
            ),
            Tool::new(
                "add",
                "Adds two numbers",
                schema(json!({
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                    "required": ["a", "b"]
                })),
            ),
            Tool::new(
                "slow",
                "Sleeps for ms milliseconds",
                schema(json!({
                    "type": "object",
                    "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": 600000}},
                    "required": ["ms"]
                })),
            ),
            Tool::new(
                "fail",
                "Always returns an error result",
                schema(json!({
                    "type": "object", "properties": {"message": {"type": "string"}}
                })),
            ),
            Tool::new(
                "big",
                "Returns a text of the given size",
                schema(json!({
                    "type": "object",
                    "properties": {"bytes": {"type": "integer", "minimum": 0, "maximum": 67108864}},
                    "required": ["bytes"]
                })),
            ),
            Tool::new(
                "crash",
                "Exits the server process",
                schema(json!({"type": "object"})),
            ),
            Tool::new(
                "notify",
                "Adds the tool `extra` and announces tools/list_changed",
                schema(json!({"type": "object"})),
            ),
            Tool::new(
                "announce",
                "Announces resources/list_changed and prompts/list_changed",
                schema(json!({"type": "object"})),
            ),
            Tool::new(
                "log",
                "Sends a log message (notifications/message) with `text` at `level`",
                schema(json!({
                    "type": "object",
                    "properties": {"text": {"type": "string"}, "level": {"type": "string"}},
                    "required": ["text"]
                })),
            ),
            Tool::new(
                "progress",
                "Sends progress notifications, then returns",
                schema(json!({
                    "type": "object",
                    "properties": {
                        "steps": {"type": "integer", "minimum": 1, "maximum": 100},
                        "delayMs": {"type": "integer", "minimum": 0, "maximum": 10000}
                    },
                    "required": ["steps"]
                })),
            ),
            Tool::new(
                "env",
                "Returns an environment variable or <unset>",
                schema(json!({
                    "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]
                })),
            ),
            Tool::new(
                "pid",
                "Returns the server's process id",
                schema(json!({"type": "object"})),
            ),
            Tool::new(
                "tally",
                "Counts its executions per key in this process and returns the count; with peek, only reads it",
                schema(json!({
                    "type": "object",
                    "properties": {"key": {"type": "string"}, "peek": {"type": "boolean"}},
                    "required": ["key"]
                })),
            ),
        ];
        if self.admin_tool {
            tools.push(Tool::new(
                "admin_tool",
                "Needs the write scope in the OAuth mode",
                schema(json!({"type": "object"})),
            ));
        }
        if self.asking_tools {
            tools.push(Tool::new(
                "ask_many",
                "Asks count form questions at once (each with a defaulted field); answers how each ended",
                schema(json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]})),
            ));
            tools.push(Tool::new(
                "ask_url",
                "Asks one URL-mode question sending the user to url",
                schema(json!({"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]})),
            ));
            tools.push(Tool::new(
                "sample",
                "Asks the client to sample a prompt of bytes bytes",
                schema(json!({"type": "object", "properties": {"bytes": {"type": "integer"}}, "required": ["bytes"]})),
            ));
        }
        if self.clock_tool {
            tools.push(Tool::new(
                "clock",
                "CLOCK_MONOTONIC in ns when the call arrived",
                schema(json!({"type": "object"})),
            ));
        }
        if self.form_tool {
            tools.push(Tool::new(
                "form",
                "Answers its arguments as JSON",
                schema(json!({
                    "type": "object",
                    "properties": {
                        "title": {"type": "string", "minLength": 3, "description": "At least 3 characters"},
                        "count": {"type": "integer", "minimum": 1, "maximum": 10},
                        "ratio": {"type": "number"},
                        "urgent": {"type": "boolean"},
                        "colour": {"type": "string", "enum": ["red", "green", "blue"]},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "owner": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "contacts": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "kind": {"type": "string", "enum": ["email", "phone"]},
                                            "value": {"type": "string"}
                                        },
                                        "required": ["kind", "value"]
                                    }
                                }
                            },
                            "required": ["name"]
                        }
                    },
                    "required": ["title", "count", "colour"]
                })),
            ));
        }
        if self.extra_tool.load(Ordering::SeqCst) {
            tools.push(Tool::new(
                "extra",
                "Appears after notify",
                schema(json!({"type": "object"})),
            ));
        }
        tools
    }
}

impl ServerHandler for Fixture {
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        if self.modern_only {
            std::borrow::Cow::Owned(vec![ProtocolVersion::V_2026_07_28])
        } else {
            std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_logging()
                .build(),
        )
        .with_server_info(Implementation::new(
            "mcp-fixture",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let invalid = |what: &str| McpError::invalid_params(what.to_string(), None);
        match request.name.as_ref() {
            "echo" => {
                let text_arg = argument(&request, "text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("text is required"))?;
                Ok(text(text_arg))
            }
            "add" => {
                let a = argument(&request, "a")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| invalid("a is required"))?;
                let b = argument(&request, "b")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| invalid("b is required"))?;
                Ok(text((a + b).to_string()))
            }
            "slow" => {
                let ms = argument(&request, "ms")
                    .and_then(Value::as_u64)
                    .unwrap_or(1000);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(text(format!("slept {ms} ms"))),
                    _ = context.ct.cancelled() => {
                        CANCELLATIONS.fetch_add(1, Ordering::SeqCst);
                        Err(McpError::internal_error("cancelled", None))
                    }
                }
            }
            "fail" => {
                let message = argument(&request, "message")
                    .and_then(Value::as_str)
                    .unwrap_or("this tool always fails");
                Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into())
            }
            "big" => {
                let bytes = argument(&request, "bytes")
                    .and_then(Value::as_u64)
                    .unwrap_or(0) as usize;
                Ok(text("x".repeat(bytes)))
            }
            "crash" => std::process::exit(3),
            "notify" => {
                self.extra_tool.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                Ok(text("tool list changed"))
            }
            "announce" => {
                let _ = context.peer.notify_resource_list_changed().await;
                let _ = context.peer.notify_prompt_list_changed().await;
                Ok(text("announced"))
            }
            "log" => {
                let message = argument(&request, "text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let level = argument(&request, "level")
                    .cloned()
                    .and_then(|l| serde_json::from_value(l).ok())
                    .unwrap_or(LoggingLevel::Info);
                let mut param = LoggingMessageNotificationParam::new(level, json!(message));
                param.logger = Some("fixture".into());
                let _ = context.peer.notify_logging_message(param).await;
                Ok(text("logged"))
            }
            "progress" => {
                let steps = argument(&request, "steps")
                    .and_then(Value::as_u64)
                    .unwrap_or(3);
                let delay = argument(&request, "delayMs")
                    .and_then(Value::as_u64)
                    .unwrap_or(10);
                if let Some(token) = context.meta.get_progress_token() {
                    for step in 1..=steps {
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        let _ = context
                            .peer
                            .notify_progress(
                                ProgressNotificationParam::new(token.clone(), step as f64)
                                    .with_total(steps as f64)
                                    .with_message(format!("step {step}")),
                            )
                            .await;
                    }
                }
                Ok(text(format!("done after {steps} steps")))
            }
            "env" => {
                let name = argument(&request, "name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("name is required"))?;
                Ok(text(
                    std::env::var(name).unwrap_or_else(|_| "<unset>".into()),
                ))
            }
            "pid" => Ok(text(std::process::id().to_string())),
            "tally" => {
                let key = argument(&request, "key")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("key is required"))?;
                let peek = argument(&request, "peek")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let mut tallies = TALLIES.lock().expect("tallies");
                let count = tallies.entry(key.to_owned()).or_default();
                if !peek {
                    *count += 1;
                }
                Ok(text(count.to_string()))
            }
            "form" if self.form_tool => Ok(text(
                Value::Object(request.arguments.clone().unwrap_or_default()).to_string(),
            )),
            "clock" if self.clock_tool => {
                let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                let nanos = now.tv_sec() as i128 * 1_000_000_000 + now.tv_nsec() as i128;
                Ok(text(nanos.to_string()))
            }
            "ask_many" if self.asking_tools => {
                let count = argument(&request, "count")
                    .and_then(Value::as_u64)
                    .unwrap_or(1);
                let questions = (0..count).map(|n| {
                    let params: ElicitRequestParams = serde_json::from_value(json!({
                        "mode": "form",
                        "message": format!("question {n}"),
                        "requestedSchema": {"type": "object", "properties": {
                            "name": {"type": "string"},
                            "color": {"type": "string", "default": "blue"}
                        }}
                    }))
                    .expect("a form question");
                    context.peer.create_elicitation(params)
                });
                let mut outcomes = serde_json::Map::new();
                let (mut errors, mut contents) = (Vec::new(), Vec::new());
                for outcome in futures::future::join_all(questions).await {
                    let key = match outcome {
                        Ok(result) => {
                            contents.extend(result.content.clone());
                            serde_json::to_value(&result.action)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default()
                        }
                        Err(error) => {
                            errors.push(error.to_string());
                            "error".to_owned()
                        }
                    };
                    let seen = outcomes.entry(key).or_insert(json!(0));
                    *seen = json!(seen.as_u64().unwrap_or(0) + 1);
                }
                outcomes.insert("firstError".into(), json!(errors.first()));
                outcomes.insert("contents".into(), json!(contents));
                Ok(text(Value::Object(outcomes).to_string()))
            }
            "ask_url" if self.asking_tools => {
                let url = argument(&request, "url")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let params: ElicitRequestParams = serde_json::from_value(json!({
                    "mode": "url", "message": "open this", "url": url, "elicitationId": "e1"
                }))
                .map_err(|e| invalid(&e.to_string()))?;
                Ok(text(match context.peer.create_elicitation(params).await {
                    Ok(result) => format!(
                        "answered: {}",
                        serde_json::to_string(&result.action).unwrap_or_default()
                    ),
                    Err(error) => format!("error: {error}"),
                }))
            }
            #[allow(deprecated)]
            "sample" if self.asking_tools => {
                let bytes = argument(&request, "bytes")
                    .and_then(Value::as_u64)
                    .unwrap_or(1);
                let params: CreateMessageRequestParams = serde_json::from_value(json!({
                    "messages": [{"role": "user", "content": {"type": "text", "text": "x".repeat(bytes as usize)}}],
                    "maxTokens": 10
                }))
                .map_err(|e| invalid(&e.to_string()))?;
                Ok(text(match context.peer.create_message(params).await {
                    Ok(_) => "sampled".to_owned(),
                    Err(error) => format!("error: {error}"),
                }))
            }
            "admin_tool" if self.admin_tool => Ok(text("admin")),
            "extra" if self.extra_tool.load(Ordering::SeqCst) => Ok(text("extra")),
            other => Err(McpError::invalid_params(
                format!("unknown tool {other}"),
                None,
            )),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new("fixture://greeting", "greeting").with_mime_type("text/plain"),
            Resource::new("fixture://cancellations", "cancellations").with_mime_type("text/plain"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if request.uri != "fixture://greeting" {
            return Err(McpError::resource_not_found(
                format!("no resource {}", request.uri),
                None,
            ));
        }
        Ok(ReadResourceResult::new(vec![ResourceContents::text(
            "hello from the fixture",
            request.uri,
        )])
        .into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "greet",
            Some("Greets someone"),
            Some(vec![PromptArgument::new("name").with_required(true)]),
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name != "greet" {
            return Err(McpError::invalid_params(
                format!("no prompt {}", request.name),
                None,
            ));
        }
        let name = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("world");
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            format!("Say hello to {name}"),
        )])
        .into())
    }
}

/// Legacy SSE sessions: the write side of each session's in-process pipe.
type Sessions = Arc<Mutex<HashMap<String, tokio::io::WriteHalf<tokio::io::DuplexStream>>>>;

async fn sse_connect(
    State(sessions): State<Sessions>,
) -> Sse<impl futures::Stream<Item = Result<Event, std::convert::Infallible>>> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = format!("s{}", NEXT.fetch_add(1, Ordering::SeqCst));
    let (client_side, server_side) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(service) = Fixture::default().serve(server_side).await {
            let _ = service.waiting().await;
        }
    });
    let (read, write) = tokio::io::split(client_side);
    sessions.lock().await.insert(id.clone(), write);
    let endpoint = futures::stream::once(futures::future::ready(Ok(Event::default()
        .event("endpoint")
        .data(format!("/message?sessionId={id}")))));
    let messages = futures::stream::unfold(BufReader::new(read).lines(), |mut lines| async move {
        match lines.next_line().await {
            Ok(Some(line)) => Some((Ok(Event::default().event("message").data(line)), lines)),
            _ => None,
        }
    });
    Sse::new(endpoint.chain(messages)).keep_alive(KeepAlive::default())
}

async fn sse_message(
    State(sessions): State<Sessions>,
    Query(query): Query<HashMap<String, String>>,
    body: String,
) -> StatusCode {
    let Some(id) = query.get("sessionId") else {
        return StatusCode::BAD_REQUEST;
    };
    let mut sessions = sessions.lock().await;
    let Some(writer) = sessions.get_mut(id) else {
        return StatusCode::NOT_FOUND;
    };
    let line = body.replace('\n', " ") + "\n";
    match writer.write_all(line.as_bytes()).await {
        Ok(()) => StatusCode::ACCEPTED,
        Err(_) => {
            sessions.remove(id);
            StatusCode::GONE
        }
    }
}

/// Credentials `/mcp` insists on (`--require-basic`, `--require-query`).
#[derive(Clone, Default)]
struct Required {
    /// `Authorization: Basic base64(USER:PASS)`.
    basic: Option<String>,
    /// `NAME=VALUE` in the query string.
    query: Option<(String, String)>,
}

async fn require_credentials(
    State(required): State<Arc<Required>>,
    Query(query): Query<HashMap<String, String>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use base64::Engine;
    let basic_ok = required.basic.as_ref().is_none_or(|pair| {
        let wanted = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        );
        request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .is_some_and(|given| given.as_bytes() == wanted.as_bytes())
    });
    let query_ok = required
        .query
        .as_ref()
        .is_none_or(|(name, value)| query.get(name) == Some(value));
    if !request.uri().path().starts_with("/mcp") || (basic_ok && query_ok) {
        next.run(request).await
    } else {
        (StatusCode::UNAUTHORIZED, "missing or wrong credentials").into_response()
    }
}

/// The streamable-HTTP sessions, for tests that check the client ends or re-opens them.
#[derive(Clone)]
struct SessionTally {
    manager: Arc<LocalSessionManager>,
    deleted: Arc<AtomicU64>,
    /// With `--tls-cert`: the connections accepted, by protocol.
    tls: Option<Arc<tls::TlsConnections>>,
}

async fn count_deletes(
    State(tally): State<SessionTally>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let delete =
        request.method() == axum::http::Method::DELETE && request.uri().path().starts_with("/mcp");
    let response = next.run(request).await;
    if delete && response.status().is_success() {
        tally.deleted.fetch_add(1, Ordering::Relaxed);
    }
    response
}

async fn session_counts(State(tally): State<SessionTally>) -> axum::Json<Value> {
    let live = tally.manager.sessions.read().await.len();
    let mut counts = serde_json::json!({
        "live": live,
        "deleted": tally.deleted.load(Ordering::Relaxed),
    });
    if let Some(tls) = &tally.tls {
        counts["tls_connections"] = tls.to_json();
    }
    axum::Json(counts)
}

async fn forget_sessions(State(tally): State<SessionTally>) -> StatusCode {
    let ids: Vec<_> = tally
        .manager
        .sessions
        .read()
        .await
        .keys()
        .cloned()
        .collect();
    for id in ids {
        use rmcp::transport::streamable_http_server::session::SessionManager;
        let _ = tally.manager.close_session(&id).await;
    }
    StatusCode::NO_CONTENT
}

async fn serve_http(
    port: u16,
    required: Required,
    oauth: Option<oauth::OAuthConfig>,
    modern_only: bool,
    tls: Option<(PathBuf, PathBuf)>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let tls = tls
        .map(|(cert, key)| tls::TlsServer::from_pem(&cert, &key))
        .transpose()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let origin = format!("{scheme}://{}", listener.local_addr()?);
    let admin_tool = oauth.is_some();
    let manager = Arc::new(LocalSessionManager::default());
    let mcp = StreamableHttpService::new(
        move || {
            Ok(Fixture {
                admin_tool,
                modern_only,
                ..Fixture::default()
            })
        },
        manager.clone(),
        StreamableHttpServerConfig::default().disable_allowed_hosts(),
    );
    let sessions: Sessions = Arc::default();
    let tally = SessionTally {
        manager,
        deleted: Arc::default(),
        tls: tls.as_ref().map(|server| server.connections.clone()),
    };
    let mut app = axum::Router::new()
        .route("/sse", get(sse_connect))
        .route("/message", post(sse_message))
        .with_state(sessions)
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(
            tally.clone(),
            count_deletes,
        ))
        .merge(
            axum::Router::new()
                .route("/fixture/sessions", get(session_counts))
                .route("/fixture/sessions/forget", post(forget_sessions))
                .with_state(tally),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(required),
            require_credentials,
        ));
    if let Some(config) = oauth {
        let oauth = oauth::OAuth::new(config, origin.clone());
        app = app
            .layer(axum::middleware::from_fn_with_state(
                oauth.clone(),
                oauth::guard,
            ))
            .merge(oauth::routes(oauth));
    }
    println!("listening on {origin}");
    use std::io::Write;
    std::io::stdout().flush()?;
    match tls {
        Some(server) => axum::serve(tls::TlsListener::new(listener, server)?, app).await,
        // Like the service: without TCP_NODELAY every kept-alive call waits ~40 ms.
        None => axum::serve(mcp_pool::startup::with_nodelay(listener), app).await,
    }
}

/// stdin and stdout as non-blocking pipes when they are pipes, as when a client spawns the
/// fixture. tokio's `stdin()`/`stdout()` (rmcp's `stdio()`) hand every read and write to
/// the blocking pool: ~100 µs of CPU per call at 64 callers, as much as the service spends,
/// on the cores the load tool's comparisons share. Anything else (a terminal, a file) is
/// `None`, and rmcp's `stdio()` serves it.
fn stdio_pipes() -> Option<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    // Both checked before either is made non-blocking: the flag is shared with fd 0 and 1,
    // and rmcp's `stdio()` needs them blocking.
    let pipe = |fd: std::os::fd::BorrowedFd<'_>| {
        let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        let fifo = file.metadata().ok()?.file_type().is_fifo();
        fifo.then_some(file)
    };
    let input = pipe(std::io::stdin().as_fd())?;
    let output = pipe(std::io::stdout().as_fd())?;
    let input = tokio::net::unix::pipe::Receiver::from_file(input).ok()?;
    let output = tokio::net::unix::pipe::Sender::from_file(output).ok()?;
    Some((input, output))
}

async fn serve_stdio<R, W>(fixture: Fixture, (input, output): (R, W)) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    match fixture.serve((input, output)).await {
        Ok(service) => service
            .waiting()
            .await
            .map(|_| ())
            .map_err(std::io::Error::other),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("stdio") => {
            let fixture = Fixture {
                form_tool: args[1..].iter().any(|flag| flag == "--form-tool"),
                clock_tool: args[1..].iter().any(|flag| flag == "--clock-tool"),
                asking_tools: args[1..].iter().any(|flag| flag == "--asking-tools"),
                ..Fixture::default()
            };
            match stdio_pipes() {
                Some(pipes) => serve_stdio(fixture, pipes).await,
                None => serve_stdio(fixture, rmcp::transport::stdio()).await,
            }
        }
        Some("http") => {
            let mut port = 0;
            let mut required = Required::default();
            let mut oauth_on = false;
            let mut oauth_config = oauth::OAuthConfig::default();
            let mut oauth_options = false;
            let mut modern_only = false;
            let (mut tls_cert, mut tls_key) = (None, None);
            let mut rest = args[1..].iter().cloned();
            while let Some(flag) = rest.next() {
                let mut next = || rest.next();
                let understood = match flag.as_str() {
                    "--port" => next().map(|v| port = v.parse().unwrap_or(0)).is_some(),
                    "--require-basic" => next().map(|v| required.basic = Some(v)).is_some(),
                    "--require-query" => next()
                        .map(|v| {
                            let (name, value) = v.split_once('=').unwrap_or((&v, ""));
                            required.query = Some((name.to_owned(), value.to_owned()));
                        })
                        .is_some(),
                    "--oauth" => {
                        oauth_on = true;
                        true
                    }
                    "--modern-only" => {
                        modern_only = true;
                        true
                    }
                    "--tls-cert" => next().map(|v| tls_cert = Some(PathBuf::from(v))).is_some(),
                    "--tls-key" => next().map(|v| tls_key = Some(PathBuf::from(v))).is_some(),
                    _ => match oauth_config.parse_flag(&flag, &mut next) {
                        Ok(known) => {
                            oauth_options |= known;
                            known
                        }
                        Err(e) => {
                            eprintln!("mcp-fixture: {e}");
                            return std::process::ExitCode::from(2);
                        }
                    },
                };
                if !understood {
                    eprintln!("mcp-fixture: unexpected argument {flag}");
                    return std::process::ExitCode::from(2);
                }
            }
            if oauth_options && !oauth_on {
                eprintln!("mcp-fixture: the OAuth options need --oauth");
                return std::process::ExitCode::from(2);
            }
            let tls = match (tls_cert, tls_key) {
                (Some(cert), Some(key)) => Some((cert, key)),
                (None, None) => None,
                _ => {
                    eprintln!("mcp-fixture: --tls-cert and --tls-key go together");
                    return std::process::ExitCode::from(2);
                }
            };
            serve_http(
                port,
                required,
                oauth_on.then_some(oauth_config),
                modern_only,
                tls,
            )
            .await
        }
        _ => {
            eprintln!(
                "usage: mcp-fixture stdio [--form-tool] [--clock-tool] [--asking-tools] | mcp-fixture http [--port N] [--require-basic USER:PASS] [--require-query NAME=VALUE] [--modern-only] [--tls-cert PEM --tls-key PEM] [--oauth [OAuth options, see the source's doc]]"
            );
            return std::process::ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-fixture: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
