//! The `conversations` table.

use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter};
use uuid::Uuid;

use super::entities::conversation;
use super::{Db, StoreError};
use crate::domain::UserId;

#[derive(Debug, Clone)]
pub struct ConversationRepo {
    db: Db,
}

/// Whose a conversation id is.
pub enum Ownership {
    Mine,
    Others,
    Missing,
}

#[derive(Debug, Clone)]
pub struct StoredConversation {
    pub id: Uuid,
    pub assistant_id: Option<String>,
    pub title: Option<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

impl ConversationRepo {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    pub async fn ownership(&self, user: &UserId, id: Uuid) -> Result<Ownership, StoreError> {
        Ok(
            match conversation::Entity::find_by_id(id)
                .one(self.db.reader()?)
                .await?
            {
                Some(row) if row.user_id == user.as_str() => Ownership::Mine,
                Some(_) => Ownership::Others,
                None => Ownership::Missing,
            },
        )
    }

    pub async fn get(
        &self,
        user: &UserId,
        id: Uuid,
    ) -> Result<Option<StoredConversation>, StoreError> {
        Ok(conversation::Entity::find_by_id(id)
            .filter(conversation::Column::UserId.eq(user.as_str()))
            .one(self.db.reader()?)
            .await?
            .map(|row| StoredConversation {
                id: row.id,
                assistant_id: row.assistant_id,
                title: row.title,
                created_at: row.created_at,
                updated_at: row.updated_at,
            }))
    }

    pub async fn insert(
        &self,
        user: &UserId,
        id: Uuid,
        assistant: Option<&str>,
    ) -> Result<(), StoreError> {
        self.insert_titled(user, id, assistant, None).await
    }

    pub async fn insert_titled(
        &self,
        user: &UserId,
        id: Uuid,
        assistant: Option<&str>,
        title: Option<String>,
    ) -> Result<(), StoreError> {
        let now = crate::domain::now();
        conversation::Entity::insert(conversation::ActiveModel {
            id: Set(id),
            user_id: Set(user.as_str().to_owned()),
            assistant_id: Set(assistant.map(str::to_owned)),
            title: Set(title),
            created_at: Set(now),
            updated_at: Set(now),
        })
        .exec_without_returning(self.db.writer()?)
        .await?;
        Ok(())
    }

    /// Marks the conversation as just used.
    pub async fn touch(&self, user: &UserId, id: Uuid) -> Result<(), StoreError> {
        conversation::Entity::update_many()
            .set(conversation::ActiveModel {
                updated_at: Set(crate::domain::now()),
                ..Default::default()
            })
            .filter(conversation::Column::Id.eq(id))
            .filter(conversation::Column::UserId.eq(user.as_str()))
            .exec(self.db.writer()?)
            .await?;
        Ok(())
    }
}
