//! Bearer secrets checked by their digest: API keys and gateway tokens alike. Accepted
//! secrets are cached for `auth.key_cache_ttl_secs`, so a request does not cost a database
//! query; only hits are cached, so a wrong secret always costs a lookup, and a revoked one
//! ages out (or is forgotten at once on the instance that revoked it).

use std::future::Future;
use std::time::Duration;

use moka::future::Cache;

use crate::config::Settings;
use crate::error::{Error, Result};
use crate::security::api_key::hash_key;

#[derive(Clone)]
pub(crate) struct TokenAuthenticator<P> {
    /// Accepted secrets by digest.
    accepted: Cache<String, P>,
    /// What a refused secret is told ("the API key is not valid").
    refusal: &'static str,
}

impl<P: Clone + Send + Sync + 'static> TokenAuthenticator<P> {
    pub(crate) fn new(settings: &Settings, refusal: &'static str) -> Self {
        Self {
            accepted: Cache::builder()
                .max_capacity(10_000)
                .time_to_live(Duration::from_secs(settings.auth.key_cache_ttl_secs))
                .build(),
            refusal,
        }
    }

    /// Who `secret` names: from the cache, else `find` asked with the secret's digest
    /// (`None`: no such secret, answered `Unauthorized`).
    pub(crate) async fn authenticate<F, Fut>(&self, secret: &str, find: F) -> Result<P>
    where
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<Option<P>>>,
    {
        let digest = hash_key(secret);
        if let Some(principal) = self.accepted.get(&digest).await {
            return Ok(principal);
        }
        let principal = find(digest.clone())
            .await?
            .ok_or_else(|| Error::Unauthorized(self.refusal.into()))?;
        self.accepted.insert(digest, principal.clone()).await;
        Ok(principal)
    }

    /// Forgets the secret with this digest at once (it was revoked here).
    pub(crate) async fn forget(&self, digest: &str) {
        self.accepted.invalidate(digest).await;
    }
}
