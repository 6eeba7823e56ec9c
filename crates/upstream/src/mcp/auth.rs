//! The OAuth side of an HTTP upstream connection: where its tokens come from (without
//! this module knowing where they are kept) and what the server said when it refused.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use rmcp::transport::auth::AuthorizationManager;

use super::McpError;

/// Hands a connection the tokens of its (user, server).
pub trait UpstreamAuth: Send + Sync {
    /// A manager holding this (user, server)'s tokens (it refreshes them shortly before
    /// they expire, and once more when the server answers 401), or `None` when there are
    /// none: then the server is asked without a token, and a 401 means authorization is
    /// required.
    fn manager(&self) -> BoxFuture<'_, Result<Option<AuthorizationManager>, McpError>>;
}

/// A server's refusal: its `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthChallenge {
    pub www_authenticate: String,
    /// A 403 `insufficient_scope` (a step-up), rather than a 401.
    pub insufficient_scope: bool,
}

impl AuthChallenge {
    /// The `scope` parameter of the challenge, split.
    pub fn scopes(&self) -> Vec<String> {
        challenge_param(&self.www_authenticate, "scope")
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

/// One `auth-param` of a `Bearer` challenge (quoted or token form).
pub(crate) fn challenge_param(header: &str, name: &str) -> Option<String> {
    let lower = header.to_ascii_lowercase();
    let mut search_from = 0;
    while let Some(found) = lower[search_from..].find(name) {
        let start = search_from + found;
        search_from = start + name.len();
        let before_ok = start == 0 || matches!(lower.as_bytes()[start - 1], b' ' | b',' | b'\t');
        let rest = header[start + name.len()..].trim_start();
        if !before_ok || !rest.starts_with('=') {
            continue;
        }
        let rest = rest[1..].trim_start();
        return Some(if let Some(quoted) = rest.strip_prefix('"') {
            quoted.split('"').next().unwrap_or_default().to_owned()
        } else {
            rest.split([',', ' ']).next().unwrap_or_default().to_owned()
        });
    }
    None
}

/// The last challenge a connection's HTTP client saw; cleared by each success, so a
/// failure can be told apart as "the server wants authorization". A streamable HTTP
/// request's own error carries its refusal (`McpError::from` reads it there, race-free
/// among concurrent requests); this note serves the failures that do not (the
/// initialize handshake, legacy SSE).
#[derive(Clone, Default)]
pub(super) struct ChallengeSlot(Arc<Mutex<Option<AuthChallenge>>>);

impl ChallengeSlot {
    pub(super) fn record(&self, challenge: AuthChallenge) {
        *self.0.lock().expect("challenge lock") = Some(challenge);
    }

    pub(super) fn clear(&self) {
        let mut slot = self.0.lock().expect("challenge lock");
        if slot.is_some() {
            *slot = None;
        }
    }

    /// The server refused for want of authorization since the last success.
    pub(super) fn is_set(&self) -> bool {
        self.0.lock().expect("challenge lock").is_some()
    }

    pub(super) fn take(&self) -> Option<AuthChallenge> {
        self.0.lock().expect("challenge lock").take()
    }

    /// `error` as the refusal it was, when the server refused with a challenge.
    pub(super) fn explain(&self, error: McpError) -> McpError {
        match (&error, self.take()) {
            (McpError::Transport(_) | McpError::Connect(_) | McpError::Protocol(_), Some(c)) => {
                McpError::AuthRequired(c)
            }
            _ => error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenge_parameters_are_read_quoted_or_not() {
        let header = r#"Bearer error="insufficient_scope", scope="read write", resource_metadata="http://x/.well-known/oauth-protected-resource/mcp""#;
        assert_eq!(
            challenge_param(header, "scope").as_deref(),
            Some("read write")
        );
        assert_eq!(
            challenge_param(header, "error").as_deref(),
            Some("insufficient_scope")
        );
        assert_eq!(
            challenge_param("Bearer realm=x, scope=read", "scope").as_deref(),
            Some("read")
        );
        assert_eq!(challenge_param("Bearer realm=x", "scope"), None);
    }
}
