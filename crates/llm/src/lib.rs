//! Talking to LLM providers: one provider-neutral conversation shape, two wire formats
//! (OpenAI-compatible chat completions, Anthropic messages), streamed answers, bounded
//! retries.
//!
//! This is a boundary of its own: it knows HTTP and the providers' JSON, and reports
//! [`LlmError`]; the agent loop decides what a failure means for the user.

mod anthropic;
mod openai;

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;
use sse_stream::SseStream;

use mcp_pool_core::config::{LlmSettings, ProviderKind, ProviderSettings};

/// A tool offered to the model.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them: JSON text, not necessarily valid.
    pub arguments: String,
}

#[derive(Debug, Clone)]
pub struct ToolResult {
    pub call_id: String,
    pub name: String,
    pub content: String,
    pub is_error: bool,
}

/// One step of a conversation, in order.
#[derive(Debug, Clone)]
pub enum Turn {
    User(String),
    Assistant { text: String, calls: Vec<ToolCall> },
    ToolResults(Vec<ToolResult>),
}

#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub model: String,
    pub system: Option<String>,
    pub turns: Vec<Turn>,
    /// Empty in prompt mode: the tools are then described in `system`.
    pub tools: Vec<ToolSpec>,
    /// A limit of the request's own (a server's sampling request), never above
    /// `llm.max_tokens`; `None` sends `llm.max_tokens` where the provider needs one.
    pub max_tokens: Option<u32>,
}

/// A whole answer, assembled from the stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    pub text: String,
    pub calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    /// Prompt and answer tokens, as the provider reported them (none when it did not).
    pub tokens: Option<u64>,
}

/// What a caller sees while an answer streams in.
pub enum LlmProgress<'a> {
    Text(&'a str),
    /// The request failed before anything was streamed and is tried again after `delay`.
    Retrying {
        attempt: u32,
        delay: Duration,
        error: &'a LlmError,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("provider '{0}' is not configured")]
    UnknownProvider(String),
    #[error("model '{model}' is not offered by provider '{provider}'")]
    ModelNotAllowed { provider: String, model: String },
    #[error("provider '{provider}' has no API key: set {variable}")]
    MissingKey { provider: String, variable: String },
    #[error("the provider rate-limited the request: {message}")]
    RateLimited {
        retry_after: Option<Duration>,
        message: String,
    },
    #[error("the provider did not answer within {} s", .0.as_secs())]
    Timeout(Duration),
    #[error("the provider refused the API key (HTTP {status}): {message}")]
    Auth { status: u16, message: String },
    #[error("the provider answered HTTP {status}: {message}")]
    Status { status: u16, message: String },
    #[error("could not reach the provider: {0}")]
    Connect(String),
    /// The stream broke off or reported an error after it had started.
    #[error("the provider's answer broke off: {0}")]
    Stream(String),
    #[error("the provider's answer could not be read: {0}")]
    BadResponse(String),
}

impl LlmError {
    pub fn code(&self) -> &'static str {
        match self {
            LlmError::UnknownProvider(_) => "LLM_PROVIDER_NOT_FOUND",
            LlmError::ModelNotAllowed { .. } => "LLM_MODEL_NOT_ALLOWED",
            LlmError::MissingKey { .. } => "LLM_NOT_CONFIGURED",
            LlmError::RateLimited { .. } => "LLM_RATE_LIMITED",
            LlmError::Timeout(_) => "LLM_TIMEOUT",
            LlmError::Auth { .. } => "LLM_AUTH_FAILED",
            LlmError::Status { .. } | LlmError::Connect(_) | LlmError::Stream(_) => {
                "LLM_PROVIDER_ERROR"
            }
            LlmError::BadResponse(_) => "LLM_BAD_RESPONSE",
        }
    }

    /// Worth trying again (only ever before anything was streamed).
    fn is_transient(&self) -> bool {
        match self {
            LlmError::RateLimited { .. } | LlmError::Timeout(_) | LlmError::Connect(_) => true,
            LlmError::Status { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

/// How tools reach the model.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    /// The provider's function calling.
    Native,
    /// Tools described in the system prompt, JSON instructions parsed from the reply.
    Prompt,
}

/// A provider and model picked for one chat turn.
#[derive(Clone)]
pub struct ModelHandle {
    client: LlmClient,
    provider: Arc<ProviderSettings>,
    provider_name: String,
    key: Option<String>,
    pub model: String,
    pub tool_mode: ToolMode,
}

/// All configured providers, with one HTTP client.
#[derive(Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    settings: Arc<LlmSettings>,
}

impl LlmClient {
    pub fn new(settings: &LlmSettings) -> Self {
        // The operator's own providers, named in the configuration file: not a URL a user
        // or a server chose, so not under the URL policy (a local model is often on
        // loopback). tests/api/outbound.rs lists this as the one such client.
        #[allow(clippy::disallowed_methods)]
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(settings.request_timeout_secs))
            .build()
            .expect("an HTTP client with default TLS builds");
        Self {
            http,
            settings: Arc::new(settings.clone()),
        }
    }

    /// Checks a request's provider and model against the configuration.
    pub fn model(
        &self,
        provider: &str,
        model: &str,
        tool_mode: Option<ToolMode>,
    ) -> Result<ModelHandle, LlmError> {
        let settings = self
            .settings
            .providers
            .get(provider)
            .ok_or_else(|| LlmError::UnknownProvider(provider.to_owned()))?;
        if !settings.models.is_empty() && !settings.models.iter().any(|m| m == model) {
            return Err(LlmError::ModelNotAllowed {
                provider: provider.to_owned(),
                model: model.to_owned(),
            });
        }
        let key = if settings.api_key_env.is_empty() {
            None
        } else {
            Some(
                std::env::var(&settings.api_key_env)
                    .ok()
                    .filter(|k| !k.trim().is_empty())
                    .ok_or_else(|| LlmError::MissingKey {
                        provider: provider.to_owned(),
                        variable: settings.api_key_env.clone(),
                    })?,
            )
        };
        let default_mode = if settings.prompt_mode_models.iter().any(|m| m == model) {
            ToolMode::Prompt
        } else {
            ToolMode::Native
        };
        Ok(ModelHandle {
            client: self.clone(),
            provider: Arc::new(settings.clone()),
            provider_name: provider.to_owned(),
            key,
            model: model.to_owned(),
            tool_mode: tool_mode.unwrap_or(default_mode),
        })
    }
}

impl ModelHandle {
    /// Streams one answer, retrying transient failures that happen before the first byte
    /// of it reached `progress`.
    pub async fn complete(
        &self,
        request: &ChatRequest,
        progress: &mut (dyn FnMut(LlmProgress<'_>) + Send),
    ) -> Result<Completion, LlmError> {
        let settings = &self.client.settings;
        let mut delays = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(settings.retry_base_delay_ms))
            .with_max_delay(Duration::from_secs(60))
            .with_jitter()
            .with_max_times(settings.max_retries as usize)
            .build();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut streamed = false;
            let result = self
                .attempt(request, &mut |text| {
                    streamed = true;
                    progress(LlmProgress::Text(text));
                })
                .await;
            let error = match result {
                Ok(completion) => return Ok(completion),
                Err(error) if streamed || !error.is_transient() => return Err(error),
                Err(error) => error,
            };
            let Some(backoff) = delays.next() else {
                return Err(error);
            };
            let delay = match &error {
                LlmError::RateLimited {
                    retry_after: Some(wait),
                    ..
                } if wait.as_secs() > settings.max_retry_after_secs => return Err(error),
                LlmError::RateLimited {
                    retry_after: Some(wait),
                    ..
                } => backoff.max(*wait),
                _ => backoff,
            };
            progress(LlmProgress::Retrying {
                attempt,
                delay,
                error: &error,
            });
            tracing::info!(provider = %self.provider_name, %error, ?delay, "retrying the LLM request");
            tokio::time::sleep(delay).await;
        }
    }

    async fn attempt(
        &self,
        request: &ChatRequest,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Completion, LlmError> {
        let settings = &self.client.settings;
        let base = self.provider.base_url.trim_end_matches('/');
        let builder = match self.provider.kind {
            ProviderKind::Openai => {
                let mut builder = self
                    .client
                    .http
                    .post(format!("{base}/chat/completions"))
                    .json(&openai::request_body(request));
                if let Some(key) = &self.key {
                    builder = builder.bearer_auth(key);
                }
                builder
            }
            ProviderKind::Anthropic => {
                let mut builder = self
                    .client
                    .http
                    .post(format!("{base}/v1/messages"))
                    .header("anthropic-version", "2023-06-01")
                    .json(&anthropic::request_body(
                        request,
                        request.max_tokens.unwrap_or(settings.max_tokens),
                    ));
                if let Some(key) = &self.key {
                    builder = builder.header("x-api-key", key);
                }
                builder
            }
        };
        let timeout = Duration::from_secs(settings.request_timeout_secs);
        let response = tokio::time::timeout(
            timeout,
            builder.header("accept", "text/event-stream").send(),
        )
        .await
        .map_err(|_| LlmError::Timeout(timeout))?
        .map_err(|e| {
            if e.is_timeout() {
                LlmError::Timeout(timeout)
            } else {
                LlmError::Connect(e.to_string())
            }
        })?;
        let response = check_status(response).await?;
        let events = SseEvents {
            inner: SseStream::from_bytes_stream(response.bytes_stream()).boxed(),
            idle: Duration::from_secs(settings.stream_idle_timeout_secs),
        };
        match self.provider.kind {
            ProviderKind::Openai => openai::read_stream(events, on_text).await,
            ProviderKind::Anthropic => anthropic::read_stream(events, on_text).await,
        }
    }
}

/// Turns an error status into the matching error, with the provider's own message.
async fn check_status(response: reqwest::Response) -> Result<reqwest::Response, LlmError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let body = response.text().await.unwrap_or_default();
    let message = provider_message(&body);
    Err(match status {
        StatusCode::TOO_MANY_REQUESTS => LlmError::RateLimited {
            retry_after,
            message,
        },
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => LlmError::Auth {
            status: status.as_u16(),
            message,
        },
        _ => LlmError::Status {
            status: status.as_u16(),
            message,
        },
    })
}

/// The human part of a provider's error body (both formats nest it in `error.message`).
fn provider_message(body: &str) -> String {
    let message = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| body.trim().to_owned());
    let mut message = message;
    if message.len() > 500 {
        let mut cut = 500;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    if message.is_empty() {
        "no details".into()
    } else {
        message
    }
}

/// Server-sent events of a provider's answer, each within the idle timeout.
struct SseEvents {
    inner: futures::stream::BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
    idle: Duration,
}

/// One event: its name (if any) and data.
struct SseEvent {
    name: Option<String>,
    data: String,
}

impl SseEvents {
    /// The next event with data; `None` at the end of the stream.
    async fn next(&mut self) -> Result<Option<SseEvent>, LlmError> {
        loop {
            let item = tokio::time::timeout(self.idle, self.inner.next())
                .await
                .map_err(|_| LlmError::Timeout(self.idle))?;
            match item {
                None => return Ok(None),
                Some(Err(e)) => return Err(LlmError::Stream(e.to_string())),
                Some(Ok(event)) => {
                    if let Some(data) = event.data {
                        return Ok(Some(SseEvent {
                            name: event.event,
                            data,
                        }));
                    }
                }
            }
        }
    }
}

fn parse_event(data: &str) -> Result<Value, LlmError> {
    serde_json::from_str(data)
        .map_err(|e| LlmError::BadResponse(format!("an event is not JSON ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_messages_are_taken_from_the_error_object_and_bounded() {
        assert_eq!(
            provider_message(r#"{"error":{"message":"slow down","type":"rate_limit"}}"#),
            "slow down"
        );
        assert_eq!(provider_message("  plain text "), "plain text");
        assert_eq!(provider_message(""), "no details");
        assert!(provider_message(&"é".repeat(600)).chars().count() <= 251);
    }
}
