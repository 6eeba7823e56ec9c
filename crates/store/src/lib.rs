//! Persistence: sea-orm entities and one repository per aggregate.
//!
//! Only this crate touches sea-orm. Repositories take and return domain types; secret
//! maps are sealed with the [`Cipher`] on the way in and opened on the way out, so nothing
//! above this layer handles ciphertext and nothing below it sees clear secrets in SQL.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbErr, SqlErr};
use secrecy::ExposeSecret;

// The ground floor's modules under their own names, so paths read `crate::domain::UserId`
// in every crate.
use mcp_pool_core::{config, domain, security};

use crate::config::Settings;
use crate::domain::SecretMap;
use crate::security::Cipher;

mod api_keys;
mod assistants;
mod audit;
mod catalog;
mod checkpoints;
mod conversations;
mod entities;
mod gateway;
mod group_commit;
mod health;
mod instances;
mod messages;
mod notify;
mod oauth;
mod policies;
mod presets;
mod servers;
mod tasks;

pub use api_keys::{ApiKeyRecord, ApiKeyRepo};
pub use assistants::{AssistantRepo, StoredSettings};
pub use audit::{AuditEntry, AuditFilter, AuditOutcome, AuditRepo, AuditRow};
pub use catalog::{CatalogRepo, CatalogSummary, Imported};
pub use conversations::{ConversationRepo, Ownership, StoredConversation};
pub use gateway::{GatewayRepo, GatewayToken, XiaozhiBridge};
pub use instances::InstanceRepo;
pub use messages::{AddedCalls, CallOrigins, MessageRepo, StoredMessage, WaitingCall};
pub use notify::NoteListener;
pub use oauth::{Grant, OAuthRepo, PendingFlow, TokenRecord};
pub use policies::PolicyRepo;
pub use presets::PresetRepo;
pub use servers::ServerRepo;
pub use tasks::{StoredTask, TaskRepo, UpstreamTask};

/// How many matching rows a list counts at most. Counting every match of a large table
/// (100,000 users, 1,000,000 audit rows) costs more than reading the page itself (on
/// PostgreSQL 100–200 ms for the users, measured in BENCHMARKS.md); past this a page says
/// "at least this many" and the operator narrows the filter or pages on.
pub const COUNT_CAP: u64 = 10_000;

/// `column` holds `search`, in any case; `%`, `_` and a backslash in `search` are literal.
fn contains(
    column: impl sea_orm::sea_query::IntoColumnRef,
    search: &str,
) -> sea_orm::sea_query::Expr {
    use sea_orm::sea_query::{Expr, ExprTrait, Func, LikeExpr};
    let mut escaped = String::with_capacity(search.len() + 2);
    escaped.push('%');
    for c in search.to_ascii_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped.push('%');
    Expr::expr(Func::lower(Expr::col(column))).like(LikeExpr::new(escaped).escape('\\'))
}

/// How many rows a list holds, counted up to [`COUNT_CAP`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub total: u64,
    /// There are more than `total` (= `COUNT_CAP`).
    pub capped: bool,
}

/// Counts the rows `rows` selects, reading at most one past [`COUNT_CAP`] of them.
async fn count_capped(
    db: &DatabaseConnection,
    mut rows: sea_orm::sea_query::SelectStatement,
) -> Result<Counted, StoreError> {
    use sea_orm::ConnectionTrait;
    use sea_orm::sea_query::{Asterisk, Expr, ExprTrait, Query};
    let counted = Query::select()
        .expr(Expr::col(Asterisk).count())
        .from_subquery(rows.limit(COUNT_CAP + 1).to_owned(), "counted")
        .to_owned();
    let n: i64 = match db.query_one(&counted).await? {
        Some(row) => row.try_get_by_index(0)?,
        None => 0,
    };
    let n = u64::try_from(n).unwrap_or(0);
    Ok(Counted {
        total: Ord::min(n, COUNT_CAP),
        capped: n > COUNT_CAP,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the database is unavailable: {0}")]
    Unavailable(DbErr),
    #[error("a row with the same unique key exists")]
    Duplicate,
    #[error("database error: {0}")]
    Db(DbErr),
    #[error("a stored row could not be read: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// An outage told in words (no database error to carry).
    pub fn unavailable(reason: impl Into<String>) -> Self {
        StoreError::Unavailable(DbErr::Custom(reason.into()))
    }
}

impl From<DbErr> for StoreError {
    fn from(err: DbErr) -> Self {
        if matches!(err.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) {
            return StoreError::Duplicate;
        }
        if is_outage(&err) {
            return StoreError::Unavailable(err);
        }
        StoreError::Db(err)
    }
}

/// Whether the database refused for a reason of its own (gone, restarting, full, read
/// only, locked by someone else), not because of the statement: the same write may
/// succeed later, so the caller is told 503 and to retry.
fn is_outage(err: &DbErr) -> bool {
    use sea_orm::RuntimeErr;
    use sea_orm::sqlx::Error as Sqlx;
    let runtime = match err {
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => return true,
        DbErr::Exec(e) | DbErr::Query(e) => e,
        _ => return false,
    };
    let RuntimeErr::SqlxError(error) = runtime else {
        return false;
    };
    match &**error {
        Sqlx::Io(_)
        | Sqlx::Tls(_)
        | Sqlx::PoolTimedOut
        | Sqlx::PoolClosed
        | Sqlx::WorkerCrashed => true,
        Sqlx::Database(db) => {
            let Some(code) = db.code() else {
                return false;
            };
            if db
                .try_downcast_ref::<sea_orm::sqlx::sqlite::SqliteError>()
                .is_some()
            {
                // The primary result code is the extended code's low byte: BUSY, LOCKED,
                // READONLY, IOERR, FULL, CANTOPEN.
                return code
                    .parse::<i32>()
                    .is_ok_and(|c| matches!(c & 0xff, 5 | 6 | 8 | 10 | 13 | 14));
            }
            // PostgreSQL's SQLSTATE: connection exceptions, insufficient resources (disk
            // full, too many connections), the server shutting down or starting, and a
            // read-only transaction (a standby after failover).
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P")
                || code == "25006"
        }
        _ => false,
    }
}

/// The database handle plus the cipher; hands out repositories.
#[derive(Debug, Clone)]
pub struct Store {
    db: Db,
    cipher: Arc<Cipher>,
    /// The SQLite file's directory, whose free space readiness looks at.
    sqlite_dir: Option<Arc<Path>>,
}

/// Where repositories read and where they write. On an SQLite file every write goes
/// through one connection: concurrent writers then queue in the pool, first come first
/// served, instead of colliding on the database lock and sleeping in SQLite's busy
/// handler (1, 2, 5, 10 … 100 ms a try), which put 100–250 ms tails on approvals under
/// load. Readers (WAL) never wait for the writer, and they are `query_only`, so a write
/// sent through the wrong handle fails in the tests instead of quietly
/// contending. On PostgreSQL (and an in-memory SQLite) both are the same pool.
#[derive(Debug, Clone)]
struct Db {
    read: DatabaseConnection,
    write: DatabaseConnection,
    /// Writes of tool calls and audit rows: grouped on the SQLite file's writer, direct
    /// elsewhere.
    grouped_writes: group_commit::Writes,
    /// The SQLite file's WAL checkpoints, off the writer (none elsewhere).
    checkpoints: Option<checkpoints::Checkpoints>,
    /// Whether a database server answers (always on an SQLite file).
    health: health::Health,
}

impl Db {
    /// Where repositories read; refused at once while the database does not answer.
    fn reader(&self) -> Result<&DatabaseConnection, StoreError> {
        self.health.check()?;
        Ok(&self.read)
    }

    /// Where repositories write; refused at once while the database does not answer.
    fn writer(&self) -> Result<&DatabaseConnection, StoreError> {
        self.health.check()?;
        Ok(&self.write)
    }
}

/// How long [`Store::ready`] waits for the database.
const READY_WITHIN: Duration = Duration::from_secs(1);

/// Free space below which an SQLite file's disk counts as full for readiness.
const MIN_FREE_BYTES: u64 = 1 << 20;

/// The bytes an unprivileged writer may still use on `dir`'s filesystem.
fn free_bytes(dir: &Path) -> Result<u64, StoreError> {
    let stats = nix::sys::statvfs::statvfs(dir).map_err(|e| {
        StoreError::unavailable(format!(
            "cannot read the free space of {}: {e}",
            dir.display()
        ))
    })?;
    Ok(stats.blocks_available() as u64 * stats.fragment_size() as u64)
}

/// The URL the service actually connects to: the configured one, or the embedded SQLite
/// file in the data directory.
pub fn database_url(settings: &Settings) -> String {
    let configured = settings.database.url.expose_secret().trim();
    if configured.is_empty() {
        let path = settings.storage.data_dir.join("mcp-pool.db");
        format!("sqlite://{}?mode=rwc", path.display())
    } else {
        configured.to_owned()
    }
}

impl Store {
    /// Connects (creating the SQLite file's directory if needed).
    pub async fn connect(settings: &Settings, cipher: Arc<Cipher>) -> Result<Self, StoreError> {
        let url = database_url(settings);
        let is_sqlite = url.starts_with("sqlite:");
        if is_sqlite && let Some(dir) = sqlite_file_dir(&url) {
            std::fs::create_dir_all(&dir).map_err(|e| {
                StoreError::Unavailable(DbErr::Custom(format!(
                    "cannot create database directory {}: {e}",
                    dir.display()
                )))
            })?;
        }
        let sqlite_options = |opts: SqliteConnectOptions| {
            // WAL lets readers proceed during a write; with WAL, synchronous=NORMAL keeps
            // every commit across a process restart (only an OS crash may lose the last
            // ones) and makes a commit ~10x cheaper than FULL.
            opts.journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
        };
        let wait = Duration::from_millis(settings.database.acquire_timeout_ms);
        let options = |max: u32| {
            let mut options = ConnectOptions::new(url.clone());
            // A request that cannot have a connection within `wait` is answered 503 at
            // once; the pool's default (30 s) held requests through an outage.
            options
                .max_connections(max)
                .acquire_timeout(wait)
                .connect_timeout(wait)
                .sqlx_logging(false);
            // The pool's default pings a connection on every checkout: on SQLite one more
            // hop to its worker thread per statement (per transaction), taken while the
            // single writer is held, for a file handle that cannot go stale. PostgreSQL
            // keeps the ping: it is what replaces a connection the server dropped.
            if is_sqlite {
                options.test_before_acquire(false);
            }
            options
        };
        let db = if is_sqlite && sqlite_file_dir(&url).is_some() {
            // The writer first: it creates the file and switches it to WAL.
            let mut writer = options(1);
            // Its checkpoints are the `checkpoints` task's, not a commit's.
            writer.map_sqlx_sqlite_opts(move |opts| {
                sqlite_options(opts).pragma("wal_autocheckpoint", "0")
            });
            writer.map_sqlx_sqlite_before_acquire(|conn, _| Box::pin(discard_if_stuck(conn)));
            let write = Database::connect(writer).await?;
            let mut readers = options(settings.database.max_connections);
            // `query_only` rather than a read-only open: a read-only connection cannot
            // create the WAL files when it is the first to open the database.
            readers.map_sqlx_sqlite_opts(|opts| opts.pragma("query_only", "ON"));
            let read = Database::connect(readers).await?;
            Db {
                checkpoints: Some(checkpoints::Checkpoints::start(read.clone(), write.clone())),
                health: health::Health::default(),
                read,
                grouped_writes: group_commit::Writes::grouped(write.clone()),
                write,
            }
        } else {
            let mut shared = options(settings.database.max_connections);
            shared.map_sqlx_sqlite_opts(sqlite_options);
            shared.map_sqlx_sqlite_before_acquire(|conn, _| Box::pin(discard_if_stuck(conn)));
            let db = Database::connect(shared).await?;
            Db {
                health: if is_sqlite {
                    health::Health::default()
                } else {
                    health::Health::watch(db.clone(), wait)
                },
                read: db.clone(),
                grouped_writes: group_commit::Writes::Direct(db.clone()),
                checkpoints: None,
                write: db,
            }
        };
        let sqlite_dir = is_sqlite
            .then(|| sqlite_file_dir(&url))
            .flatten()
            .map(Arc::from);
        Ok(Self {
            db,
            cipher,
            sqlite_dir,
        })
    }

    /// Brings the schema up to date, then seals what older versions stored in clear.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        use migration::MigratorTrait;
        migration::Migrator::up(&self.db.write, None).await?;
        // Data the schema migrations cannot move themselves: sealing needs the key.
        let sealed = self.servers().seal_clear_urls().await?;
        if sealed > 0 {
            tracing::info!(
                servers = sealed,
                "sealed the credentials of stored server URLs"
            );
        }
        Ok(())
    }

    /// Whether the database can be read and written now, within [`READY_WITHIN`]: a read
    /// and a real write (this instance's heartbeat), so a full disk or a read-only
    /// standby shows as well as a server that is gone. Readiness over HTTP and gRPC.
    pub async fn ready(&self, me: crate::domain::InstanceId) -> Result<(), StoreError> {
        // A small write may still fit in the WAL's pages on a disk that has no room for
        // anything larger: the free space tells.
        if let Some(dir) = &self.sqlite_dir {
            let free = free_bytes(dir)?;
            if free < MIN_FREE_BYTES {
                return Err(StoreError::unavailable(format!(
                    "the disk holding the database has {free} bytes free"
                )));
            }
        }
        let probe = async {
            self.db.reader()?.ping().await?;
            self.instances().beat(me).await.map(drop)
        };
        tokio::time::timeout(READY_WITHIN, probe)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::unavailable(format!(
                    "no answer within {} ms",
                    READY_WITHIN.as_millis()
                )))
            })
    }

    pub async fn close(self) {
        if let Some(checkpoints) = &self.db.checkpoints {
            checkpoints.stop();
        }
        let Db { read, write, .. } = self.db;
        let _ = read.close().await;
        let _ = write.close().await;
    }

    pub fn servers(&self) -> ServerRepo {
        ServerRepo::new(self.db.clone(), self.cipher.clone())
    }

    pub fn assistants(&self) -> AssistantRepo {
        AssistantRepo::new(self.db.clone())
    }

    pub fn policies(&self) -> PolicyRepo {
        PolicyRepo::new(self.db.clone())
    }

    pub fn catalog(&self) -> CatalogRepo {
        CatalogRepo::new(self.db.clone(), self.cipher.clone())
    }

    pub fn presets(&self) -> PresetRepo {
        PresetRepo::new(self.db.clone(), self.cipher.clone())
    }

    pub fn conversations(&self) -> ConversationRepo {
        ConversationRepo::new(self.db.clone())
    }

    /// The at-rest cipher, for what services seal outside a table (console sessions).
    pub fn cipher(&self) -> &Arc<Cipher> {
        &self.cipher
    }

    pub fn messages(&self) -> MessageRepo {
        MessageRepo::new(self.db.clone())
    }

    pub fn audit(&self) -> AuditRepo {
        AuditRepo::new(self.db.clone())
    }

    pub fn gateway(&self) -> GatewayRepo {
        GatewayRepo::new(self.db.clone(), self.cipher.clone())
    }

    pub fn instances(&self) -> InstanceRepo {
        InstanceRepo::new(self.db.clone())
    }

    pub fn oauth(&self) -> OAuthRepo {
        OAuthRepo::new(self.db.clone(), self.cipher.clone())
    }

    pub fn tasks(&self) -> TaskRepo {
        TaskRepo::new(self.db.clone())
    }

    pub fn api_keys(&self) -> ApiKeyRepo {
        ApiKeyRepo::new(self.db.clone())
    }
}

/// Keeps an SQLite connection that lost track of its transaction out of use. When a
/// write fails on a full disk (or an I/O error), SQLite may roll the transaction back by
/// itself; sqlx's `ROLLBACK` then fails and leaves its transaction depth at 1, so the
/// connection's next `BEGIN` became a `SAVEPOINT` and a failed commit after it left
/// SQLite holding an open transaction that every later write joined and none committed:
/// writes acknowledged and lost. A connection whose depth is not 0 once its queued
/// rollback has run is closed (which rolls back whatever SQLite holds) and replaced.
async fn discard_if_stuck(
    conn: &mut sea_orm::sqlx::sqlite::SqliteConnection,
) -> Result<bool, sea_orm::sqlx::Error> {
    use sea_orm::sqlx::Connection;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    // A dropped transaction's rollback is queued on the connection's worker ahead of this.
    conn.ping().await?;
    if conn.is_in_transaction() {
        tracing::warn!("an SQLite connection was left inside a failed transaction; replaced");
        return Ok(false);
    }
    Ok(true)
}

/// The directory of the SQLite database file the URL names; `None` for an in-memory one.
fn sqlite_file_dir(url: &str) -> Option<std::path::PathBuf> {
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    if path.is_empty() || path == ":memory:" || query.split('&').any(|p| p == "mode=memory") {
        return None;
    }
    Path::new(path).parent().map(Path::to_path_buf)
}

/// Seals a secret map as one encrypted JSON object; empty maps are stored as NULL.
fn seal_map(cipher: &Cipher, map: &SecretMap) -> Option<String> {
    if map.is_empty() {
        return None;
    }
    let json = serde_json::to_string(map.expose()).expect("a string map serializes");
    Some(cipher.seal(&json))
}

fn open_map(cipher: &Cipher, sealed: Option<&str>) -> Result<SecretMap, StoreError> {
    let Some(sealed) = sealed else {
        return Ok(SecretMap::default());
    };
    let json = cipher
        .open(sealed)
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let map: BTreeMap<String, String> =
        serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(SecretMap::new(map))
}

fn from_json<T: serde::de::DeserializeOwned>(
    column: &str,
    value: serde_json::Value,
) -> Result<T, StoreError> {
    serde_json::from_value(value).map_err(|e| StoreError::Corrupt(format!("{column}: {e}")))
}

fn corrupt(column: &str, err: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{column}: {err}"))
}

/// What the store's own tests start from.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// A migrated store on an SQLite file in `dir`, as the embedded default runs.
    pub(crate) async fn sqlite_store(dir: &Path) -> Store {
        let mut settings = Settings::defaults();
        settings.storage.data_dir = dir.to_owned();
        let cipher = Arc::new(Cipher::from_key(&[7; 32]).expect("a 32-byte key"));
        let store = Store::connect(&settings, cipher).await.expect("connects");
        store.migrate().await.expect("migrates");
        store
    }

    /// An admin's approval of tool `tool{n}` of server `fx` for user `u1`.
    pub(crate) fn approval(n: usize) -> AuditEntry {
        let user = crate::domain::UserId::parse("u1").expect("a user id");
        AuditEntry::new(&user, AuditOutcome::Approved, "fx", &format!("tool{n}"))
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{approval, sqlite_store};
    use super::*;

    #[test]
    fn sqlite_directory_is_found_in_urls() {
        assert_eq!(
            sqlite_file_dir("sqlite://./data/mcp-pool.db?mode=rwc"),
            Some("./data".into())
        );
        assert_eq!(sqlite_file_dir("sqlite::memory:"), None);
        assert_eq!(sqlite_file_dir("sqlite://shared.db?mode=memory"), None);
    }

    /// Writes through one SQLite connection, many at once, all land; the readers see
    /// them and cannot write themselves (a write sent through the wrong handle fails).
    #[tokio::test]
    async fn sqlite_writes_share_one_connection_and_readers_are_read_only() {
        use sea_orm::ConnectionTrait;

        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = sqlite_store(dir.path()).await;
        let audit = store.audit();
        let writes = (0..200).map(|n| audit.record(approval(n)));
        for written in futures::future::join_all(writes).await {
            written.expect("every concurrent write lands");
        }
        let filter = AuditFilter {
            user_id: Some("u1".into()),
            ..Default::default()
        };
        let (_, total) = store.audit().page(&filter, 0, 10).await.expect("reads");
        assert_eq!(
            total,
            Counted {
                total: 200,
                capped: false
            }
        );
        let refused = store
            .db
            .read
            .execute_unprepared("DELETE FROM audit_log")
            .await
            .expect_err("readers cannot write");
        assert!(refused.to_string().contains("readonly"), "{refused}");
    }

    /// A page of a large log says "at least 10,000" rather than counting every row; a
    /// narrower filter is counted exactly. Rows written twice (a replayed journal) and a
    /// batch of every size land once each.
    #[tokio::test]
    async fn a_large_log_is_counted_up_to_the_cap_and_replays_land_once() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = sqlite_store(dir.path()).await;
        let audit = store.audit();
        let rows: Vec<AuditEntry> = (0..COUNT_CAP as usize + 5).map(approval).collect();
        audit.record_many(&rows[..500]).await.expect("writes");
        audit
            .record_many(&rows)
            .await
            .expect("writes, skipping rows it has");
        audit.record_many(&rows[7..8]).await.expect("writes one");
        let everything = AuditFilter::default();
        let (page, counted) = audit.page(&everything, 0, 50).await.expect("reads");
        assert_eq!(page.len(), 50);
        assert_eq!(
            counted,
            Counted {
                total: COUNT_CAP,
                capped: true
            }
        );
        let one_tool = AuditFilter {
            tool_name: Some("tool7".into()),
            ..Default::default()
        };
        let (page, counted) = audit.page(&one_tool, 0, 50).await.expect("reads");
        assert_eq!(page.len(), 1, "written once: {page:?}");
        assert_eq!(page[0], rows[7]);
        assert_eq!(
            counted,
            Counted {
                total: 1,
                capped: false
            }
        );
    }
}
