//! Whether the database answers, as the store's probe last saw it. While it does not,
//! every repository call fails at once with [`StoreError::Unavailable`] instead of each
//! request waiting out the connection pool's timeout (and an actor that reads in its
//! turn holding every message behind it); the probe, every `EVERY`, tells when it is
//! back. Only a server the service connects to is watched: an SQLite file does not go
//! away, and its writes on a full disk fail at once by themselves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sea_orm::DatabaseConnection;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::StoreError;

const EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Default)]
pub(super) struct Health {
    down: Arc<AtomicBool>,
    /// Stops the probe with the store's last handle.
    _probe: Option<Arc<DropGuard>>,
}

impl Health {
    /// Probes `db` (one `SELECT 1` through its pool, bounded by `wait`) every half second.
    pub(super) fn watch(db: DatabaseConnection, wait: Duration) -> Self {
        let stop = CancellationToken::new();
        let down = Arc::new(AtomicBool::new(false));
        tokio::spawn(probe(db, wait, down.clone(), stop.clone()));
        Self {
            down,
            _probe: Some(Arc::new(stop.drop_guard())),
        }
    }

    /// `Err` while the last probe failed.
    pub(super) fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(StoreError::unavailable(
                "the database did not answer its last probe",
            ));
        }
        Ok(())
    }
}

async fn probe(
    db: DatabaseConnection,
    wait: Duration,
    down: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let answered = tokio::time::timeout(wait, db.ping()).await;
        let failed = match answered {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no answer within {} ms", wait.as_millis())),
        };
        let was_down = down.swap(failed.is_some(), Ordering::Relaxed);
        match failed {
            Some(error) if !was_down => {
                tracing::error!(%error, "the database stopped answering; requests that need it are answered 503 until it is back");
            }
            None if was_down => tracing::info!("the database answers again"),
            _ => {}
        }
    }
}
