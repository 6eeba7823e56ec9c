//! PostgreSQL `NOTIFY`/`LISTEN`: how instances sharing one database tell each other things
//! (see `cluster`). SQLite has no equivalent; there the service runs as one instance.

use sea_orm::sqlx::postgres::PgListener;
use sea_orm::{ConnectionTrait, DatabaseBackend, Statement};

use super::{Store, StoreError};

/// A connection subscribed to one channel (it holds one connection of the pool).
pub struct NoteListener(PgListener);

impl NoteListener {
    /// The next payload; `None` when the connection dropped and was re-established, so
    /// notes sent meanwhile were missed.
    pub async fn recv(&mut self) -> Result<Option<String>, StoreError> {
        match self.0.try_recv().await {
            Ok(Some(note)) => Ok(Some(note.payload().to_owned())),
            Ok(None) => Ok(None),
            Err(e) => Err(StoreError::Unavailable(sea_orm::DbErr::Custom(
                e.to_string(),
            ))),
        }
    }
}

impl Store {
    pub(crate) fn can_notify(&self) -> bool {
        self.db.read.get_database_backend() == DatabaseBackend::Postgres
    }

    /// Sends `payload` to every listener of `channel` (after the sender's transaction,
    /// which here is the statement itself).
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<(), StoreError> {
        self.db
            .write
            .execute_raw(Statement::from_sql_and_values(
                DatabaseBackend::Postgres,
                "SELECT pg_notify($1, $2)",
                [channel.into(), payload.into()],
            ))
            .await?;
        Ok(())
    }

    /// `None` on a database without notifications.
    pub async fn listen(&self, channel: &str) -> Result<Option<NoteListener>, StoreError> {
        if !self.can_notify() {
            return Ok(None);
        }
        let into_store = |e: sea_orm::sqlx::Error| {
            StoreError::Unavailable(sea_orm::DbErr::Custom(e.to_string()))
        };
        let mut listener = PgListener::connect_with(self.db.read.get_postgres_connection_pool())
            .await
            .map_err(into_store)?;
        listener.listen(channel).await.map_err(into_store)?;
        Ok(Some(NoteListener(listener)))
    }
}
