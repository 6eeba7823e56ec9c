//! WAL checkpoints off the write path. SQLite's automatic checkpoint runs inside the
//! commit that grows the WAL past 1,000 pages, syncing the WAL and the database file
//! (~5–7 ms here) while the one writer, and every write queued behind it, waits: most of
//! the approvals' p99. The writer turns it off (`wal_autocheckpoint=0`) and this task
//! checkpoints instead, a few times a second, from a reader connection: `PASSIVE` waits
//! for no one and blocks no one. Under writes that never pause it cannot catch up to the
//! WAL's end, so past `WAL_LIMIT_PAGES` it takes one turn on the writer, as SQLite would.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::StoreError;

const EVERY: Duration = Duration::from_millis(250);

/// WAL pages (4 KiB) left after a checkpoint from a reader beyond which the next one runs
/// on the writer.
const WAL_LIMIT_PAGES: i64 = 4_000;

/// Stops the task with the store's last handle, or at [`Checkpoints::stop`].
#[derive(Debug, Clone)]
pub(super) struct Checkpoints {
    stop: CancellationToken,
    _with_last_handle: Arc<DropGuard>,
}

impl Checkpoints {
    pub(super) fn start(read: DatabaseConnection, write: DatabaseConnection) -> Self {
        let stop = CancellationToken::new();
        tokio::spawn(run(read, write, stop.clone()));
        Self {
            _with_last_handle: Arc::new(stop.clone().drop_guard()),
            stop,
        }
    }

    pub(super) fn stop(&self) {
        self.stop.cancel();
    }
}

async fn run(read: DatabaseConnection, write: DatabaseConnection, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut on_writer = false;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let db = if on_writer { &write } else { &read };
        match checkpoint(db).await {
            Ok(left) => on_writer = left > WAL_LIMIT_PAGES,
            Err(e) => tracing::warn!(error = %e, "WAL checkpoint failed"),
        }
    }
}

/// Copies what it can of the WAL into the database file; the pages it could not (written
/// meanwhile, or still read by someone).
async fn checkpoint(db: &DatabaseConnection) -> Result<i64, StoreError> {
    let statement =
        Statement::from_string(db.get_database_backend(), "PRAGMA wal_checkpoint(PASSIVE)");
    let Some(row) = db.query_one_raw(statement).await? else {
        return Ok(0);
    };
    // (busy, pages in the WAL, pages copied)
    let in_wal: i64 = row.try_get_by_index(1)?;
    let copied: i64 = row.try_get_by_index(2)?;
    Ok(in_wal - copied)
}

#[cfg(test)]
mod tests {
    use crate::test_support::{approval, sqlite_store};

    /// The audit rows in a copy of the database file alone (no WAL): what checkpoints have
    /// written there (none while even the table is only in the WAL). A copy taken while a
    /// checkpoint was writing the file may be torn ("malformed"): it counts as none yet.
    async fn rows_in_file_alone(dir: &std::path::Path) -> i64 {
        use sea_orm::{ConnectionTrait, Database, Statement};
        let torn = |e: &dyn std::fmt::Display| e.to_string().contains("malformed");
        let copy = dir.join("copy.db");
        std::fs::copy(dir.join("mcp-pool.db"), &copy).expect("copies the database file");
        let db = match Database::connect(format!("sqlite://{}?mode=ro", copy.display())).await {
            Ok(db) => db,
            Err(e) if torn(&e) => return 0,
            Err(e) => panic!("cannot open the copy: {e}"),
        };
        let statement =
            Statement::from_string(db.get_database_backend(), "SELECT COUNT(*) FROM audit_log");
        let count = match db.query_one_raw(statement).await {
            Ok(row) => row.expect("a row").try_get_by_index(0).expect("a number"),
            Err(e) if e.to_string().contains("no such table") || torn(&e) => 0,
            Err(e) => panic!("cannot count: {e}"),
        };
        db.close().await.ok();
        std::fs::remove_file(copy).ok();
        count
    }

    /// The writer never checkpoints in a commit, yet what it writes reaches the database
    /// file itself within moments, without another write to trigger it.
    #[tokio::test]
    async fn writes_reach_the_database_file_without_a_commit_checkpointing() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = sqlite_store(dir.path()).await;
        for n in 0..50 {
            store.audit().record(approval(n)).await.expect("writes");
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let in_file = rows_in_file_alone(dir.path()).await;
            if in_file == 50 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{in_file} of 50 rows in the database file after 10 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        store.close().await;
    }
}
