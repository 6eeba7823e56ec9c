//! `audit_log`: one row per executed tool call and per admin decision on a user's call
//! (never the call's arguments), read newest first, filtered and paged for the console.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, DatabaseTransaction, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect,
};
use uuid::Uuid;

use super::entities::audit_entry;
use super::group_commit::GroupedWrite;
use super::{Db, StoreError};
use crate::domain::{ToolCallStatus, UserId};

/// What an audit row records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditOutcome {
    /// An executed call, as it settled (`done`, `error`, …).
    Settled(ToolCallStatus),
    /// An admin approved a user's parked call.
    Approved,
    /// An admin rejected a user's parked call.
    Rejected,
}

impl AuditOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditOutcome::Settled(status) => status.as_str(),
            AuditOutcome::Approved => "approved",
            AuditOutcome::Rejected => "rejected",
        }
    }
}

/// One audit row to write.
#[derive(Clone)]
pub struct AuditEntry {
    pub user_id: UserId,
    pub server_id: Option<Uuid>,
    pub server_name: String,
    pub tool_name: String,
    pub message_id: Option<Uuid>,
    pub outcome: AuditOutcome,
    pub error_code: Option<String>,
    pub latency_ms: Option<i64>,
    /// The admin key that decided, for [`AuditOutcome::Approved`]/[`AuditOutcome::Rejected`].
    pub decided_by: Option<Uuid>,
}

/// One audit row as read.
#[derive(Debug, Clone)]
pub struct AuditRow {
    pub id: Uuid,
    pub user_id: String,
    pub server_id: Option<Uuid>,
    pub server_name: String,
    pub tool_name: String,
    pub message_id: Option<Uuid>,
    pub outcome: String,
    pub error_code: Option<String>,
    pub latency_ms: Option<i64>,
    pub decided_by: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// Which rows, newest first; every field narrows.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub user_id: Option<String>,
    pub server_id: Option<Uuid>,
    pub tool_name: Option<String>,
    pub outcome: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone)]
pub struct AuditRepo {
    db: Db,
}

impl AuditRepo {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    /// Appends the row; on the SQLite file in a transaction it may share with other
    /// writes queued at the same moment (see `group_commit`).
    pub async fn record(&self, entry: AuditEntry) -> Result<(), StoreError> {
        let row = audit_entry::ActiveModel {
            id: Set(Uuid::now_v7()),
            user_id: Set(entry.user_id.as_str().to_owned()),
            mcp_server_id: Set(entry.server_id),
            server_name: Set(entry.server_name),
            tool_name: Set(entry.tool_name),
            message_id: Set(entry.message_id),
            status: Set(entry.outcome.as_str().to_owned()),
            error_code: Set(entry.error_code),
            latency_ms: Set(entry.latency_ms),
            decided_by: Set(entry.decided_by.map(|id| id.to_string())),
            created_at: Set(crate::domain::now()),
        };
        if self.db.grouped_writes.is_grouped() {
            self.db.grouped_writes.apply(AuditWrite(row)).await?;
        } else {
            // Alone, one statement needs no transaction of its own.
            audit_entry::Entity::insert(row)
                .exec_without_returning(self.db.writer()?)
                .await?;
        }
        Ok(())
    }

    /// One page of the rows `filter` keeps (newest first), and how many it keeps in all.
    pub async fn page(
        &self,
        filter: &AuditFilter,
        page: u64,
        page_size: u64,
    ) -> Result<(Vec<AuditRow>, u64), StoreError> {
        let mut condition = Condition::all();
        if let Some(user) = &filter.user_id {
            condition = condition.add(audit_entry::Column::UserId.eq(user.as_str()));
        }
        if let Some(server) = filter.server_id {
            condition = condition.add(audit_entry::Column::McpServerId.eq(server));
        }
        if let Some(tool) = &filter.tool_name {
            condition = condition.add(audit_entry::Column::ToolName.eq(tool.as_str()));
        }
        if let Some(outcome) = &filter.outcome {
            condition = condition.add(audit_entry::Column::Status.eq(outcome.as_str()));
        }
        if let Some(from) = filter.from {
            condition = condition.add(audit_entry::Column::CreatedAt.gte(from));
        }
        if let Some(to) = filter.to {
            condition = condition.add(audit_entry::Column::CreatedAt.lt(to));
        }
        let query = audit_entry::Entity::find().filter(condition);
        let total = query.clone().count(self.db.reader()?).await?;
        let rows = query
            .order_by_desc(audit_entry::Column::CreatedAt)
            .order_by_desc(audit_entry::Column::Id)
            .offset(page * page_size)
            .limit(page_size)
            .all(self.db.reader()?)
            .await?;
        let rows = rows
            .into_iter()
            .map(|row| AuditRow {
                id: row.id,
                user_id: row.user_id,
                server_id: row.mcp_server_id,
                server_name: row.server_name,
                tool_name: row.tool_name,
                message_id: row.message_id,
                outcome: row.status,
                error_code: row.error_code,
                latency_ms: row.latency_ms,
                decided_by: row.decided_by,
                created_at: row.created_at,
            })
            .collect();
        Ok((rows, total))
    }
}

/// An audit row to append.
struct AuditWrite(audit_entry::ActiveModel);

impl GroupedWrite for AuditWrite {
    fn apply<'a>(
        &'a self,
        txn: &'a DatabaseTransaction,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            audit_entry::Entity::insert(self.0.clone())
                .exec_without_returning(txn)
                .await?;
            Ok(true)
        })
    }
}
