//! The `policy_sets`, `user_attributes` and `quota_usage` tables.

use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveValue::Set, ConnectionTrait, DatabaseBackend, EntityTrait, QueryOrder, QuerySelect,
    Statement,
};

use super::entities::{policy_set, user_attribute};
use super::{Db, StoreError, from_json};
use crate::domain::{PolicySet, UserAttributes, UserId};

#[derive(Debug, Clone)]
pub struct PolicyRepo {
    db: Db,
}

impl PolicyRepo {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    /// The newest saved set, or the empty one.
    pub async fn current(&self) -> Result<PolicySet, StoreError> {
        let Some(row) = policy_set::Entity::find()
            .order_by_desc(policy_set::Column::Version)
            .one(self.db.reader()?)
            .await?
        else {
            return Ok(PolicySet::empty());
        };
        Ok(PolicySet {
            version: row.version,
            rules: from_json("rules", row.rules)?,
            quotas: match row.quotas {
                Some(quotas) => from_json("quotas", quotas)?,
                None => Vec::new(),
            },
            updated_at: Some(row.created_at),
            updated_by: row.created_by,
        })
    }

    pub async fn current_version(&self) -> Result<i64, StoreError> {
        Ok(policy_set::Entity::find()
            .select_only()
            .column(policy_set::Column::Version)
            .order_by_desc(policy_set::Column::Version)
            .into_tuple::<i64>()
            .one(self.db.reader()?)
            .await?
            .unwrap_or(0))
    }

    /// Saves `set`'s rules as the next version; [`StoreError::Duplicate`] when another
    /// save took that version first.
    pub async fn save(&self, set: &PolicySet) -> Result<PolicySet, StoreError> {
        let version = self.current_version().await? + 1;
        let now = crate::domain::now();
        policy_set::Entity::insert(policy_set::ActiveModel {
            version: Set(version),
            rules: Set(serde_json::json!(set.rules)),
            quotas: Set(Some(serde_json::json!(set.quotas))),
            created_by: Set(set.updated_by.clone()),
            created_at: Set(now),
        })
        .exec_without_returning(self.db.writer()?)
        .await?;
        Ok(PolicySet {
            version,
            rules: set.rules.clone(),
            quotas: set.quotas.clone(),
            updated_at: Some(now),
            updated_by: set.updated_by.clone(),
        })
    }

    /// A user's attributes; none set reads as no groups and no plan.
    pub async fn attributes(&self, user: &UserId) -> Result<UserAttributes, StoreError> {
        let Some(row) = user_attribute::Entity::find_by_id(user.as_str().to_owned())
            .one(self.db.reader()?)
            .await?
        else {
            return Ok(UserAttributes::default());
        };
        Ok(UserAttributes {
            groups: from_json("groups", row.groups)?,
            plan: row.plan,
        })
    }

    pub async fn set_attributes(
        &self,
        user: &UserId,
        attributes: &UserAttributes,
    ) -> Result<(), StoreError> {
        user_attribute::Entity::insert(user_attribute::ActiveModel {
            user_id: Set(user.as_str().to_owned()),
            groups: Set(serde_json::json!(attributes.groups)),
            plan: Set(attributes.plan.clone()),
            updated_at: Set(crate::domain::now()),
        })
        .on_conflict(
            OnConflict::column(user_attribute::Column::UserId)
                .update_columns([
                    user_attribute::Column::Groups,
                    user_attribute::Column::Plan,
                    user_attribute::Column::UpdatedAt,
                ])
                .to_owned(),
        )
        .exec_without_returning(self.db.writer()?)
        .await?;
        Ok(())
    }

    /// Adds one to `quota`'s count for `subject` in the window ending at `window_end`
    /// unless that would pass `limit`: the count after, or `None` when it is full. One
    /// statement, so instances sharing the database never take the same last unit.
    pub async fn take_quota(
        &self,
        quota: &str,
        subject: &str,
        window_end: i64,
        limit: u64,
    ) -> Result<Option<u64>, StoreError> {
        if limit == 0 {
            return Ok(None);
        }
        let db = self.db.writer()?;
        let row = db
            .query_one_raw(statement(
                db,
                "INSERT INTO quota_usage (quota, subject, window_end, used) VALUES (?, ?, ?, 1) \
                 ON CONFLICT (quota, subject, window_end) DO UPDATE SET used = quota_usage.used + 1 \
                 WHERE quota_usage.used < ? RETURNING used",
                [
                    quota.into(),
                    subject.into(),
                    window_end.into(),
                    saturating_i64(limit).into(),
                ],
            ))
            .await?;
        match row {
            Some(row) => Ok(Some(row.try_get_by_index::<i64>(0)?.max(0) as u64)),
            None => Ok(None),
        }
    }

    /// Adds `amount` to a count, whatever the limit (tokens known only once used).
    pub async fn add_quota(
        &self,
        quota: &str,
        subject: &str,
        window_end: i64,
        amount: u64,
    ) -> Result<(), StoreError> {
        let db = self.db.writer()?;
        db.execute_raw(statement(
            db,
            "INSERT INTO quota_usage (quota, subject, window_end, used) VALUES (?, ?, ?, ?) \
             ON CONFLICT (quota, subject, window_end) DO UPDATE SET used = quota_usage.used + excluded.used",
            [
                quota.into(),
                subject.into(),
                window_end.into(),
                saturating_i64(amount).into(),
            ],
        ))
        .await?;
        Ok(())
    }

    /// Gives back one unit [`Self::take_quota`] took (a call another quota refused).
    pub async fn give_back_quota(
        &self,
        quota: &str,
        subject: &str,
        window_end: i64,
    ) -> Result<(), StoreError> {
        let db = self.db.writer()?;
        db.execute_raw(statement(
            db,
            "UPDATE quota_usage SET used = used - 1 \
             WHERE quota = ? AND subject = ? AND window_end = ? AND used > 0",
            [quota.into(), subject.into(), window_end.into()],
        ))
        .await?;
        Ok(())
    }

    /// The count of `quota` for `subject` in the window ending at `window_end` (0 when
    /// nothing was counted).
    pub async fn quota_used(
        &self,
        quota: &str,
        subject: &str,
        window_end: i64,
    ) -> Result<u64, StoreError> {
        let db = self.db.reader()?;
        let row = db
            .query_one_raw(statement(
                db,
                "SELECT used FROM quota_usage WHERE quota = ? AND subject = ? AND window_end = ?",
                [quota.into(), subject.into(), window_end.into()],
            ))
            .await?;
        Ok(match row {
            Some(row) => row.try_get_by_index::<i64>(0)?.max(0) as u64,
            None => 0,
        })
    }

    /// Deletes the counts of windows that ended before `before` (seconds since the epoch).
    pub async fn sweep_quotas(&self, before: i64) -> Result<u64, StoreError> {
        let db = self.db.writer()?;
        let done = db
            .execute_raw(statement(
                db,
                "DELETE FROM quota_usage WHERE window_end < ?",
                [before.into()],
            ))
            .await?;
        Ok(done.rows_affected())
    }
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `sql` (with `?` placeholders) and its values for `db`'s backend.
fn statement<const N: usize>(
    db: &impl ConnectionTrait,
    sql: &str,
    values: [sea_orm::Value; N],
) -> Statement {
    let backend = db.get_database_backend();
    Statement::from_sql_and_values(backend, placeholders(backend, sql), values)
}

/// `sql` with its `?` as PostgreSQL's `$1`, `$2`, … there.
fn placeholders(backend: DatabaseBackend, sql: &str) -> String {
    if backend != DatabaseBackend::Postgres {
        return sql.to_owned();
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}
