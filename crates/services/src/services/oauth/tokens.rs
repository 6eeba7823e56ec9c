//! A (user, server)'s tokens in the database, sealed, as rmcp's credential store;
//! refreshes are serialized across instances by a lease on the row, so a rotating refresh
//! token is never used twice.

use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use rmcp::transport::auth::{
    AuthError, CredentialRefreshGuard, CredentialStore, StoredCredentials,
};
use uuid::Uuid;

use crate::domain::UserId;
use crate::oauth::{expires_at, granted_scopes};
use crate::store::{Grant, OAuthRepo};

/// How long one instance may hold the refresh lease of a (user, server).
const REFRESH_LEASE: Duration = Duration::from_secs(30);

fn store_error(error: impl std::fmt::Display) -> AuthError {
    AuthError::CredentialStoreError(error.to_string())
}

/// The tokens of one (user, server), as rmcp's credential store.
pub struct TokenStore {
    pub repo: OAuthRepo,
    pub user: UserId,
    pub server: Uuid,
    /// Names this instance in the refresh lease.
    pub holder: String,
}

#[async_trait]
impl CredentialStore for TokenStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let Some(record) = self
            .repo
            .token(&self.user, self.server)
            .await
            .map_err(store_error)?
        else {
            return Ok(None);
        };
        record
            .credentials
            .map(|json| serde_json::from_str(&json).map_err(store_error))
            .transpose()
    }

    /// A refresh: new tokens for the same grant.
    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let json = serde_json::to_string(&credentials).map_err(store_error)?;
        let scopes = granted_scopes(&credentials);
        self.repo
            .save_refreshed(
                &self.user,
                self.server,
                Grant {
                    credentials: &json,
                    client: None,
                    issuer: credentials.issuer.as_deref(),
                    scopes: &scopes,
                    expires_at: expires_at(&credentials),
                },
            )
            .await
            .map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.repo
            .forget(&self.user, self.server)
            .await
            .map(|_| ())
            .map_err(store_error)
    }

    /// The refresh token was refused for good: forget it, so the user is asked again.
    async fn on_refresh_token_rejected(
        &self,
        _credentials: &StoredCredentials,
    ) -> Result<(), AuthError> {
        self.clear().await
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let deadline = tokio::time::Instant::now() + REFRESH_LEASE;
        loop {
            let now = Utc::now().timestamp_millis();
            let until = now + REFRESH_LEASE.as_millis() as i64;
            if self
                .repo
                .try_lock_refresh(&self.user, self.server, &self.holder, now, until)
                .await
                .map_err(store_error)?
            {
                return Ok(Some(CredentialRefreshGuard::new(LeaseGuard {
                    repo: self.repo.clone(),
                    user: self.user.clone(),
                    server: self.server,
                    holder: self.holder.clone(),
                })));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(store_error(
                    "another instance is refreshing this token and did not finish",
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Frees the refresh lease when rmcp drops its guard (after the refresh was saved).
struct LeaseGuard {
    repo: OAuthRepo,
    user: UserId,
    server: Uuid,
    holder: String,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let (repo, user, server, holder) = (
            self.repo.clone(),
            self.user.clone(),
            self.server,
            std::mem::take(&mut self.holder),
        );
        // A lease left behind (no runtime, a failed write) expires by itself.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = repo.unlock_refresh(&user, server, &holder).await;
            });
        }
    }
}
