//! `messages` with their ToolCallRecords (one `tool_calls` row each, ordered by
//! `position`).

use std::collections::HashMap;

use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, DatabaseTransaction, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, SqliteTransactionMode, TransactionOptions, TransactionTrait,
    sea_query::Expr,
};
use serde_json::Value;
use uuid::Uuid;

use super::entities::{message, tool_call};
use super::instances::ids;
use super::{Db, StoreError, corrupt};
use crate::domain::{InstanceId, ToolCallRecord, UserId};

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

#[derive(Debug, Clone)]
pub struct MessageRepo {
    db: Db,
}

fn open_count(calls: &[ToolCallRecord]) -> i32 {
    calls.iter().filter(|c| c.status.is_open()).count() as i32
}

/// Ids per `IN (...)` list, well under every backend's limit on bound parameters.
const IN_CHUNK: usize = 500;
/// Rows per multi-row `INSERT` (13 parameters each).
const INSERT_CHUNK: usize = 32;

impl MessageRepo {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    pub async fn get(&self, user: &UserId, id: Uuid) -> Result<Option<StoredMessage>, StoreError> {
        let Some(row) = message::Entity::find_by_id(id)
            .filter(message::Column::UserId.eq(user.as_str()))
            .one(&self.db.read)
            .await?
        else {
            return Ok(None);
        };
        let mut messages = self.with_records(vec![row]).await?;
        Ok(messages.pop())
    }

    /// Whether the id is taken by anyone (another user's message must not be overwritten).
    pub async fn exists(&self, id: Uuid) -> Result<bool, StoreError> {
        Ok(message::Entity::find_by_id(id)
            .one(&self.db.read)
            .await?
            .is_some())
    }

    /// A new message with its records (positions follow their order).
    pub async fn insert(&self, message: &StoredMessage) -> Result<(), StoreError> {
        let row = message::ActiveModel {
            id: Set(message.id),
            conversation_id: Set(message.conversation_id),
            user_id: Set(message.user_id.as_str().to_owned()),
            role: Set(message.role.clone()),
            content: Set(message.content.clone()),
            open_calls: Set(open_count(&message.tool_calls)),
            metadata: Set(message.metadata.clone()),
            owner_instance: Set(message.owner_instance.map(|i| i.0)),
            created_at: Set(message.created_at),
            updated_at: Set(message.updated_at),
        };
        if message.tool_calls.is_empty() {
            message::Entity::insert(row)
                .exec_without_returning(&self.db.write)
                .await?;
            return Ok(());
        }
        let txn = self.db.write.begin().await?;
        message::Entity::insert(row)
            .exec_without_returning(&txn)
            .await?;
        insert_records(&txn, message.id, &message.tool_calls, 0, message.updated_at).await?;
        txn.commit().await?;
        Ok(())
    }

    /// Adds records to the message, after the `first_position` it already has, if `owner`
    /// still holds it; `false` when another instance took it over (this one was presumed
    /// dead): its copy is stale. `open_calls`: how many of the message's calls are open
    /// once this is written (its writer holds them all).
    pub async fn add_tool_calls(
        &self,
        user: &UserId,
        id: Uuid,
        calls: &[ToolCallRecord],
        first_position: usize,
        owner: InstanceId,
        open_calls: usize,
    ) -> Result<bool, StoreError> {
        let Some(txn) = self.write_as_owner(user, id, owner, open_calls).await? else {
            return Ok(false);
        };
        insert_records(&txn, id, calls, first_position, crate::domain::now()).await?;
        txn.commit().await?;
        Ok(true)
    }

    /// Writes these records' status and outcome (one row each; records settled alike
    /// share one statement) if `owner` still holds the message; `false` when another
    /// instance took it over. Nothing else of the message is written but its count of
    /// open calls, `open_calls` once this is written (its writer holds them all).
    pub async fn update_tool_calls(
        &self,
        user: &UserId,
        id: Uuid,
        calls: &[&ToolCallRecord],
        owner: InstanceId,
        open_calls: usize,
    ) -> Result<bool, StoreError> {
        let Some(txn) = self.write_as_owner(user, id, owner, open_calls).await? else {
            return Ok(false);
        };
        let now = crate::domain::now();
        // Records with the same outcome (a shutdown cancels thousands alike).
        let mut groups: Vec<(&ToolCallRecord, Vec<&str>)> = Vec::new();
        for call in calls {
            match groups.iter_mut().find(|(first, _)| {
                first.status == call.status
                    && first.is_error == call.is_error
                    && first.response == call.response
            }) {
                Some((_, ids)) => ids.push(&call.id),
                None => groups.push((call, vec![&call.id])),
            }
        }
        for (outcome, call_ids) in groups {
            for chunk in call_ids.chunks(IN_CHUNK) {
                tool_call::Entity::update_many()
                    .set(tool_call::ActiveModel {
                        status: Set(outcome.status.as_str().to_owned()),
                        response: Set(outcome.response.clone()),
                        is_error: Set(outcome.is_error),
                        updated_at: Set(now),
                        ..Default::default()
                    })
                    .filter(tool_call::Column::MessageId.eq(id))
                    .filter(tool_call::Column::Id.is_in(chunk.iter().copied()))
                    .exec(&txn)
                    .await?;
            }
        }
        txn.commit().await?;
        Ok(true)
    }

    /// A transaction in which `owner` is the message's writer, its count of open calls
    /// already set, or `None` when another instance holds it. One statement both checks
    /// and takes the message row (PostgreSQL: its row lock; SQLite: the write lock taken
    /// by `BEGIN IMMEDIATE`) until the end of the transaction, so a claim either commits
    /// before (and this write is refused) or waits for it (and sees the open calls it
    /// leaves). The message row is written first, as a deletion of the message locks it
    /// before its records.
    async fn write_as_owner(
        &self,
        user: &UserId,
        id: Uuid,
        owner: InstanceId,
        open_calls: usize,
    ) -> Result<Option<DatabaseTransaction>, StoreError> {
        let txn = self
            .db
            .write
            .begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                ..Default::default()
            })
            .await?;
        let held = message::Entity::update_many()
            .col_expr(message::Column::OwnerInstance, Expr::value(owner.0))
            .col_expr(message::Column::OpenCalls, Expr::value(open_calls as i32))
            .filter(message::Column::Id.eq(id))
            .filter(message::Column::UserId.eq(user.as_str()))
            .filter(
                Condition::any()
                    .add(message::Column::OwnerInstance.is_null())
                    .add(message::Column::OwnerInstance.eq(owner.0)),
            )
            .exec(&txn)
            .await?;
        Ok((held.rows_affected > 0).then_some(txn))
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
            .exec(&self.db.write)
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
            .exec(&self.db.write)
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
            .all(&self.db.read)
            .await?;
        rows.reverse();
        self.with_records(rows).await
    }

    /// The user's newest `limit` messages with calls still open (pending or invoking).
    pub async fn with_open_calls(
        &self,
        user: &UserId,
        limit: u64,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = message::Entity::find()
            .filter(message::Column::UserId.eq(user.as_str()))
            .filter(message::Column::OpenCalls.gt(0))
            .order_by_desc(message::Column::CreatedAt)
            .limit(limit)
            .all(&self.db.read)
            .await?;
        self.with_records(rows).await
    }

    /// Messages with open calls no live instance holds (their owner stopped or died).
    pub async fn orphaned(&self, live: &[InstanceId]) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = message::Entity::find()
            .filter(message::Column::OpenCalls.gt(0))
            .filter(
                Condition::any()
                    .add(message::Column::OwnerInstance.is_null())
                    .add(message::Column::OwnerInstance.is_not_in(ids(live))),
            )
            .all(&self.db.read)
            .await?;
        self.with_records(rows).await
    }

    /// The messages with their records, in the given order.
    async fn with_records(
        &self,
        rows: Vec<message::Model>,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let mut records: HashMap<Uuid, Vec<tool_call::Model>> = HashMap::new();
        let ids: Vec<Uuid> = rows.iter().map(|m| m.id).collect();
        for chunk in ids.chunks(IN_CHUNK) {
            let calls = tool_call::Entity::find()
                .filter(tool_call::Column::MessageId.is_in(chunk.iter().copied()))
                .order_by_asc(tool_call::Column::MessageId)
                .order_by_asc(tool_call::Column::Position)
                .all(&self.db.read)
                .await?;
            for call in calls {
                records.entry(call.message_id).or_default().push(call);
            }
        }
        rows.into_iter()
            .map(|row| {
                let calls = records.remove(&row.id).unwrap_or_default();
                to_domain(row, calls)
            })
            .collect()
    }
}

/// Inserts records at positions from `first_position` on.
async fn insert_records(
    txn: &DatabaseTransaction,
    message: Uuid,
    calls: &[ToolCallRecord],
    first_position: usize,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), StoreError> {
    for (offset, chunk) in calls.chunks(INSERT_CHUNK).enumerate() {
        let base = first_position + offset * INSERT_CHUNK;
        let rows = chunk
            .iter()
            .enumerate()
            .map(|(i, call)| tool_call::ActiveModel {
                message_id: Set(message),
                id: Set(call.id.clone()),
                position: Set((base + i) as i32),
                server_id: Set(call.server_id),
                server_name: Set(call.server_name.clone()),
                tool_name: Set(call.tool_name.clone()),
                display_name: Set(call.display_name.clone()),
                arguments: Set(call.arguments.clone()),
                status: Set(call.status.as_str().to_owned()),
                response: Set(call.response.clone()),
                is_error: Set(call.is_error),
                created_at: Set(now),
                updated_at: Set(now),
            });
        tool_call::Entity::insert_many(rows)
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

fn record(row: tool_call::Model) -> Result<ToolCallRecord, StoreError> {
    let status = serde_json::from_value(Value::String(row.status))
        .map_err(|e| corrupt("tool_calls.status", e))?;
    Ok(ToolCallRecord {
        id: row.id,
        server_id: row.server_id,
        server_name: row.server_name,
        tool_name: row.tool_name,
        display_name: row.display_name,
        arguments: row.arguments,
        status,
        response: row.response,
        is_error: row.is_error,
    })
}

/// A message's `updated_at` is the latest change to it or to any of its records.
fn to_domain(
    row: message::Model,
    calls: Vec<tool_call::Model>,
) -> Result<StoredMessage, StoreError> {
    let updated_at = calls
        .iter()
        .map(|c| c.updated_at)
        .fold(row.updated_at, std::cmp::max);
    Ok(StoredMessage {
        id: row.id,
        user_id: UserId::parse(&row.user_id).map_err(|e| corrupt("user_id", e))?,
        conversation_id: row.conversation_id,
        role: row.role,
        content: row.content,
        tool_calls: calls.into_iter().map(record).collect::<Result<_, _>>()?,
        metadata: row.metadata,
        owner_instance: row.owner_instance.map(InstanceId),
        created_at: row.created_at,
        updated_at,
    })
}
