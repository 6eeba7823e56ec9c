//! The `api_keys` table: digests only, never keys.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
};
use uuid::Uuid;

use super::entities::{api_key, console_signout};
use super::{Db, StoreError, corrupt};
use crate::security::ApiKeyRole;

#[derive(Debug, Clone)]
pub struct ApiKeyRecord {
    pub id: Uuid,
    pub name: String,
    pub role: ApiKeyRole,
    pub key_hash: String,
    pub key_prefix: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone)]
pub struct ApiKeyRepo {
    db: Db,
}

impl ApiKeyRepo {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    pub async fn insert(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        api_key::Entity::insert(api_key::ActiveModel {
            id: Set(key.id),
            name: Set(key.name.clone()),
            role: Set(key.role.as_str().to_owned()),
            key_hash: Set(key.key_hash.clone()),
            key_prefix: Set(key.key_prefix.clone()),
            created_at: Set(key.created_at),
            revoked_at: Set(key.revoked_at),
        })
        .exec_without_returning(self.db.writer()?)
        .await?;
        Ok(())
    }

    /// The active (not revoked) key with this digest.
    pub async fn find_active_by_hash(
        &self,
        hash: &str,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        api_key::Entity::find()
            .filter(api_key::Column::KeyHash.eq(hash))
            .filter(api_key::Column::RevokedAt.is_null())
            .one(self.db.reader()?)
            .await?
            .map(to_domain)
            .transpose()
    }

    pub async fn get(&self, id: Uuid) -> Result<Option<ApiKeyRecord>, StoreError> {
        api_key::Entity::find_by_id(id)
            .one(self.db.reader()?)
            .await?
            .map(to_domain)
            .transpose()
    }

    pub async fn list(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        api_key::Entity::find()
            .order_by_asc(api_key::Column::CreatedAt)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(to_domain)
            .collect()
    }

    pub async fn count_active_admins(&self) -> Result<u64, StoreError> {
        Ok(api_key::Entity::find()
            .filter(api_key::Column::Role.eq(ApiKeyRole::Admin.as_str()))
            .filter(api_key::Column::RevokedAt.is_null())
            .count(self.db.reader()?)
            .await?)
    }

    pub async fn revoke(&self, id: Uuid, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let result = api_key::Entity::update_many()
            .set(api_key::ActiveModel {
                revoked_at: Set(Some(at)),
                ..Default::default()
            })
            .filter(api_key::Column::Id.eq(id))
            .filter(api_key::Column::RevokedAt.is_null())
            .exec(self.db.writer()?)
            .await?;
        Ok(result.rows_affected == 1)
    }

    /// Ends console session `session` (valid until `expires_at`) for every instance;
    /// sessions whose time is up anyway are dropped from the list here.
    pub async fn sign_out_console(
        &self,
        session: Uuid,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let db = self.db.writer()?;
        console_signout::Entity::delete_many()
            .filter(console_signout::Column::ExpiresAt.lt(Utc::now()))
            .exec(db)
            .await?;
        console_signout::Entity::insert(console_signout::ActiveModel {
            session_id: Set(session),
            expires_at: Set(expires_at),
        })
        .on_conflict(
            sea_orm::sea_query::OnConflict::column(console_signout::Column::SessionId)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(db)
        .await?;
        Ok(())
    }

    pub async fn console_signed_out(&self, session: Uuid) -> Result<bool, StoreError> {
        Ok(console_signout::Entity::find_by_id(session)
            .one(self.db.reader()?)
            .await?
            .is_some())
    }
}

fn to_domain(row: api_key::Model) -> Result<ApiKeyRecord, StoreError> {
    Ok(ApiKeyRecord {
        id: row.id,
        name: row.name,
        role: ApiKeyRole::parse(&row.role).map_err(|e| corrupt("role", e))?,
        key_hash: row.key_hash,
        key_prefix: row.key_prefix,
        created_at: row.created_at,
        revoked_at: row.revoked_at,
    })
}
