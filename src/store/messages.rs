//! `messages` with their embedded ToolCallRecords, and the audit log of executed calls.

use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, DatabaseConnection, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, sea_query::Expr,
};
use serde_json::Value;
use uuid::Uuid;

use super::entities::{audit_entry, message};
use super::instances::ids;
use super::{StoreError, corrupt, from_json};
use crate::domain::{InstanceId, ToolCallRecord, ToolCallStatus, UserId};

#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub id: Uuid,
    pub user_id: UserId,
    pub conversation_id: Option<Uuid>,
    pub role: String,
    pub content: String,
    pub tool_calls: Vec<ToolCallRecord>,
    /// Set by the agent loop on assistant messages (model, rounds, finish reason).
    pub metadata: Option<Value>,
    /// The instance whose confirmation actor writes the open calls.
    pub owner_instance: Option<InstanceId>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// One executed tool call, for the audit log (never its arguments).
pub struct AuditEntry {
    pub user_id: UserId,
    pub server_id: Option<Uuid>,
    pub server_name: String,
    pub tool_name: String,
    pub message_id: Option<Uuid>,
    pub status: ToolCallStatus,
    pub error_code: Option<String>,
    pub latency_ms: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct MessageRepo {
    db: DatabaseConnection,
}

fn open_count(calls: &[ToolCallRecord]) -> i32 {
    calls.iter().filter(|c| c.status.is_open()).count() as i32
}

impl MessageRepo {
    pub(super) fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }

    pub async fn get(&self, user: &UserId, id: Uuid) -> Result<Option<StoredMessage>, StoreError> {
        message::Entity::find_by_id(id)
            .filter(message::Column::UserId.eq(user.as_str()))
            .one(&self.db)
            .await?
            .map(to_domain)
            .transpose()
    }

    /// Whether the id is taken by anyone (another user's message must not be overwritten).
    pub async fn exists(&self, id: Uuid) -> Result<bool, StoreError> {
        Ok(message::Entity::find_by_id(id)
            .one(&self.db)
            .await?
            .is_some())
    }

    pub async fn insert(&self, message: &StoredMessage) -> Result<(), StoreError> {
        message::Entity::insert(message::ActiveModel {
            id: Set(message.id),
            conversation_id: Set(message.conversation_id),
            user_id: Set(message.user_id.as_str().to_owned()),
            role: Set(message.role.clone()),
            content: Set(message.content.clone()),
            tool_calls: Set(serde_json::json!(message.tool_calls)),
            open_calls: Set(open_count(&message.tool_calls)),
            metadata: Set(message.metadata.clone()),
            owner_instance: Set(message.owner_instance.map(|i| i.0)),
            created_at: Set(message.created_at),
            updated_at: Set(message.updated_at),
        })
        .exec_without_returning(&self.db)
        .await?;
        Ok(())
    }

    /// Writes the records if `owner` still holds the message; `false` when another
    /// instance took it over (this instance was presumed dead): its copy is stale.
    pub async fn save_tool_calls(
        &self,
        user: &UserId,
        id: Uuid,
        calls: &[ToolCallRecord],
        owner: InstanceId,
    ) -> Result<bool, StoreError> {
        let updated = message::Entity::update_many()
            .set(message::ActiveModel {
                tool_calls: Set(serde_json::json!(calls)),
                open_calls: Set(open_count(calls)),
                owner_instance: Set(Some(owner.0)),
                updated_at: Set(crate::domain::now()),
                ..Default::default()
            })
            .filter(message::Column::Id.eq(id))
            .filter(message::Column::UserId.eq(user.as_str()))
            .filter(
                Condition::any()
                    .add(message::Column::OwnerInstance.is_null())
                    .add(message::Column::OwnerInstance.eq(owner.0)),
            )
            .exec(&self.db)
            .await?;
        Ok(updated.rows_affected > 0)
    }

    /// Makes `me` the writer of the message's calls if nobody else holds open calls of
    /// it or, given the `live` instances, if the one holding them is dead. `false` when
    /// the message is missing or another (live) instance holds it.
    pub async fn claim(
        &self,
        user: &UserId,
        id: Uuid,
        me: InstanceId,
        live: Option<&[InstanceId]>,
    ) -> Result<bool, StoreError> {
        let mut free = Condition::any()
            .add(message::Column::OwnerInstance.is_null())
            .add(message::Column::OwnerInstance.eq(me.0))
            .add(message::Column::OpenCalls.eq(0));
        if let Some(live) = live {
            free = free.add(message::Column::OwnerInstance.is_not_in(ids(live)));
        }
        let updated = message::Entity::update_many()
            .col_expr(message::Column::OwnerInstance, Expr::value(me.0))
            .filter(message::Column::Id.eq(id))
            .filter(message::Column::UserId.eq(user.as_str()))
            .filter(free)
            .exec(&self.db)
            .await?;
        Ok(updated.rows_affected > 0)
    }

    /// The text and notes of a message; its ToolCallRecords are left to their writer.
    pub async fn save_content(
        &self,
        user: &UserId,
        id: Uuid,
        content: &str,
        metadata: &Value,
    ) -> Result<(), StoreError> {
        message::Entity::update_many()
            .set(message::ActiveModel {
                content: Set(content.to_owned()),
                metadata: Set(Some(metadata.clone())),
                updated_at: Set(crate::domain::now()),
                ..Default::default()
            })
            .filter(message::Column::Id.eq(id))
            .filter(message::Column::UserId.eq(user.as_str()))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// The newest `limit` messages of a conversation, oldest first.
    pub async fn in_conversation(
        &self,
        user: &UserId,
        conversation: Uuid,
        limit: u64,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let mut rows = message::Entity::find()
            .filter(message::Column::ConversationId.eq(conversation))
            .filter(message::Column::UserId.eq(user.as_str()))
            .order_by_desc(message::Column::CreatedAt)
            .order_by_desc(message::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?;
        rows.reverse();
        rows.into_iter().map(to_domain).collect()
    }

    /// Messages with open calls no live instance holds (their owner stopped or died).
    pub async fn orphaned(&self, live: &[InstanceId]) -> Result<Vec<StoredMessage>, StoreError> {
        message::Entity::find()
            .filter(message::Column::OpenCalls.gt(0))
            .filter(
                Condition::any()
                    .add(message::Column::OwnerInstance.is_null())
                    .add(message::Column::OwnerInstance.is_not_in(ids(live))),
            )
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_domain)
            .collect()
    }

    pub async fn audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        audit_entry::Entity::insert(audit_entry::ActiveModel {
            id: Set(Uuid::now_v7()),
            user_id: Set(entry.user_id.as_str().to_owned()),
            mcp_server_id: Set(entry.server_id),
            server_name: Set(entry.server_name),
            tool_name: Set(entry.tool_name),
            message_id: Set(entry.message_id),
            status: Set(serde_json::to_value(entry.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()),
            error_code: Set(entry.error_code),
            latency_ms: Set(entry.latency_ms),
            created_at: Set(crate::domain::now()),
        })
        .exec_without_returning(&self.db)
        .await?;
        Ok(())
    }
}

fn to_domain(row: message::Model) -> Result<StoredMessage, StoreError> {
    Ok(StoredMessage {
        id: row.id,
        user_id: UserId::parse(&row.user_id).map_err(|e| corrupt("user_id", e))?,
        conversation_id: row.conversation_id,
        role: row.role,
        content: row.content,
        tool_calls: from_json("tool_calls", row.tool_calls)?,
        metadata: row.metadata,
        owner_instance: row.owner_instance.map(InstanceId),
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}
