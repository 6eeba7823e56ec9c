//! A leased reqwest client (`mcp::http`) as rmcp's streamable HTTP client, with the URL taken out of
//! every error.
//!
//! A server's URL may carry its credentials (`?api_key=…`). reqwest quotes the URL in its
//! request errors ("error sending request for url (…)"), and rmcp puts those errors into
//! the errors it returns and into its own log lines, beyond our reach. Stripping the URL
//! where the error is made keeps it out of all of them.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use super::auth::{AuthChallenge, ChallengeSlot};

/// `reqwest::Client`'s own implementation, each error without its URL. It also notes the
/// server's last authorization challenge (401, or 403 `insufficient_scope`), which rmcp's
/// errors carry but the session's errors no longer do.
#[derive(Clone)]
pub(super) struct UrlFreeErrors {
    /// Its lease ends with the session (the transport's last clone).
    pub client: super::LeasedClient,
    pub challenges: ChallengeSlot,
    pub failures: StreamFailures,
}

/// The first failure of a response stream (an event over the size limit, a broken
/// stream), or of a request (refused, TLS, DNS): rmcp reports only that the connection
/// closed, or the request error without its causes (`StreamableHttpError::Client` has no
/// source), so connect adds this to say why.
#[derive(Clone, Default)]
pub(super) struct StreamFailures(Arc<std::sync::Mutex<Option<String>>>);

impl StreamFailures {
    pub(super) fn take(&self) -> Option<String> {
        self.0.lock().expect("stream failures lock").take()
    }

    fn note(&self, failure: impl FnOnce() -> String) {
        self.0
            .lock()
            .expect("stream failures lock")
            .get_or_insert_with(failure);
    }

    /// `stream`, noting its first error here.
    fn watch(
        &self,
        stream: BoxStream<'static, Result<Sse, SseError>>,
    ) -> BoxStream<'static, Result<Sse, SseError>> {
        use futures::StreamExt;
        let slot = self.0.clone();
        stream
            .inspect(move |item| {
                if let Err(error) = item {
                    slot.lock()
                        .expect("stream failures lock")
                        .get_or_insert_with(|| error.to_string());
                }
            })
            .boxed()
    }

    fn watch_answer(
        &self,
        answer: Result<StreamableHttpPostResponse, HttpError>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        match answer {
            Ok(StreamableHttpPostResponse::Sse(stream, session)) => {
                Ok(StreamableHttpPostResponse::Sse(self.watch(stream), session))
            }
            other => other,
        }
    }
}

type HttpError = StreamableHttpError<reqwest::Error>;

/// rmcp keeps the start of an answer it could not read as JSON-RPC in its error; that body
/// is the server's (behind a URL the user chose it may be a metadata service's secrets),
/// never ours to relay, on a connect or a call.
fn without_answer(text: Cow<'static, str>) -> Cow<'static, str> {
    if text.starts_with("could not parse JSON response") {
        Cow::Borrowed("the answer is not a JSON-RPC message")
    } else {
        text
    }
}

impl UrlFreeErrors {
    fn noted<T>(&self, result: Result<T, HttpError>) -> Result<T, HttpError> {
        match result {
            Ok(value) => {
                self.challenges.clear();
                Ok(value)
            }
            Err(StreamableHttpError::Client(error)) => {
                let error = error.without_url();
                self.failures.note(|| super::error_chain(&error));
                Err(StreamableHttpError::Client(error))
            }
            Err(StreamableHttpError::UnexpectedServerResponse(text)) => Err(
                StreamableHttpError::UnexpectedServerResponse(without_answer(text)),
            ),
            Err(StreamableHttpError::AuthRequired(refusal)) => {
                self.challenges.record(AuthChallenge {
                    www_authenticate: refusal.www_authenticate_header.clone(),
                    insufficient_scope: false,
                });
                Err(StreamableHttpError::AuthRequired(refusal))
            }
            Err(StreamableHttpError::InsufficientScope(refusal)) => {
                self.challenges.record(AuthChallenge {
                    www_authenticate: refusal.www_authenticate_header.clone(),
                    insufficient_scope: true,
                });
                Err(StreamableHttpError::InsufficientScope(refusal))
            }
            Err(other) => Err(other),
        }
    }
}

impl StreamableHttpClient for UrlFreeErrors {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let result = self
            .client
            .client
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        self.failures.watch_answer(self.noted(result))
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let result = self
            .client
            .client
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.failures.watch_answer(self.noted(result))
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let result = self
            .client
            .client
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        self.failures.watch_answer(self.noted(result))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        let result = self
            .client
            .client
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await;
        self.noted(result)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        let result = self
            .client
            .client
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await;
        self.noted(result).map(|stream| self.failures.watch(stream))
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        let result = self
            .client
            .client
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.noted(result).map(|stream| self.failures.watch(stream))
    }
}
