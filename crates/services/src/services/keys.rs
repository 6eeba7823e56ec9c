//! API keys: authentication of every request, creation, revocation, first-start bootstrap.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use uuid::Uuid;

use super::authenticator::TokenAuthenticator;
use crate::config::Settings;
use crate::error::{Error, Resource, Result};
use crate::security::api_key::hash_key;
use crate::security::{ApiKeyRole, GeneratedKey};
use crate::store::{ApiKeyRecord, Store, StoreError};

/// Who is calling, once the bearer key checked out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Principal {
    pub key_id: Uuid,
    pub role: ApiKeyRole,
}

impl Principal {
    /// The key's id when it is an admin's: what acts for a user on their behalf and is
    /// audit-logged as such.
    pub fn admin_key(&self) -> Option<Uuid> {
        (self.role == ApiKeyRole::Admin).then_some(self.key_id)
    }
}

/// A console sign-in: an admin key sealed into a cookie, so any instance sharing the
/// cipher key can check it and a revoked key stops working at once.
#[derive(Debug, Clone)]
pub struct ConsoleSession {
    pub cookie: String,
    /// What every state-changing console request must send besides the cookie.
    pub csrf: String,
    pub expires_at: chrono::DateTime<chrono::Utc>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SealedSession {
    /// Names the session for sign-out (a cookie without one is refused).
    id: Uuid,
    key: String,
    /// Unix seconds.
    expires: i64,
}

fn invalid_session() -> Error {
    Error::Unauthorized("the console session is not valid; sign in again".into())
}

/// The CSRF token of a console session: a digest of the (HttpOnly) cookie, which a page
/// of another origin can neither read nor compute.
pub fn console_csrf(cookie: &str) -> String {
    let digest = hash_key(&format!("mcp-pool console csrf\0{cookie}"));
    digest[..32].to_owned()
}

#[derive(Clone)]
pub struct KeyService {
    store: Store,
    console_ttl: Duration,
    keys: TokenAuthenticator<Principal>,
}

impl KeyService {
    pub fn new(store: Store, settings: &Settings) -> Self {
        Self {
            store,
            keys: TokenAuthenticator::new(settings, "the API key is not valid"),
            console_ttl: Duration::from_secs(settings.console.session_ttl_secs),
        }
    }

    /// Signs an operator in to the console: only an admin key opens it.
    pub async fn open_console_session(&self, secret: &str) -> Result<ConsoleSession> {
        let principal = self.authenticate(secret.trim()).await?;
        if principal.role != ApiKeyRole::Admin {
            return Err(Error::Forbidden(
                "the console needs an admin key; this is a service key".into(),
            ));
        }
        let expires_at = crate::domain::now()
            + chrono::Duration::from_std(self.console_ttl).unwrap_or(chrono::Duration::hours(12));
        let sealed = SealedSession {
            id: Uuid::new_v4(),
            key: secret.trim().to_owned(),
            expires: expires_at.timestamp(),
        };
        let cookie = self
            .store
            .cipher()
            .seal(&serde_json::to_string(&sealed).expect("a session serializes"));
        Ok(ConsoleSession {
            csrf: console_csrf(&cookie),
            cookie,
            expires_at,
        })
    }

    /// The session a console cookie holds, if it is one this service sealed.
    fn open_session(&self, cookie: &str) -> Result<(SealedSession, chrono::DateTime<chrono::Utc>)> {
        let opened = self
            .store
            .cipher()
            .open(cookie)
            .map_err(|_| invalid_session())?;
        let session: SealedSession =
            serde_json::from_str(&opened).map_err(|_| invalid_session())?;
        let expires_at =
            chrono::DateTime::from_timestamp(session.expires, 0).ok_or_else(invalid_session)?;
        Ok((session, expires_at))
    }

    /// Signs a console session out on the server: its cookie is refused from now on, by
    /// every instance, even where a copy of it was kept. A cookie that is no session
    /// signs nothing out.
    pub async fn close_console_session(&self, cookie: &str) -> Result<()> {
        if let Ok((session, expires_at)) = self.open_session(cookie) {
            self.store
                .api_keys()
                .sign_out_console(session.id, expires_at)
                .await?;
        }
        Ok(())
    }

    /// The key behind a console cookie, checked again as a bearer key would be.
    pub async fn console_principal(
        &self,
        cookie: &str,
    ) -> Result<(Principal, chrono::DateTime<chrono::Utc>)> {
        let (session, expires_at) = self.open_session(cookie)?;
        if expires_at <= crate::domain::now() {
            return Err(Error::Unauthorized(
                "the console session has expired; sign in again".into(),
            ));
        }
        if self.store.api_keys().console_signed_out(session.id).await? {
            return Err(Error::Unauthorized(
                "this console session was signed out; sign in again".into(),
            ));
        }
        let principal = self.authenticate(&session.key).await?;
        if principal.role != ApiKeyRole::Admin {
            return Err(invalid_session());
        }
        Ok((principal, expires_at))
    }

    pub async fn authenticate(&self, secret: &str) -> Result<Principal> {
        let keys = self.store.api_keys();
        self.keys
            .authenticate(secret, |digest| async move {
                Ok(keys
                    .find_active_by_hash(&digest)
                    .await?
                    .map(|record| Principal {
                        key_id: record.id,
                        role: record.role,
                    }))
            })
            .await
    }

    /// Creates a key; the returned secret is the only copy that will ever exist.
    pub async fn create(&self, name: &str, role: ApiKeyRole) -> Result<(ApiKeyRecord, String)> {
        let name = name.trim();
        if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
            return Err(Error::validation(
                "name must be 1 to 128 characters without control characters",
            ));
        }
        let generated = GeneratedKey::new();
        let record = self.insert(name, role, &generated).await?;
        tracing::info!(key = %record.id, role = role.as_str(), "API key created");
        Ok((record, generated.secret))
    }

    pub async fn list(&self) -> Result<Vec<ApiKeyRecord>> {
        Ok(self.store.api_keys().list().await?)
    }

    /// Revokes a key; the last active admin key cannot be revoked (nobody could make more).
    pub async fn revoke(&self, id: &str) -> Result<ApiKeyRecord> {
        let not_found = || Error::NotFound(Resource::ApiKey, id.to_owned());
        let uuid = Uuid::parse_str(id).map_err(|_| not_found())?;
        let repo = self.store.api_keys();
        let record = repo.get(uuid).await?.ok_or_else(not_found)?;
        if record.revoked_at.is_some() {
            return Err(Error::Conflict("the API key is already revoked".into()));
        }
        if record.role == ApiKeyRole::Admin && repo.count_active_admins().await? <= 1 {
            return Err(Error::Conflict(
                "the last active admin key cannot be revoked; create another admin key first"
                    .into(),
            ));
        }
        repo.revoke(uuid, crate::domain::now()).await?;
        self.keys.forget(&record.key_hash).await;
        tracing::info!(key = %uuid, "API key revoked");
        repo.get(uuid).await?.ok_or_else(not_found)
    }

    /// On start: installs `MCP_POOL_ADMIN_KEY` if given, or, when no admin key exists at
    /// all, generates one. Returns a generated secret so the caller can print it once.
    pub async fn bootstrap(&self, configured: Option<&SecretString>) -> Result<Option<String>> {
        let repo = self.store.api_keys();
        if let Some(secret) = configured {
            let generated = GeneratedKey::from_secret(secret.expose_secret().trim().to_owned());
            if generated.secret.len() < 16 {
                return Err(Error::validation(
                    "MCP_POOL_ADMIN_KEY must be at least 16 characters",
                ));
            }
            if repo.find_active_by_hash(&generated.hash).await?.is_none() {
                match self
                    .insert(
                        "bootstrap admin (MCP_POOL_ADMIN_KEY)",
                        ApiKeyRole::Admin,
                        &generated,
                    )
                    .await
                {
                    Ok(_) => tracing::info!("installed the admin key from MCP_POOL_ADMIN_KEY"),
                    Err(Error::Store(StoreError::Duplicate)) => tracing::warn!(
                        "MCP_POOL_ADMIN_KEY was revoked earlier and stays revoked; set a new one"
                    ),
                    Err(other) => return Err(other),
                }
            }
            return Ok(None);
        }
        if repo.count_active_admins().await? > 0 {
            return Ok(None);
        }
        let generated = GeneratedKey::new();
        self.insert("bootstrap admin", ApiKeyRole::Admin, &generated)
            .await?;
        Ok(Some(generated.secret))
    }

    async fn insert(
        &self,
        name: &str,
        role: ApiKeyRole,
        key: &GeneratedKey,
    ) -> Result<ApiKeyRecord> {
        let record = ApiKeyRecord {
            id: Uuid::now_v7(),
            name: name.to_owned(),
            role,
            key_hash: key.hash.clone(),
            key_prefix: key.prefix.clone(),
            created_at: crate::domain::now(),
            revoked_at: None,
        };
        self.store.api_keys().insert(&record).await?;
        Ok(record)
    }
}
