//! `gateway_tokens` and `xiaozhi_bridges`: how an assistant is reached as one MCP server.

use std::sync::Arc;

use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder, sea_query::Expr,
};
use uuid::Uuid;

use super::entities::{gateway_token, xiaozhi_bridge};
use super::instances::ids;
use super::{Db, StoreError, corrupt};
use crate::domain::{AssistantId, InstanceId, UserId};
use crate::security::Cipher;

#[derive(Debug, Clone)]
pub struct GatewayToken {
    pub id: Uuid,
    pub user_id: UserId,
    pub assistant_id: AssistantId,
    pub name: String,
    pub prefix: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Clone)]
pub struct XiaozhiBridge {
    pub id: Uuid,
    pub user_id: UserId,
    pub assistant_id: AssistantId,
    /// Clear text: the repository seals it on write and opens it on read.
    pub endpoint: String,
    pub enabled: bool,
    /// The instance running it; the one that last saved it takes it over.
    pub owner_instance: Option<InstanceId>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Clone)]
pub struct GatewayRepo {
    db: Db,
    cipher: Arc<Cipher>,
}

fn token(row: gateway_token::Model) -> Result<GatewayToken, StoreError> {
    Ok(GatewayToken {
        id: row.id,
        user_id: UserId::parse(&row.user_id).map_err(|e| corrupt("user_id", e))?,
        assistant_id: AssistantId::parse(&row.assistant_id)
            .map_err(|e| corrupt("assistant_id", e))?,
        name: row.name,
        prefix: row.token_prefix,
        created_at: row.created_at,
    })
}

impl GatewayRepo {
    pub(super) fn new(db: Db, cipher: Arc<Cipher>) -> Self {
        Self { db, cipher }
    }

    pub async fn insert_token(&self, record: &GatewayToken, hash: &str) -> Result<(), StoreError> {
        gateway_token::Entity::insert(gateway_token::ActiveModel {
            id: Set(record.id),
            user_id: Set(record.user_id.as_str().to_owned()),
            assistant_id: Set(record.assistant_id.as_str().to_owned()),
            name: Set(record.name.clone()),
            token_hash: Set(hash.to_owned()),
            token_prefix: Set(record.prefix.clone()),
            created_at: Set(record.created_at),
        })
        .exec_without_returning(self.db.writer()?)
        .await?;
        Ok(())
    }

    pub async fn tokens(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<Vec<GatewayToken>, StoreError> {
        gateway_token::Entity::find()
            .filter(gateway_token::Column::UserId.eq(user.as_str()))
            .filter(gateway_token::Column::AssistantId.eq(assistant.as_str()))
            .order_by_asc(gateway_token::Column::CreatedAt)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(token)
            .collect()
    }

    /// Every gateway token of the user, any assistant's.
    pub async fn tokens_of_user(&self, user: &UserId) -> Result<Vec<GatewayToken>, StoreError> {
        gateway_token::Entity::find()
            .filter(gateway_token::Column::UserId.eq(user.as_str()))
            .order_by_asc(gateway_token::Column::CreatedAt)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(token)
            .collect()
    }

    pub async fn token_by_hash(&self, hash: &str) -> Result<Option<GatewayToken>, StoreError> {
        gateway_token::Entity::find()
            .filter(gateway_token::Column::TokenHash.eq(hash))
            .one(self.db.reader()?)
            .await?
            .map(token)
            .transpose()
    }

    /// Deletes a token; returns its hash (to forget it from caches) when it existed.
    pub async fn delete_token(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        id: Uuid,
    ) -> Result<Option<String>, StoreError> {
        let Some(row) = gateway_token::Entity::find_by_id(id)
            .filter(gateway_token::Column::UserId.eq(user.as_str()))
            .filter(gateway_token::Column::AssistantId.eq(assistant.as_str()))
            .one(self.db.reader()?)
            .await?
        else {
            return Ok(None);
        };
        gateway_token::Entity::delete_by_id(id)
            .exec(self.db.writer()?)
            .await?;
        Ok(Some(row.token_hash))
    }

    fn bridge(&self, row: xiaozhi_bridge::Model) -> Result<XiaozhiBridge, StoreError> {
        Ok(XiaozhiBridge {
            id: row.id,
            user_id: UserId::parse(&row.user_id).map_err(|e| corrupt("user_id", e))?,
            assistant_id: AssistantId::parse(&row.assistant_id)
                .map_err(|e| corrupt("assistant_id", e))?,
            endpoint: self
                .cipher
                .open(&row.endpoint)
                .map_err(|e| corrupt("endpoint", e))?,
            enabled: row.enabled,
            owner_instance: row.owner_instance.map(InstanceId),
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }

    /// Creates or replaces the assistant's bridge.
    pub async fn upsert_bridge(&self, bridge: &XiaozhiBridge) -> Result<(), StoreError> {
        xiaozhi_bridge::Entity::insert(xiaozhi_bridge::ActiveModel {
            id: Set(bridge.id),
            user_id: Set(bridge.user_id.as_str().to_owned()),
            assistant_id: Set(bridge.assistant_id.as_str().to_owned()),
            endpoint: Set(self.cipher.seal(&bridge.endpoint)),
            enabled: Set(bridge.enabled),
            owner_instance: Set(bridge.owner_instance.map(|i| i.0)),
            created_at: Set(bridge.created_at),
            updated_at: Set(bridge.updated_at),
        })
        .on_conflict(
            OnConflict::columns([
                xiaozhi_bridge::Column::UserId,
                xiaozhi_bridge::Column::AssistantId,
            ])
            .update_columns([
                xiaozhi_bridge::Column::Endpoint,
                xiaozhi_bridge::Column::Enabled,
                xiaozhi_bridge::Column::OwnerInstance,
                xiaozhi_bridge::Column::UpdatedAt,
            ])
            .to_owned(),
        )
        .exec_without_returning(self.db.writer()?)
        .await?;
        Ok(())
    }

    pub async fn bridge_of(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<Option<XiaozhiBridge>, StoreError> {
        xiaozhi_bridge::Entity::find()
            .filter(xiaozhi_bridge::Column::UserId.eq(user.as_str()))
            .filter(xiaozhi_bridge::Column::AssistantId.eq(assistant.as_str()))
            .one(self.db.reader()?)
            .await?
            .map(|row| self.bridge(row))
            .transpose()
    }

    pub async fn enabled_bridges(&self) -> Result<Vec<XiaozhiBridge>, StoreError> {
        xiaozhi_bridge::Entity::find()
            .filter(xiaozhi_bridge::Column::Enabled.eq(true))
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| self.bridge(row))
            .collect()
    }

    /// Makes `me` the runner of the bridge unless a live other instance runs it.
    pub async fn claim_bridge(
        &self,
        id: Uuid,
        me: InstanceId,
        live: &[InstanceId],
    ) -> Result<bool, StoreError> {
        let updated = xiaozhi_bridge::Entity::update_many()
            .col_expr(xiaozhi_bridge::Column::OwnerInstance, Expr::value(me.0))
            .filter(xiaozhi_bridge::Column::Id.eq(id))
            .filter(xiaozhi_bridge::Column::Enabled.eq(true))
            .filter(
                Condition::any()
                    .add(xiaozhi_bridge::Column::OwnerInstance.is_null())
                    .add(xiaozhi_bridge::Column::OwnerInstance.eq(me.0))
                    .add(xiaozhi_bridge::Column::OwnerInstance.is_not_in(ids(live))),
            )
            .exec(self.db.writer()?)
            .await?;
        Ok(updated.rows_affected > 0)
    }

    pub async fn delete_bridge(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<bool, StoreError> {
        let result = xiaozhi_bridge::Entity::delete_many()
            .filter(xiaozhi_bridge::Column::UserId.eq(user.as_str()))
            .filter(xiaozhi_bridge::Column::AssistantId.eq(assistant.as_str()))
            .exec(self.db.writer()?)
            .await?;
        Ok(result.rows_affected > 0)
    }
}
