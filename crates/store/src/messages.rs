//! `messages` with their ToolCallRecords (one `tool_calls` row each, ordered by
//! `position`).

use std::collections::HashMap;

use futures::future::BoxFuture;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, DatabaseTransaction, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, TransactionTrait, sea_query::Expr,
};
use serde_json::Value;
use uuid::Uuid;

use super::entities::{message, tool_call};
use super::group_commit::GroupedWrite;
use super::instances::ids;
use super::{Db, StoreError, corrupt};
use crate::domain::{CallOrigin, CallVia, InstanceId, ToolCallRecord, ToolCallStatus, UserId};

/// Who submitted each call of a message, by call id.
pub type CallOrigins = HashMap<String, CallOrigin>;

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
    /// Who submitted its calls (calls stored before this was kept have none): what the
    /// audit row of a call approved after a restart says.
    pub origins: CallOrigins,
}

/// Records added to a stored message, at `first_position` on, with who submitted them.
pub struct AddedCalls<'a> {
    pub records: &'a [ToolCallRecord],
    pub origins: &'a CallOrigins,
    pub first_position: usize,
}

/// A call waiting for its user's (or an operator's) decision.
#[derive(Debug, Clone)]
pub struct WaitingCall {
    pub user_id: UserId,
    pub message_id: Uuid,
    pub conversation_id: Option<Uuid>,
    /// When it was parked.
    pub since: chrono::DateTime<chrono::Utc>,
    pub record: ToolCallRecord,
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
            .one(self.db.reader()?)
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
            .one(self.db.reader()?)
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
                .exec_without_returning(self.db.writer()?)
                .await?;
            return Ok(());
        }
        let txn = self.db.writer()?.begin().await?;
        message::Entity::insert(row)
            .exec_without_returning(&txn)
            .await?;
        insert_records(
            &txn,
            message.id,
            &message.tool_calls,
            &message.origins,
            0,
            message.updated_at,
        )
        .await?;
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
        added: AddedCalls<'_>,
        owner: InstanceId,
        open_calls: usize,
    ) -> Result<bool, StoreError> {
        let change = RecordsChange::Add {
            calls: added.records.to_vec(),
            origins: added
                .records
                .iter()
                .filter_map(|c| added.origins.get(&c.id).map(|o| (c.id.clone(), *o)))
                .collect(),
            first_position: added.first_position,
        };
        self.write_as_owner(user, id, owner, open_calls, change)
            .await
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
        // Records with the same outcome (a shutdown cancels thousands alike).
        let mut outcomes: Vec<Outcome> = Vec::new();
        for call in calls {
            match outcomes.iter_mut().find(|outcome| {
                outcome.status == call.status
                    && outcome.is_error == call.is_error
                    && outcome.response == call.response
            }) {
                Some(outcome) => outcome.ids.push(call.id.clone()),
                None => outcomes.push(Outcome {
                    status: call.status,
                    response: call.response.clone(),
                    is_error: call.is_error,
                    ids: vec![call.id.clone()],
                }),
            }
        }
        let change = RecordsChange::Update(outcomes);
        self.write_as_owner(user, id, owner, open_calls, change)
            .await
    }

    /// Makes `change` as `owner`, the message's writer, in a transaction the store may
    /// share with other such writes (see `group_commit`); `false` when another instance
    /// holds the message, and nothing was written.
    async fn write_as_owner(
        &self,
        user: &UserId,
        id: Uuid,
        owner: InstanceId,
        open_calls: usize,
        change: RecordsChange,
    ) -> Result<bool, StoreError> {
        self.db.health.check()?;
        self.db
            .grouped_writes
            .apply(RecordsWrite {
                user: user.as_str().to_owned(),
                message: id,
                owner,
                open_calls,
                change,
            })
            .await
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
            .exec(self.db.writer()?)
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
            .exec(self.db.writer()?)
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
            .all(self.db.reader()?)
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
            .all(self.db.reader()?)
            .await?;
        self.with_records(rows).await
    }

    /// Calls waiting for a decision across all users, oldest first, and how many wait in
    /// all: the operators' approval queue (an index on status and time serves both).
    pub async fn waiting_calls(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<WaitingCall>, u64), StoreError> {
        use sea_orm::PaginatorTrait;
        let pending = tool_call::Entity::find()
            .filter(tool_call::Column::Status.eq(ToolCallStatus::Pending.as_str()));
        let total = pending.clone().count(self.db.reader()?).await?;
        let calls = pending
            .order_by_asc(tool_call::Column::CreatedAt)
            .order_by_asc(tool_call::Column::MessageId)
            .order_by_asc(tool_call::Column::Position)
            .offset(offset)
            .limit(limit)
            .all(self.db.reader()?)
            .await?;
        let ids: Vec<Uuid> = calls.iter().map(|c| c.message_id).collect();
        let messages: HashMap<Uuid, message::Model> = message::Entity::find()
            .filter(message::Column::Id.is_in(ids))
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|m| (m.id, m))
            .collect();
        let waiting = calls
            .into_iter()
            .filter_map(|call| {
                let message = messages.get(&call.message_id)?;
                Some((message, call))
            })
            .map(|(message, call)| {
                Ok(WaitingCall {
                    user_id: UserId::parse(&message.user_id).map_err(|e| corrupt("user_id", e))?,
                    message_id: message.id,
                    conversation_id: message.conversation_id,
                    since: call.created_at,
                    record: record(call)?,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok((waiting, total))
    }

    /// How many calls are open (pending or running) for each of `users` that has any.
    pub async fn open_calls_of(
        &self,
        users: &[String],
    ) -> Result<HashMap<String, u64>, StoreError> {
        use sea_orm::sea_query::ExprTrait;
        if users.is_empty() {
            return Ok(HashMap::new());
        }
        let rows: Vec<(String, Option<i64>)> = message::Entity::find()
            .select_only()
            .column(message::Column::UserId)
            .column_as(Expr::col(message::Column::OpenCalls).sum(), "open")
            .filter(message::Column::OpenCalls.gt(0))
            .filter(message::Column::UserId.is_in(users.iter().map(String::as_str)))
            .group_by(message::Column::UserId)
            .into_tuple()
            .all(self.db.reader()?)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(user, open)| (user, u64::try_from(open.unwrap_or(0)).unwrap_or(0)))
            .collect())
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
            .all(self.db.reader()?)
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
                .all(self.db.reader()?)
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
    origins: &CallOrigins,
    first_position: usize,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), StoreError> {
    for (offset, chunk) in calls.chunks(INSERT_CHUNK).enumerate() {
        let base = first_position + offset * INSERT_CHUNK;
        let rows = chunk.iter().enumerate().map(|(i, call)| {
            let origin = origins.get(&call.id);
            tool_call::ActiveModel {
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
                via: Set(origin.map(|o| o.via.as_str().to_owned())),
                key_id: Set(origin.and_then(|o| o.key_id)),
                by_admin: Set(origin.is_some_and(|o| o.by_admin)),
                from_app: Set(origin.is_some_and(|o| o.from_app)),
            }
        });
        tool_call::Entity::insert_many(rows)
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

/// A change to a message's records, made only by the instance holding the message.
struct RecordsWrite {
    user: String,
    message: Uuid,
    owner: InstanceId,
    /// The message's open calls once the change is made.
    open_calls: usize,
    change: RecordsChange,
}

enum RecordsChange {
    /// New records from this position on.
    Add {
        calls: Vec<ToolCallRecord>,
        origins: CallOrigins,
        first_position: usize,
    },
    /// New status and outcome for existing records.
    Update(Vec<Outcome>),
}

/// One outcome shared by the records `ids`.
struct Outcome {
    status: ToolCallStatus,
    response: Value,
    is_error: bool,
    ids: Vec<String>,
}

impl GroupedWrite for RecordsWrite {
    fn apply<'a>(
        &'a self,
        txn: &'a DatabaseTransaction,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            if !self.hold(txn).await? {
                return Ok(false);
            }
            let now = crate::domain::now();
            match &self.change {
                RecordsChange::Add {
                    calls,
                    origins,
                    first_position,
                } => {
                    insert_records(txn, self.message, calls, origins, *first_position, now).await?
                }
                RecordsChange::Update(outcomes) => {
                    for outcome in outcomes {
                        for chunk in outcome.ids.chunks(IN_CHUNK) {
                            tool_call::Entity::update_many()
                                .set(tool_call::ActiveModel {
                                    status: Set(outcome.status.as_str().to_owned()),
                                    response: Set(outcome.response.clone()),
                                    is_error: Set(outcome.is_error),
                                    updated_at: Set(now),
                                    ..Default::default()
                                })
                                .filter(tool_call::Column::MessageId.eq(self.message))
                                .filter(tool_call::Column::Id.is_in(chunk.iter().cloned()))
                                .exec(txn)
                                .await?;
                        }
                    }
                }
            }
            Ok(true)
        })
    }
}

impl RecordsWrite {
    /// Whether `owner` is the message's writer, taking the message row (and setting its
    /// count of open calls) if so. One statement both checks and takes it (PostgreSQL:
    /// its row lock; SQLite: the write lock of `BEGIN IMMEDIATE`) until the end of the
    /// transaction, so a claim either commits before (and this write is refused, having
    /// written nothing) or waits for it (and sees the open calls it leaves). The message
    /// row goes first, as deleting a message locks it before its records.
    async fn hold(&self, txn: &DatabaseTransaction) -> Result<bool, StoreError> {
        let held = message::Entity::update_many()
            .col_expr(message::Column::OwnerInstance, Expr::value(self.owner.0))
            .col_expr(
                message::Column::OpenCalls,
                Expr::value(self.open_calls as i32),
            )
            .filter(message::Column::Id.eq(self.message))
            .filter(message::Column::UserId.eq(self.user.as_str()))
            .filter(
                Condition::any()
                    .add(message::Column::OwnerInstance.is_null())
                    .add(message::Column::OwnerInstance.eq(self.owner.0)),
            )
            .exec(txn)
            .await?;
        Ok(held.rows_affected > 0)
    }
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
    let origins: CallOrigins = calls
        .iter()
        .filter_map(|call| {
            let via = CallVia::parse(call.via.as_deref()?)?;
            let origin = CallOrigin {
                key_id: call.key_id,
                by_admin: call.by_admin,
                from_app: call.from_app,
                ..CallOrigin::new(via)
            };
            Some((call.id.clone(), origin))
        })
        .collect();
    Ok(StoredMessage {
        origins,
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::test_support::sqlite_store;

    fn call(id: &str, status: ToolCallStatus) -> ToolCallRecord {
        ToolCallRecord {
            id: id.into(),
            server_id: None,
            server_name: Some("fx".into()),
            tool_name: Some("echo".into()),
            display_name: "mcp__fx__echo".into(),
            arguments: json!({}),
            status,
            response: Value::Null,
            is_error: false,
        }
    }

    async fn stored(repo: &MessageRepo, user: &UserId, id: Uuid) -> StoredMessage {
        repo.get(user, id).await.expect("reads").expect("exists")
    }

    /// Who submitted each call is stored with it: a message read back (its actor
    /// restarted from storage) still knows the door and key of its calls, whether they
    /// came with the message or were added to it later; calls without one have none.
    #[tokio::test]
    async fn who_submitted_each_call_is_read_back_with_the_message() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let repo = sqlite_store(dir.path()).await.messages();
        let user = UserId::parse("u1").expect("a user id");
        let me = InstanceId::generate();
        let key = Uuid::now_v7();
        let by_key = CallOrigin::new(CallVia::Chat).with_key(key, false);
        let by_admin = CallOrigin::new(CallVia::Gateway).with_key(Uuid::now_v7(), true);
        let id = Uuid::now_v7();
        let now = crate::domain::now();
        repo.insert(&StoredMessage {
            id,
            user_id: user.clone(),
            conversation_id: None,
            role: "assistant".into(),
            content: String::new(),
            tool_calls: vec![
                call("c0", ToolCallStatus::Pending),
                call("c1", ToolCallStatus::Pending),
            ],
            metadata: None,
            owner_instance: Some(me),
            created_at: now,
            updated_at: now,
            origins: CallOrigins::from([("c0".to_owned(), by_key)]),
        })
        .await
        .expect("inserts");
        let later = CallOrigins::from([("c2".to_owned(), by_admin)]);
        let added = repo
            .add_tool_calls(
                &user,
                id,
                AddedCalls {
                    records: &[call("c2", ToolCallStatus::Pending)],
                    origins: &later,
                    first_position: 2,
                },
                me,
                3,
            )
            .await
            .expect("adds");
        assert!(added);
        let read = stored(&repo, &user, id).await;
        assert_eq!(read.origins.get("c0"), Some(&by_key));
        assert_eq!(read.origins.get("c1"), None);
        assert_eq!(read.origins.get("c2"), Some(&by_admin));
    }

    /// Record writes issued together on the SQLite file share transactions (group
    /// commit), yet each answers for itself: one refused (its message held by another
    /// instance) writes nothing while the rest of its group lands with their messages'
    /// counts of open calls; one failing (a duplicate call id) fails alone, the others
    /// in its group landing once retried on their own.
    #[tokio::test]
    async fn record_writes_issued_together_each_answer_for_themselves() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let repo = sqlite_store(dir.path()).await.messages();
        let user = UserId::parse("u1").expect("a user id");
        let (me, other) = (InstanceId::generate(), InstanceId::generate());
        let mut ids = Vec::new();
        for n in 0..40 {
            let id = Uuid::now_v7();
            let now = crate::domain::now();
            repo.insert(&StoredMessage {
                id,
                user_id: user.clone(),
                conversation_id: None,
                role: "assistant".into(),
                content: String::new(),
                tool_calls: vec![call("c0", ToolCallStatus::Pending)],
                metadata: None,
                owner_instance: Some(if n == 7 { other } else { me }),
                created_at: now,
                updated_at: now,
                origins: CallOrigins::new(),
            })
            .await
            .expect("inserts");
            ids.push(id);
        }
        let open_ids = |open: Vec<StoredMessage>| -> Vec<Uuid> {
            let mut ids: Vec<Uuid> = open.iter().map(|m| m.id).collect();
            ids.sort();
            ids
        };

        // Every message's call settles at once; #7's is refused.
        let done = ToolCallRecord {
            response: json!([{"type": "text", "text": "ok"}]),
            ..call("c0", ToolCallStatus::Done)
        };
        let settled = [&done];
        let settles = ids
            .iter()
            .map(|&id| repo.update_tool_calls(&user, id, &settled, me, 0));
        for (n, answer) in futures::future::join_all(settles).await.iter().enumerate() {
            let applied = *answer.as_ref().expect("no write fails");
            assert_eq!(applied, n != 7, "#{n} applied: {applied}");
        }
        let open = repo.with_open_calls(&user, 100).await.expect("reads");
        assert_eq!(open_ids(open), vec![ids[7]], "only the refused stays open");
        let refused = stored(&repo, &user, ids[7]).await;
        assert_eq!(refused.tool_calls[0].status, ToolCallStatus::Pending);
        assert_eq!(refused.owner_instance, Some(other));
        let landed = stored(&repo, &user, ids[30]).await;
        assert_eq!(landed.tool_calls[0].status, ToolCallStatus::Done);
        assert_eq!(landed.tool_calls[0].response, done.response);

        // A new parked call on every message I hold at once; #21's reuses an id.
        let fresh = [call("c1", ToolCallStatus::Pending)];
        let duplicate = [call("c0", ToolCallStatus::Pending)];
        let no_origins = CallOrigins::new();
        let adds = ids
            .iter()
            .enumerate()
            .filter(|&(n, _)| n != 7)
            .map(|(n, &id)| {
                let calls = if n == 21 { &duplicate } else { &fresh };
                let added = AddedCalls {
                    records: calls,
                    origins: &no_origins,
                    first_position: 1,
                };
                repo.add_tool_calls(&user, id, added, me, 1)
            });
        let answers = futures::future::join_all(adds).await;
        let failed: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter(|(_, answer)| answer.is_err())
            .map(|(n, _)| n)
            .collect();
        assert_eq!(failed, vec![20], "only #21 (20th of the adds) fails");
        assert!(answers.iter().flatten().all(|&applied| applied));
        let open = repo.with_open_calls(&user, 100).await.expect("reads");
        let mut expected: Vec<Uuid> = (0..40).filter(|&n| n != 21).map(|n| ids[n]).collect();
        expected.sort();
        assert_eq!(
            open_ids(open),
            expected,
            "#21 stays settled, the others open"
        );
        let failed = stored(&repo, &user, ids[21]).await;
        assert_eq!(
            failed.tool_calls.len(),
            1,
            "nothing of the failed write stays"
        );
        let added = stored(&repo, &user, ids[30]).await;
        assert_eq!(added.tool_calls.len(), 2);
        assert_eq!(added.tool_calls[1].id, "c1");
    }
}
