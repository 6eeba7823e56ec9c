//! The `policy_sets` and `user_attributes` tables.

use sea_orm::sea_query::OnConflict;
use sea_orm::{ActiveValue::Set, EntityTrait, QueryOrder, QuerySelect};

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
            created_by: Set(set.updated_by.clone()),
            created_at: Set(now),
        })
        .exec_without_returning(self.db.writer()?)
        .await?;
        Ok(PolicySet {
            version,
            rules: set.rules.clone(),
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
}
