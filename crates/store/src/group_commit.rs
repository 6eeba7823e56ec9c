//! Group commit for the embedded SQLite file, whose writes all go through one connection:
//! the writes that queue up while a transaction runs share the next one, so a burst of
//! approvals pays one `BEGIN`/`COMMIT` (and one turn on the writer) instead of one each.
//! A write waits for nothing but the transaction before it: alone, it commits alone.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use futures::future::BoxFuture;
use sea_orm::{
    DatabaseConnection, DatabaseTransaction, SqliteTransactionMode, TransactionOptions,
    TransactionTrait,
};
use tokio::sync::{mpsc, oneshot};

use super::StoreError;

/// Writes per shared transaction, so one group's commit never waits on a long tail.
const MAX_GROUP: usize = 64;

/// A write that may share its transaction with others.
pub(super) trait GroupedWrite: Send + Sync + 'static {
    /// Applies the write: `false` when it was refused (its message is held by another
    /// instance) — and then it must have written nothing, as the others in its group
    /// still commit.
    fn apply<'a>(&'a self, txn: &'a DatabaseTransaction)
    -> BoxFuture<'a, Result<bool, StoreError>>;
}

pub(super) struct Queued {
    write: Box<dyn GroupedWrite>,
    applied: oneshot::Sender<Result<bool, StoreError>>,
}

/// Where grouped writes go: the queue of the SQLite writer, or straight to the database
/// (PostgreSQL, where concurrent transactions proceed in parallel).
#[derive(Clone)]
pub(super) enum Writes {
    Queued(mpsc::UnboundedSender<Queued>),
    Direct(DatabaseConnection),
}

impl std::fmt::Debug for Writes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Queued(_) => "Writes::Queued",
            Self::Direct(_) => "Writes::Direct",
        })
    }
}

impl Writes {
    /// Group commit through `writer`, the one connection every write uses. The task
    /// ends when the last handle to the queue goes.
    pub(super) fn grouped(writer: DatabaseConnection) -> Self {
        let (queue, queued) = mpsc::unbounded_channel();
        tokio::spawn(commit_groups(writer, queued));
        Self::Queued(queue)
    }

    /// Whether writes queue to share transactions (else each runs on its own).
    pub(super) fn is_grouped(&self) -> bool {
        matches!(self, Self::Queued(_))
    }

    /// Applies `write` in a transaction of its own or one it shares; `Ok(false)` when it
    /// was refused. Once this answers, what it wrote is committed.
    pub(super) async fn apply(&self, write: impl GroupedWrite) -> Result<bool, StoreError> {
        match self {
            Self::Direct(db) => apply_alone(db, &write).await,
            Self::Queued(queue) => {
                let (applied, answer) = oneshot::channel();
                queue
                    .send(Queued {
                        write: Box::new(write),
                        applied,
                    })
                    .map_err(|_| closed())?;
                answer.await.map_err(|_| closed())?
            }
        }
    }
}

/// The write's answer never came: the writer stopped (the store is closing) or its
/// group panicked.
fn closed() -> StoreError {
    StoreError::Unavailable(sea_orm::DbErr::Custom(
        "the database writer did not answer".into(),
    ))
}

async fn commit_groups(writer: DatabaseConnection, mut queued: mpsc::UnboundedReceiver<Queued>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while queued.recv_many(&mut group, MAX_GROUP).await > 0 {
        let committing = commit_group(&writer, std::mem::take(&mut group));
        // A panic fails its own group's writes (their answers are dropped), not the queue.
        if AssertUnwindSafe(committing).catch_unwind().await.is_err() {
            tracing::error!("a grouped database write panicked; its group failed");
        }
    }
}

async fn commit_group(writer: &DatabaseConnection, group: Vec<Queued>) {
    if group.len() > 1
        && let Ok(applied) = apply_together(writer, &group).await
    {
        for (queued, applied) in group.into_iter().zip(applied) {
            let _ = queued.applied.send(Ok(applied));
        }
        return;
    }
    // Alone, or the group failed: each on its own, so a bad write fails only itself.
    for queued in group {
        let applied = apply_alone(writer, &*queued.write).await;
        let _ = queued.applied.send(applied);
    }
}

async fn begin(db: &DatabaseConnection) -> Result<DatabaseTransaction, StoreError> {
    // IMMEDIATE: the write lock from the start (no upgrade from a read lock that another
    // connection could make fail as busy); PostgreSQL ignores it.
    Ok(db
        .begin_with_options(TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..Default::default()
        })
        .await?)
}

async fn apply_alone(
    db: &DatabaseConnection,
    write: &(impl GroupedWrite + ?Sized),
) -> Result<bool, StoreError> {
    let txn = begin(db).await?;
    let applied = write.apply(&txn).await?;
    if applied {
        txn.commit().await?;
    }
    Ok(applied)
}

async fn apply_together(
    db: &DatabaseConnection,
    group: &[Queued],
) -> Result<Vec<bool>, StoreError> {
    let txn = begin(db).await?;
    let mut applied = Vec::with_capacity(group.len());
    for queued in group {
        applied.push(queued.write.apply(&txn).await?);
    }
    txn.commit().await?;
    Ok(applied)
}
