//! `instances`: which processes share the database and are alive (by heartbeat).

use chrono::{DateTime, Utc};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter};
use uuid::Uuid;

use super::entities::instance;
use super::{Db, StoreError};
use crate::domain::InstanceId;

#[derive(Debug, Clone)]
pub struct InstanceRepo {
    db: Db,
}

impl InstanceRepo {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    pub async fn register(&self, id: InstanceId) -> Result<(), StoreError> {
        let now = crate::domain::now();
        instance::Entity::insert(instance::ActiveModel {
            id: Set(id.0),
            started_at: Set(now),
            heartbeat_at: Set(now),
        })
        .exec_without_returning(self.db.writer()?)
        .await?;
        Ok(())
    }

    /// Records that the instance is alive; `false` when its row was gone (another
    /// instance presumed it dead), in which case it is registered again.
    pub async fn beat(&self, id: InstanceId) -> Result<bool, StoreError> {
        let updated = instance::Entity::update_many()
            .set(instance::ActiveModel {
                heartbeat_at: Set(crate::domain::now()),
                ..Default::default()
            })
            .filter(instance::Column::Id.eq(id.0))
            .exec(self.db.writer()?)
            .await?;
        if updated.rows_affected == 0 {
            self.register(id).await?;
            return Ok(false);
        }
        Ok(true)
    }

    /// Every registered instance: (id, started at, last heartbeat), oldest first.
    pub async fn all(&self) -> Result<Vec<(InstanceId, DateTime<Utc>, DateTime<Utc>)>, StoreError> {
        use sea_orm::QueryOrder;
        Ok(instance::Entity::find()
            .order_by_asc(instance::Column::StartedAt)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| (InstanceId(row.id), row.started_at, row.heartbeat_at))
            .collect())
    }

    /// Instances that beat since `since`.
    pub async fn live(&self, since: DateTime<Utc>) -> Result<Vec<InstanceId>, StoreError> {
        Ok(instance::Entity::find()
            .filter(instance::Column::HeartbeatAt.gte(since))
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| InstanceId(row.id))
            .collect())
    }

    pub async fn is_live(&self, id: InstanceId, since: DateTime<Utc>) -> Result<bool, StoreError> {
        Ok(instance::Entity::find_by_id(id.0)
            .filter(instance::Column::HeartbeatAt.gte(since))
            .one(self.db.reader()?)
            .await?
            .is_some())
    }

    /// Forgets instances silent since before `before` (their work was taken over).
    pub async fn forget_silent(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        Ok(instance::Entity::delete_many()
            .filter(instance::Column::HeartbeatAt.lt(before))
            .exec(self.db.writer()?)
            .await?
            .rows_affected)
    }

    /// A clean stop (or one known to have ended on this host): nothing of the instance
    /// survives it but calls it left open, which the next sweep of any instance settles
    /// at once. `false` when there was no row.
    pub async fn remove(&self, id: InstanceId) -> Result<bool, StoreError> {
        let deleted = instance::Entity::delete_by_id(id.0)
            .exec(self.db.writer()?)
            .await?;
        Ok(deleted.rows_affected > 0)
    }
}

pub(super) fn ids(instances: &[InstanceId]) -> Vec<Uuid> {
    instances.iter().map(|i| i.0).collect()
}
