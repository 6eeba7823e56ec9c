//! `audit_log`: one row per executed tool call and per admin decision on a user's call
//! (never the call's arguments), read newest first, filtered and paged for the console.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseBackend, DatabaseTransaction, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, QueryTrait, Statement,
};
use uuid::Uuid;

use super::entities::audit_entry;
use super::group_commit::GroupedWrite;
use super::{Counted, Db, StoreError, count_capped};
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
    /// An admin changed a user's server (support acting for the user).
    ServerChanged,
    /// An admin deleted a user's server.
    ServerDeleted,
    /// A connection tried on request (`POST …/connect`) failed.
    ConnectFailed,
}

impl AuditOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditOutcome::Settled(status) => status.as_str(),
            AuditOutcome::Approved => "approved",
            AuditOutcome::Rejected => "rejected",
            AuditOutcome::ServerChanged => "server_changed",
            AuditOutcome::ServerDeleted => "server_deleted",
            AuditOutcome::ConnectFailed => "connect_failed",
        }
    }
}

/// One audit row, as written and as read: what a call's journal line holds too (see
/// `services::audit`), so a row replayed after a crash is the row it would have been.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Made with the row, so writing it twice (a replayed journal) keeps one.
    pub id: Uuid,
    pub created_at: DateTime<Utc>,
    pub user_id: String,
    pub server_id: Option<Uuid>,
    pub server_name: String,
    pub tool_name: String,
    pub message_id: Option<Uuid>,
    /// An executed call's status (`done`, `error`, …), or `approved`/`rejected` for an
    /// admin's decision (see [`AuditOutcome`]).
    pub outcome: String,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub latency_ms: Option<i64>,
    /// The admin key that approved or rejected the call for its user.
    pub decided_by: Option<String>,
    /// The door the call came in by (`CallVia`).
    pub via: Option<String>,
    /// The API key or gateway token the call came with.
    pub key_id: Option<String>,
    /// `key_id` is an admin's key acting for the user.
    pub by_admin: bool,
    /// The call was made by a server's view (MCP Apps) through its host. Absent from
    /// journal lines written before there were apps.
    #[serde(default)]
    pub from_app: bool,
    pub instance_id: Option<Uuid>,
    /// The call's arguments and result as the redaction rule leaves them.
    pub arguments: Option<String>,
    pub result: Option<String>,
}

impl AuditEntry {
    /// A row of `user` made now; the caller fills in the rest.
    pub fn new(user: &UserId, outcome: AuditOutcome, server_name: &str, tool_name: &str) -> Self {
        Self {
            id: Uuid::now_v7(),
            created_at: crate::domain::now(),
            user_id: user.as_str().to_owned(),
            server_id: None,
            server_name: server_name.to_owned(),
            tool_name: tool_name.to_owned(),
            message_id: None,
            outcome: outcome.as_str().to_owned(),
            error_code: None,
            error_message: None,
            latency_ms: None,
            decided_by: None,
            via: None,
            key_id: None,
            by_admin: false,
            from_app: false,
            instance_id: None,
            arguments: None,
            result: None,
        }
    }

    /// The row's fields in [`COLUMNS`] order, as the table takes them: every text within
    /// its column's width and without NUL (which PostgreSQL refuses), so no caller-chosen
    /// name or upstream text can make the database refuse a row.
    fn bind(&self, values: &mut Vec<sea_orm::Value>) {
        let fit_ref = |text: &str, max: Option<usize>| fit(text.to_owned(), max);
        let opt = |text: &Option<String>, max: Option<usize>| -> sea_orm::Value {
            text.as_deref().map(|t| fit_ref(t, max)).into()
        };
        values.extend([
            self.id.into(),
            fit_ref(&self.user_id, Some(128)).into(),
            self.server_id.into(),
            fit_ref(&self.server_name, Some(256)).into(),
            fit_ref(&self.tool_name, Some(256)).into(),
            self.message_id.into(),
            fit_ref(&self.outcome, Some(16)).into(),
            opt(&self.error_code, Some(64)),
            self.latency_ms.into(),
            opt(&self.decided_by, Some(64)),
            self.created_at.into(),
            opt(&self.via, Some(16)),
            opt(&self.key_id, Some(64)),
            self.by_admin.into(),
            self.from_app.into(),
            self.instance_id.into(),
            opt(&self.arguments, None),
            opt(&self.result, None),
            opt(&self.error_message, None),
        ]);
    }

    fn from_model(row: audit_entry::Model) -> Self {
        Self {
            id: row.id,
            created_at: row.created_at,
            user_id: row.user_id,
            server_id: row.mcp_server_id,
            server_name: row.server_name,
            tool_name: row.tool_name,
            message_id: row.message_id,
            outcome: row.status,
            error_code: row.error_code,
            error_message: row.error_message,
            latency_ms: row.latency_ms,
            decided_by: row.decided_by,
            via: row.via,
            key_id: row.key_id,
            by_admin: row.by_admin,
            from_app: row.from_app,
            instance_id: row.instance_id,
            arguments: row.arguments,
            result: row.result,
        }
    }
}

/// Rows per statement at most: 19,000 bound values, within SQLite's 32,766 and
/// PostgreSQL's 65,535.
const MAX_ROWS_PER_STATEMENT: usize = 1_000;

/// The columns [`AuditEntry::bind`] fills, in its order.
const COLUMNS: [&str; 19] = [
    "id",
    "user_id",
    "mcp_server_id",
    "server_name",
    "tool_name",
    "message_id",
    "status",
    "error_code",
    "latency_ms",
    "decided_by",
    "created_at",
    "via",
    "key_id",
    "by_admin",
    "from_app",
    "instance_id",
    "arguments",
    "result",
    "error_message",
];

/// `INSERT … ON CONFLICT (id) DO NOTHING` of `entries`: the same text for the same
/// number of rows.
fn insert_statement(backend: DatabaseBackend, entries: &[AuditEntry]) -> Statement {
    use std::fmt::Write;
    let mut sql = format!("INSERT INTO audit_log ({}) VALUES ", COLUMNS.join(", "));
    let mut values: Vec<sea_orm::Value> = Vec::with_capacity(entries.len() * COLUMNS.len());
    for (row, entry) in entries.iter().enumerate() {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for column in 0..COLUMNS.len() {
            if column > 0 {
                sql.push_str(", ");
            }
            match backend {
                DatabaseBackend::Postgres => {
                    let _ = write!(sql, "${}", row * COLUMNS.len() + column + 1);
                }
                _ => sql.push('?'),
            }
        }
        sql.push(')');
        entry.bind(&mut values);
    }
    sql.push_str(" ON CONFLICT (id) DO NOTHING");
    Statement::from_sql_and_values(backend, sql, values)
}

/// `text` without NUL characters, cut to `max_chars` characters when given.
fn fit(text: String, max_chars: Option<usize>) -> String {
    let too_long = max_chars.is_some_and(|max| text.chars().nth(max).is_some());
    if !too_long && !text.contains('\0') {
        return text;
    }
    text.chars()
        .filter(|c| *c != '\0')
        .take(max_chars.unwrap_or(usize::MAX))
        .collect()
}

/// One audit row as read.
pub type AuditRow = AuditEntry;

/// Which rows, newest first; every field narrows.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub user_id: Option<String>,
    pub server_id: Option<Uuid>,
    /// The server's name (as it was when the call ran).
    pub server_name: Option<String>,
    pub tool_name: Option<String>,
    pub outcome: Option<String>,
    pub via: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

impl AuditFilter {
    fn condition(&self) -> Condition {
        let filter = self;
        let mut condition = Condition::all();
        if let Some(user) = &filter.user_id {
            condition = condition.add(audit_entry::Column::UserId.eq(user.as_str()));
        }
        if let Some(server) = filter.server_id {
            condition = condition.add(audit_entry::Column::McpServerId.eq(server));
        }
        if let Some(name) = &filter.server_name {
            condition = condition.add(audit_entry::Column::ServerName.eq(name.as_str()));
        }
        if let Some(via) = &filter.via {
            condition = condition.add(audit_entry::Column::Via.eq(via.as_str()));
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
        condition
    }
}

#[derive(Debug, Clone)]
pub struct AuditRepo {
    db: Db,
}

impl AuditRepo {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    /// Appends the row (skipped if its id is there already); on the SQLite file in a
    /// transaction it may share with other writes queued at the same moment (see
    /// `group_commit`).
    pub async fn record(&self, entry: AuditEntry) -> Result<(), StoreError> {
        if self.db.grouped_writes.is_grouped() {
            self.db.grouped_writes.apply(AuditWrite(entry)).await?;
        } else {
            // Alone, one statement needs no transaction of its own.
            let db = self.db.writer()?;
            db.execute_raw(insert_statement(
                db.get_database_backend(),
                std::slice::from_ref(&entry),
            ))
            .await?;
        }
        Ok(())
    }

    /// Appends rows, up to [`MAX_ROWS_PER_STATEMENT`] per statement; a row whose id is
    /// there already is skipped (a journal replayed after a crash writes each row once).
    ///
    /// Every call writes a row, so this is the audit's cost in the database: the
    /// statement's text is the same for every batch of a size (the driver's statement
    /// cache prepares it once), and each row's fields are bound as they are, fitted,
    /// without building an entity first.
    pub async fn record_many(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let db = self.db.writer()?;
        let backend = db.get_database_backend();
        for entries in entries.chunks(MAX_ROWS_PER_STATEMENT) {
            db.execute_raw(insert_statement(backend, entries)).await?;
        }
        Ok(())
    }

    /// One row, by id.
    pub async fn get(&self, id: Uuid) -> Result<Option<AuditRow>, StoreError> {
        Ok(audit_entry::Entity::find_by_id(id)
            .one(self.db.reader()?)
            .await?
            .map(AuditEntry::from_model))
    }

    /// Drops up to `limit` rows older than `cutoff`, oldest first; how many went.
    pub async fn delete_before(
        &self,
        cutoff: DateTime<Utc>,
        limit: u64,
    ) -> Result<u64, StoreError> {
        let ids: Vec<Uuid> = audit_entry::Entity::find()
            .select_only()
            .column(audit_entry::Column::Id)
            .filter(audit_entry::Column::CreatedAt.lt(cutoff))
            .order_by_asc(audit_entry::Column::CreatedAt)
            .limit(limit)
            .into_tuple()
            .all(self.db.reader()?)
            .await?;
        if ids.is_empty() {
            return Ok(0);
        }
        let gone = audit_entry::Entity::delete_many()
            .filter(audit_entry::Column::Id.is_in(ids))
            .exec(self.db.writer()?)
            .await?;
        Ok(gone.rows_affected)
    }

    /// One page of the rows `filter` keeps (newest first), and how many it keeps (counted
    /// up to `COUNT_CAP`).
    pub async fn page(
        &self,
        filter: &AuditFilter,
        page: u64,
        page_size: u64,
    ) -> Result<(Vec<AuditRow>, Counted), StoreError> {
        let query = audit_entry::Entity::find().filter(filter.condition());
        let total = count_capped(
            self.db.reader()?,
            query
                .clone()
                .select_only()
                .column(audit_entry::Column::Id)
                .into_query(),
        )
        .await?;
        let rows = query
            .order_by_desc(audit_entry::Column::CreatedAt)
            .order_by_desc(audit_entry::Column::Id)
            .offset(page * page_size)
            .limit(page_size)
            .all(self.db.reader()?)
            .await?;
        let rows = rows.into_iter().map(AuditEntry::from_model).collect();
        Ok((rows, total))
    }

    /// Up to `limit` rows `filter` keeps that come after `after` (newest first): what an
    /// export reads page by page, each page a seek on the index, however deep.
    pub async fn after(
        &self,
        filter: &AuditFilter,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: u64,
    ) -> Result<Vec<AuditRow>, StoreError> {
        let mut condition = filter.condition();
        if let Some((at, id)) = after {
            condition = condition.add(
                Condition::any()
                    .add(audit_entry::Column::CreatedAt.lt(at))
                    .add(
                        Condition::all()
                            .add(audit_entry::Column::CreatedAt.eq(at))
                            .add(audit_entry::Column::Id.lt(id)),
                    ),
            );
        }
        let rows = audit_entry::Entity::find()
            .filter(condition)
            .order_by_desc(audit_entry::Column::CreatedAt)
            .order_by_desc(audit_entry::Column::Id)
            .limit(limit)
            .all(self.db.reader()?)
            .await?;
        Ok(rows.into_iter().map(AuditEntry::from_model).collect())
    }
}

/// An audit row to append.
struct AuditWrite(AuditEntry);

impl GroupedWrite for AuditWrite {
    fn apply<'a>(
        &'a self,
        txn: &'a DatabaseTransaction,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            txn.execute_raw(insert_statement(
                txn.get_database_backend(),
                std::slice::from_ref(&self.0),
            ))
            .await?;
            Ok(true)
        })
    }
}
