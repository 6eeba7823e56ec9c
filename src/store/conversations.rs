//! The `conversations` table.

use sea_orm::{ActiveValue::Set, DatabaseConnection, EntityTrait};
use uuid::Uuid;

use super::StoreError;
use super::entities::conversation;
use crate::domain::UserId;

#[derive(Debug, Clone)]
pub struct ConversationRepo {
    db: DatabaseConnection,
}

/// Whose a conversation id is.
pub enum Ownership {
    Mine,
    Others,
    Missing,
}

impl ConversationRepo {
    pub(super) fn new(db: DatabaseConnection) -> Self {
        Self { db }
    }

    pub async fn ownership(&self, user: &UserId, id: Uuid) -> Result<Ownership, StoreError> {
        Ok(
            match conversation::Entity::find_by_id(id).one(&self.db).await? {
                Some(row) if row.user_id == user.as_str() => Ownership::Mine,
                Some(_) => Ownership::Others,
                None => Ownership::Missing,
            },
        )
    }

    pub async fn insert(
        &self,
        user: &UserId,
        id: Uuid,
        assistant: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = crate::domain::now();
        conversation::Entity::insert(conversation::ActiveModel {
            id: Set(id),
            user_id: Set(user.as_str().to_owned()),
            assistant_id: Set(assistant.map(str::to_owned)),
            title: Set(None),
            created_at: Set(now),
            updated_at: Set(now),
        })
        .exec_without_returning(&self.db)
        .await?;
        Ok(())
    }
}
