//! `tasks`: tool calls that outlive their request. A status moves only while it is open
//! (`working`, `input_required`): every write that settles a task is conditional on that,
//! so whichever settles first (the call's end, a cancel from any instance, the sweep of a
//! stopped instance's tasks) wins and the others change nothing.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DbBackend, EntityTrait,
    PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, SqliteTransactionMode, Statement,
    TransactionOptions, TransactionTrait,
};
use serde_json::Value;
use uuid::Uuid;

use super::entities::task;
use super::instances::ids;
use super::{Db, StoreError, corrupt};
use crate::domain::{AssistantId, InstanceId, TaskOrigin, TaskStatus, UserId};

#[derive(Debug, Clone, PartialEq)]
pub struct StoredTask {
    pub id: Uuid,
    pub user_id: UserId,
    /// A gateway client's task: only that assistant's clients see it.
    pub assistant_id: Option<AssistantId>,
    pub origin: TaskOrigin,
    pub server_name: String,
    pub tool_name: String,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    /// The call's result (`completed`).
    pub result: Option<Value>,
    /// Why it failed (`failed`): a JSON-RPC error object.
    pub error: Option<Value>,
    /// What the call waits for (`input_required`): input requests by key.
    pub input_requests: Option<Value>,
    pub instance_id: InstanceId,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// The server's own task this one follows, if its server made one of the call.
    pub upstream: Option<UpstreamTask>,
}

/// A task a server made of a call (the tasks extension): on which of the user's servers,
/// and its id there.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamTask {
    pub server_id: Uuid,
    pub task_id: String,
}

impl StoredTask {
    /// How long it is kept from its creation (its `ttlMs`).
    pub fn ttl_ms(&self) -> u64 {
        (self.expires_at - self.created_at)
            .num_milliseconds()
            .max(0) as u64
    }
}

fn stored(row: task::Model) -> Result<StoredTask, StoreError> {
    Ok(StoredTask {
        id: row.id,
        user_id: UserId::parse(&row.user_id).map_err(|e| corrupt("user_id", e))?,
        assistant_id: row
            .assistant_id
            .as_deref()
            .map(AssistantId::parse)
            .transpose()
            .map_err(|e| corrupt("assistant_id", e))?,
        origin: TaskOrigin::parse(&row.origin).ok_or_else(|| corrupt("origin", &row.origin))?,
        server_name: row.server_name,
        tool_name: row.tool_name,
        status: TaskStatus::parse(&row.status).ok_or_else(|| corrupt("status", &row.status))?,
        status_message: row.status_message,
        result: row.result,
        error: row.error,
        input_requests: row.input_requests,
        instance_id: InstanceId(row.instance_id),
        created_at: row.created_at,
        updated_at: row.updated_at,
        expires_at: row.expires_at,
        upstream: match (row.server_id, row.upstream_task_id) {
            (Some(server_id), Some(task_id)) => Some(UpstreamTask { server_id, task_id }),
            _ => None,
        },
    })
}

/// The advisory lock space of users' task counts (the second key is the user's hash).
const TASKS_LOCK: i32 = 0x7461_736b;

fn row(task: &StoredTask) -> task::ActiveModel {
    task::ActiveModel {
        id: Set(task.id),
        user_id: Set(task.user_id.as_str().to_owned()),
        assistant_id: Set(task.assistant_id.as_ref().map(|a| a.as_str().to_owned())),
        origin: Set(task.origin.as_str().to_owned()),
        server_name: Set(task.server_name.clone()),
        tool_name: Set(task.tool_name.clone()),
        status: Set(task.status.as_str().to_owned()),
        status_message: Set(task.status_message.clone()),
        result: Set(task.result.clone()),
        error: Set(task.error.clone()),
        input_requests: Set(task.input_requests.clone()),
        instance_id: Set(task.instance_id.0),
        created_at: Set(task.created_at),
        updated_at: Set(task.updated_at),
        expires_at: Set(task.expires_at),
        server_id: Set(task.upstream.as_ref().map(|u| u.server_id)),
        upstream_task_id: Set(task.upstream.as_ref().map(|u| u.task_id.clone())),
    }
}

fn open() -> Condition {
    Condition::any()
        .add(task::Column::Status.eq(TaskStatus::Working.as_str()))
        .add(task::Column::Status.eq(TaskStatus::InputRequired.as_str()))
}

#[derive(Debug, Clone)]
pub struct TaskRepo {
    db: Db,
}

impl TaskRepo {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    /// Stores an open task unless its user has `max_open` open already (`false`). The
    /// count and the insert are one transaction holding the user's turn (PostgreSQL: an
    /// advisory lock on the user, SQLite: the write lock of `BEGIN IMMEDIATE`), so
    /// concurrent requests, on this instance or another, cannot all pass one count.
    pub async fn insert_within(
        &self,
        task: &StoredTask,
        max_open: u64,
    ) -> Result<bool, StoreError> {
        let txn = self
            .db
            .writer()?
            .begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                ..Default::default()
            })
            .await?;
        if txn.get_database_backend() == DbBackend::Postgres {
            txn.query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                [TASKS_LOCK.into(), task.user_id.as_str().into()],
            ))
            .await?;
        }
        let open = task::Entity::find()
            .filter(task::Column::UserId.eq(task.user_id.as_str()))
            .filter(open())
            .count(&txn)
            .await?;
        if open >= max_open {
            return Ok(false);
        }
        task::Entity::insert(row(task))
            .exec_without_returning(&txn)
            .await?;
        txn.commit().await?;
        Ok(true)
    }

    /// The task, if it has not expired.
    pub async fn get(&self, id: Uuid) -> Result<Option<StoredTask>, StoreError> {
        task::Entity::find_by_id(id)
            .filter(task::Column::ExpiresAt.gt(crate::domain::now()))
            .one(self.db.reader()?)
            .await?
            .map(stored)
            .transpose()
    }

    /// A user's tasks, newest first.
    pub async fn list(&self, user: &UserId, limit: u64) -> Result<Vec<StoredTask>, StoreError> {
        task::Entity::find()
            .filter(task::Column::UserId.eq(user.as_str()))
            .filter(task::Column::ExpiresAt.gt(crate::domain::now()))
            .order_by_desc(task::Column::CreatedAt)
            .limit(limit)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(stored)
            .collect()
    }

    /// Ends an open task: `status` is terminal, with its result or error; `false` when it
    /// was no longer open (cancelled, failed by a sweep) or is gone.
    pub async fn settle(
        &self,
        id: Uuid,
        status: TaskStatus,
        status_message: Option<String>,
        result: Option<Value>,
        error: Option<Value>,
    ) -> Result<bool, StoreError> {
        self.update_open(
            id,
            task::ActiveModel {
                status: Set(status.as_str().to_owned()),
                status_message: Set(status_message),
                result: Set(result),
                error: Set(error),
                input_requests: Set(None),
                updated_at: Set(crate::domain::now()),
                ..Default::default()
            },
        )
        .await
    }

    /// What an open task is doing: `working` or `input_required` with what it waits for,
    /// and its latest status message; `false` when it is no longer open.
    pub async fn progress(
        &self,
        id: Uuid,
        status: TaskStatus,
        status_message: Option<String>,
        input_requests: Option<Value>,
    ) -> Result<bool, StoreError> {
        self.update_open(
            id,
            task::ActiveModel {
                status: Set(status.as_str().to_owned()),
                status_message: Set(status_message),
                input_requests: Set(input_requests),
                updated_at: Set(crate::domain::now()),
                ..Default::default()
            },
        )
        .await
    }

    /// Records the server's own task an open task follows.
    pub async fn follows(&self, id: Uuid, upstream: &UpstreamTask) -> Result<bool, StoreError> {
        self.update_open(
            id,
            task::ActiveModel {
                server_id: Set(Some(upstream.server_id)),
                upstream_task_id: Set(Some(upstream.task_id.clone())),
                ..Default::default()
            },
        )
        .await
    }

    /// Moves an open task from stopped instance `from` to `to`, once: false when another
    /// instance took it first or it is settled.
    pub async fn adopt(
        &self,
        id: Uuid,
        from: InstanceId,
        to: InstanceId,
    ) -> Result<bool, StoreError> {
        let updated = task::Entity::update_many()
            .set(task::ActiveModel {
                instance_id: Set(to.0),
                updated_at: Set(crate::domain::now()),
                ..Default::default()
            })
            .filter(task::Column::Id.eq(id))
            .filter(task::Column::InstanceId.eq(from.0))
            .filter(open())
            .exec(self.db.writer()?)
            .await?;
        Ok(updated.rows_affected > 0)
    }

    async fn update_open(&self, id: Uuid, change: task::ActiveModel) -> Result<bool, StoreError> {
        let updated = task::Entity::update_many()
            .set(change)
            .filter(task::Column::Id.eq(id))
            .filter(open())
            .exec(self.db.writer()?)
            .await?;
        Ok(updated.rows_affected > 0)
    }

    /// Open tasks whose instance is not among `live`.
    pub async fn orphaned(&self, live: &[InstanceId]) -> Result<Vec<StoredTask>, StoreError> {
        task::Entity::find()
            .filter(open())
            .filter(task::Column::InstanceId.is_not_in(ids(live)))
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(stored)
            .collect()
    }

    /// Drops the rows past their time to live; how many.
    pub async fn drop_expired(&self) -> Result<u64, StoreError> {
        Ok(task::Entity::delete_many()
            .filter(task::Column::ExpiresAt.lte(crate::domain::now()))
            .exec(self.db.writer()?)
            .await?
            .rows_affected)
    }
}
