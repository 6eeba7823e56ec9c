//! The OAuth tables: per (user, server) tokens, authorizations in progress, and dynamic
//! client registrations. Callers hand in and get back clear JSON; it is sealed here.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
};
use uuid::Uuid;

use super::entities::{oauth_client, oauth_pending, oauth_token};
use super::{Db, StoreError, corrupt, from_json};
use crate::domain::UserId;
use crate::security::Cipher;

/// What is kept for a (user, server) that asked for authorization.
#[derive(Clone)]
pub struct TokenRecord {
    /// rmcp's stored credentials as JSON; `None` when not (or no longer) granted.
    pub credentials: Option<String>,
    /// The client and AS metadata as JSON.
    pub client: Option<String>,
    pub issuer: Option<String>,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub step_ups: i32,
}

impl std::fmt::Debug for TokenRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenRecord")
            .field("granted", &self.credentials.is_some())
            .field("issuer", &self.issuer)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// A grant to store: what the callback (or a refresh) produced.
pub struct Grant<'a> {
    pub credentials: &'a str,
    pub client: Option<&'a str>,
    pub issuer: Option<&'a str>,
    pub scopes: &'a [String],
    pub expires_at: Option<DateTime<Utc>>,
}

/// An authorization in progress.
pub struct PendingFlow {
    pub user: UserId,
    pub server: Uuid,
    /// Verifier, client, metadata and scopes as JSON.
    pub flow: String,
    pub authorization_url: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub struct OAuthRepo {
    db: Db,
    cipher: Arc<Cipher>,
}

impl OAuthRepo {
    pub(super) fn new(db: Db, cipher: Arc<Cipher>) -> Self {
        Self { db, cipher }
    }

    fn open(&self, column: &str, sealed: Option<&str>) -> Result<Option<String>, StoreError> {
        sealed
            .map(|s| self.cipher.open(s).map_err(|e| corrupt(column, e)))
            .transpose()
    }

    pub async fn token(
        &self,
        user: &UserId,
        server: Uuid,
    ) -> Result<Option<TokenRecord>, StoreError> {
        let Some(row) = oauth_token::Entity::find_by_id((user.as_str().to_owned(), server))
            .one(self.db.reader()?)
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(TokenRecord {
            credentials: self.open("credentials", row.credentials.as_deref())?,
            client: self.open("client", row.client.as_deref())?,
            issuer: row.issuer,
            scopes: from_json("scopes", row.scopes)?,
            expires_at: row.expires_at,
            step_ups: row.step_ups,
        }))
    }

    /// Records that the server asked this user for authorization (a row without tokens),
    /// leaving an existing row alone.
    pub async fn mark_required(&self, user: &UserId, server: Uuid) -> Result<(), StoreError> {
        let row = oauth_token::ActiveModel {
            user_id: Set(user.as_str().to_owned()),
            server_id: Set(server),
            credentials: Set(None),
            client: Set(None),
            issuer: Set(None),
            scopes: Set(serde_json::json!([])),
            expires_at: Set(None),
            step_ups: Set(0),
            refresh_lock_until: Set(None),
            refresh_lock_holder: Set(None),
            updated_at: Set(Utc::now()),
        };
        oauth_token::Entity::insert(row)
            .on_conflict(
                OnConflict::columns([oauth_token::Column::UserId, oauth_token::Column::ServerId])
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(self.db.writer()?)
            .await?;
        Ok(())
    }

    /// Stores a new grant (after the callback), replacing whatever was there.
    pub async fn save_grant(
        &self,
        user: &UserId,
        server: Uuid,
        grant: Grant<'_>,
    ) -> Result<(), StoreError> {
        let row = oauth_token::ActiveModel {
            user_id: Set(user.as_str().to_owned()),
            server_id: Set(server),
            credentials: Set(Some(self.cipher.seal(grant.credentials))),
            client: Set(grant.client.map(|c| self.cipher.seal(c))),
            issuer: Set(grant.issuer.map(str::to_owned)),
            scopes: Set(serde_json::json!(grant.scopes)),
            expires_at: Set(grant.expires_at),
            step_ups: Set(0),
            refresh_lock_until: Set(None),
            refresh_lock_holder: Set(None),
            updated_at: Set(Utc::now()),
        };
        oauth_token::Entity::insert(row)
            .on_conflict(
                OnConflict::columns([oauth_token::Column::UserId, oauth_token::Column::ServerId])
                    .update_columns([
                        oauth_token::Column::Credentials,
                        oauth_token::Column::Client,
                        oauth_token::Column::Issuer,
                        oauth_token::Column::Scopes,
                        oauth_token::Column::ExpiresAt,
                        oauth_token::Column::UpdatedAt,
                    ])
                    .to_owned(),
            )
            .exec_without_returning(self.db.writer()?)
            .await?;
        Ok(())
    }

    /// Replaces the tokens of an existing grant (a refresh); the client stays.
    pub async fn save_refreshed(
        &self,
        user: &UserId,
        server: Uuid,
        grant: Grant<'_>,
    ) -> Result<(), StoreError> {
        oauth_token::Entity::update_many()
            .col_expr(
                oauth_token::Column::Credentials,
                Expr::value(self.cipher.seal(grant.credentials)),
            )
            .col_expr(
                oauth_token::Column::Scopes,
                Expr::value(serde_json::json!(grant.scopes)),
            )
            .col_expr(
                oauth_token::Column::ExpiresAt,
                Expr::value(grant.expires_at),
            )
            .col_expr(oauth_token::Column::UpdatedAt, Expr::value(Utc::now()))
            .filter(token_of(user, server))
            .exec(self.db.writer()?)
            .await?;
        Ok(())
    }

    /// Forgets the tokens but remembers that the server asks for authorization; returns
    /// what was there (to revoke it).
    pub async fn forget(
        &self,
        user: &UserId,
        server: Uuid,
    ) -> Result<Option<TokenRecord>, StoreError> {
        let before = self.token(user, server).await?;
        oauth_token::Entity::update_many()
            .col_expr(
                oauth_token::Column::Credentials,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                oauth_token::Column::ExpiresAt,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
            .col_expr(
                oauth_token::Column::Scopes,
                Expr::value(serde_json::json!([])),
            )
            .col_expr(oauth_token::Column::UpdatedAt, Expr::value(Utc::now()))
            .filter(token_of(user, server))
            .exec(self.db.writer()?)
            .await?;
        Ok(before)
    }

    /// Everything kept for a deleted server; returns the tokens to revoke.
    pub async fn delete_server(
        &self,
        user: &UserId,
        server: Uuid,
    ) -> Result<Option<TokenRecord>, StoreError> {
        let before = self.token(user, server).await?;
        oauth_token::Entity::delete_many()
            .filter(token_of(user, server))
            .exec(self.db.writer()?)
            .await?;
        oauth_pending::Entity::delete_many()
            .filter(oauth_pending::Column::UserId.eq(user.as_str()))
            .filter(oauth_pending::Column::ServerId.eq(server))
            .exec(self.db.writer()?)
            .await?;
        Ok(before)
    }

    /// [`Self::delete_server`] for every user's tokens (a team server's members').
    pub async fn delete_server_for_everyone(
        &self,
        server: Uuid,
    ) -> Result<Vec<TokenRecord>, StoreError> {
        let users: Vec<String> = oauth_token::Entity::find()
            .filter(oauth_token::Column::ServerId.eq(server))
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| row.user_id)
            .collect();
        let mut records = Vec::new();
        for user in users {
            let Ok(user) = UserId::parse(&user) else {
                continue;
            };
            if let Some(record) = self.delete_server(&user, server).await? {
                records.push(record);
            }
        }
        Ok(records)
    }

    /// Counts a step-up authorization and returns how many there were since the last
    /// plain one.
    pub async fn count_step_up(&self, user: &UserId, server: Uuid) -> Result<i32, StoreError> {
        oauth_token::Entity::update_many()
            .col_expr(
                oauth_token::Column::StepUps,
                Expr::col(oauth_token::Column::StepUps).add(Expr::value(1)),
            )
            .filter(token_of(user, server))
            .exec(self.db.writer()?)
            .await?;
        Ok(self
            .token(user, server)
            .await?
            .map(|t| t.step_ups)
            .unwrap_or(0))
    }

    /// A plain authorization starts over: step-ups are counted from zero again.
    pub async fn reset_step_ups(&self, user: &UserId, server: Uuid) -> Result<(), StoreError> {
        oauth_token::Entity::update_many()
            .col_expr(oauth_token::Column::StepUps, Expr::value(0))
            .filter(token_of(user, server))
            .exec(self.db.writer()?)
            .await?;
        Ok(())
    }

    /// Takes the refresh lease of (user, server) for `holder` until `until_ms`, if it is
    /// free or expired. `true` when taken.
    pub async fn try_lock_refresh(
        &self,
        user: &UserId,
        server: Uuid,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, StoreError> {
        let taken = oauth_token::Entity::update_many()
            .col_expr(oauth_token::Column::RefreshLockUntil, Expr::value(until_ms))
            .col_expr(oauth_token::Column::RefreshLockHolder, Expr::value(holder))
            .filter(token_of(user, server))
            .filter(
                Condition::any()
                    .add(oauth_token::Column::RefreshLockUntil.is_null())
                    .add(oauth_token::Column::RefreshLockUntil.lt(now_ms)),
            )
            .exec(self.db.writer()?)
            .await?
            .rows_affected;
        Ok(taken == 1)
    }

    pub async fn unlock_refresh(
        &self,
        user: &UserId,
        server: Uuid,
        holder: &str,
    ) -> Result<(), StoreError> {
        oauth_token::Entity::update_many()
            .col_expr(
                oauth_token::Column::RefreshLockUntil,
                Expr::value(Option::<i64>::None),
            )
            .col_expr(
                oauth_token::Column::RefreshLockHolder,
                Expr::value(Option::<String>::None),
            )
            .filter(token_of(user, server))
            .filter(oauth_token::Column::RefreshLockHolder.eq(holder))
            .exec(self.db.writer()?)
            .await?;
        Ok(())
    }

    pub async fn insert_pending(
        &self,
        state_hash: &str,
        flow: &PendingFlow,
    ) -> Result<(), StoreError> {
        oauth_pending::Entity::insert(oauth_pending::ActiveModel {
            state_hash: Set(state_hash.to_owned()),
            user_id: Set(flow.user.as_str().to_owned()),
            server_id: Set(flow.server),
            flow: Set(self.cipher.seal(&flow.flow)),
            authorization_url: Set(self.cipher.seal(&flow.authorization_url)),
            expires_at: Set(flow.expires_at),
            created_at: Set(Utc::now()),
        })
        .exec_without_returning(self.db.writer()?)
        .await?;
        Ok(())
    }

    fn pending_from_row(&self, row: oauth_pending::Model) -> Result<PendingFlow, StoreError> {
        Ok(PendingFlow {
            user: UserId::parse(&row.user_id).map_err(|e| corrupt("user_id", e))?,
            server: row.server_id,
            flow: self.open("flow", Some(&row.flow))?.unwrap_or_default(),
            authorization_url: self
                .open("authorization_url", Some(&row.authorization_url))?
                .unwrap_or_default(),
            expires_at: row.expires_at,
        })
    }

    /// Takes the unexpired flow of this state hash, so that it can be used once only: of
    /// two callbacks with the same state, one gets it.
    pub async fn claim_pending(
        &self,
        state_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<PendingFlow>, StoreError> {
        let Some(row) = oauth_pending::Entity::find_by_id(state_hash.to_owned())
            .one(self.db.reader()?)
            .await?
        else {
            return Ok(None);
        };
        let deleted = oauth_pending::Entity::delete_many()
            .filter(oauth_pending::Column::StateHash.eq(state_hash))
            .exec(self.db.writer()?)
            .await?
            .rows_affected;
        if deleted != 1 || row.expires_at <= now {
            return Ok(None);
        }
        self.pending_from_row(row).map(Some)
    }

    /// The newest flow of (user, server) that is still valid at `valid_at`.
    pub async fn newest_pending(
        &self,
        user: &UserId,
        server: Uuid,
        valid_at: DateTime<Utc>,
    ) -> Result<Option<PendingFlow>, StoreError> {
        oauth_pending::Entity::find()
            .filter(oauth_pending::Column::UserId.eq(user.as_str()))
            .filter(oauth_pending::Column::ServerId.eq(server))
            .filter(oauth_pending::Column::ExpiresAt.gt(valid_at))
            .order_by_desc(oauth_pending::Column::CreatedAt)
            .one(self.db.reader()?)
            .await?
            .map(|row| self.pending_from_row(row))
            .transpose()
    }

    pub async fn count_pending(&self, user: &UserId) -> Result<u64, StoreError> {
        Ok(oauth_pending::Entity::find()
            .filter(oauth_pending::Column::UserId.eq(user.as_str()))
            .count(self.db.reader()?)
            .await?)
    }

    /// Drops flows that can no longer complete.
    pub async fn purge_expired(&self, now: DateTime<Utc>) -> Result<u64, StoreError> {
        Ok(oauth_pending::Entity::delete_many()
            .filter(oauth_pending::Column::ExpiresAt.lte(now))
            .exec(self.db.writer()?)
            .await?
            .rows_affected)
    }

    /// A client registered earlier at `issuer` for `redirect_uri`: (id, secret).
    pub async fn registration(
        &self,
        issuer: &str,
        redirect_uri: &str,
    ) -> Result<Option<(String, Option<String>)>, StoreError> {
        let Some(row) =
            oauth_client::Entity::find_by_id((issuer.to_owned(), redirect_uri.to_owned()))
                .one(self.db.reader()?)
                .await?
        else {
            return Ok(None);
        };
        let secret = self.open("client_secret", row.client_secret.as_deref())?;
        Ok(Some((row.client_id, secret)))
    }

    /// Keeps a registration; a concurrent one for the same key wins and is kept instead.
    pub async fn save_registration(
        &self,
        issuer: &str,
        redirect_uri: &str,
        client_id: &str,
        client_secret: Option<&str>,
    ) -> Result<(), StoreError> {
        oauth_client::Entity::insert(oauth_client::ActiveModel {
            issuer: Set(issuer.to_owned()),
            redirect_uri: Set(redirect_uri.to_owned()),
            client_id: Set(client_id.to_owned()),
            client_secret: Set(client_secret.map(|s| self.cipher.seal(s))),
            created_at: Set(Utc::now()),
        })
        .on_conflict(
            OnConflict::columns([
                oauth_client::Column::Issuer,
                oauth_client::Column::RedirectUri,
            ])
            .do_nothing()
            .to_owned(),
        )
        .exec_without_returning(self.db.writer()?)
        .await?;
        Ok(())
    }
}

/// The `oauth_tokens` row of (user, server).
fn token_of(user: &UserId, server: Uuid) -> Condition {
    Condition::all()
        .add(oauth_token::Column::UserId.eq(user.as_str()))
        .add(oauth_token::Column::ServerId.eq(server))
}
