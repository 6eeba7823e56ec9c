//! `assistant_mcp_servers`: which of a user's servers an assistant uses, in order.

use sea_orm::{
    ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, TransactionTrait,
};
use uuid::Uuid;

use super::entities::{assistant_server, assistant_setting};
use super::{Db, StoreError};
use crate::domain::{AssistantId, ToolOverride, ToolOverrides, UserId};

#[derive(Debug, Clone)]
pub struct AssistantRepo {
    db: Db,
}

impl AssistantRepo {
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    /// The assistant's settings as stored, read from one row.
    pub async fn settings(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<StoredSettings, StoreError> {
        let Some(row) = assistant_setting::Entity::find_by_id((
            user.as_str().to_owned(),
            assistant.as_str().to_owned(),
        ))
        .one(self.db.reader()?)
        .await?
        else {
            return Ok(StoredSettings::default());
        };
        let overrides = match row.tool_overrides {
            None => ToolOverrides::default(),
            Some(stored) => {
                let corrupt = |e: String| StoreError::Corrupt(format!("tool overrides: {e}"));
                let entries: Vec<ToolOverride> =
                    serde_json::from_value(stored).map_err(|e| corrupt(e.to_string()))?;
                ToolOverrides::new(entries).map_err(|e| corrupt(e.to_string()))?
            }
        };
        Ok(StoredSettings {
            gateway_prefix: row.gateway_prefix,
            overrides,
            tool_exposure: row.tool_exposure,
        })
    }

    pub async fn set_gateway_prefix(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        prefix: Option<&str>,
    ) -> Result<(), StoreError> {
        let row = assistant_setting::ActiveModel {
            gateway_prefix: Set(prefix.map(str::to_owned)),
            ..settings_row(user, assistant)
        };
        self.upsert_setting(row, assistant_setting::Column::GatewayPrefix)
            .await
    }

    /// Replaces the assistant's tool overrides (its other settings stay).
    pub async fn set_tool_overrides(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        overrides: &ToolOverrides,
    ) -> Result<(), StoreError> {
        let list = serde_json::to_value(overrides.entries())
            .map_err(|e| StoreError::Corrupt(format!("tool overrides: {e}")))?;
        let row = assistant_setting::ActiveModel {
            tool_overrides: Set((!overrides.is_empty()).then_some(list)),
            ..settings_row(user, assistant)
        };
        self.upsert_setting(row, assistant_setting::Column::ToolOverrides)
            .await
    }

    /// Sets how the assistant offers its tools to models (`all`, `search`; `None`: `all`).
    pub async fn set_tool_exposure(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        exposure: Option<&str>,
    ) -> Result<(), StoreError> {
        let row = assistant_setting::ActiveModel {
            tool_exposure: Set(exposure.map(str::to_owned)),
            ..settings_row(user, assistant)
        };
        self.upsert_setting(row, assistant_setting::Column::ToolExposure)
            .await
    }

    /// Writes one setting (`column`) of `row`'s assistant; a new row has the others at
    /// their defaults, an existing one keeps them.
    async fn upsert_setting(
        &self,
        row: assistant_setting::ActiveModel,
        column: assistant_setting::Column,
    ) -> Result<(), StoreError> {
        use sea_orm::sea_query::OnConflict;
        assistant_setting::Entity::insert(row)
            .on_conflict(
                OnConflict::columns([
                    assistant_setting::Column::UserId,
                    assistant_setting::Column::AssistantId,
                ])
                .update_columns([column, assistant_setting::Column::UpdatedAt])
                .to_owned(),
            )
            .exec_without_returning(self.db.writer()?)
            .await?;
        Ok(())
    }

    pub async fn bound_servers(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<Vec<Uuid>, StoreError> {
        Ok(assistant_server::Entity::find()
            .filter(assistant_server::Column::UserId.eq(user.as_str()))
            .filter(assistant_server::Column::AssistantId.eq(assistant.as_str()))
            .order_by_asc(assistant_server::Column::Position)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| row.mcp_server_id)
            .collect())
    }

    /// Every assistant of the user with bindings, and its bound servers in order.
    pub async fn bindings_of_user(
        &self,
        user: &UserId,
    ) -> Result<Vec<(AssistantId, Vec<Uuid>)>, StoreError> {
        let rows = assistant_server::Entity::find()
            .filter(assistant_server::Column::UserId.eq(user.as_str()))
            .order_by_asc(assistant_server::Column::AssistantId)
            .order_by_asc(assistant_server::Column::Position)
            .all(self.db.reader()?)
            .await?;
        let mut assistants: Vec<(AssistantId, Vec<Uuid>)> = Vec::new();
        for row in rows {
            match assistants.last_mut() {
                Some((id, servers)) if id.as_str() == row.assistant_id => {
                    servers.push(row.mcp_server_id)
                }
                _ => {
                    let id = AssistantId::parse(&row.assistant_id)
                        .map_err(|e| super::corrupt("assistant_id", e))?;
                    assistants.push((id, vec![row.mcp_server_id]));
                }
            }
        }
        Ok(assistants)
    }

    /// Replaces the whole binding set atomically.
    pub async fn replace(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        servers: &[Uuid],
    ) -> Result<(), StoreError> {
        let txn = self.db.writer()?.begin().await?;
        assistant_server::Entity::delete_many()
            .filter(assistant_server::Column::UserId.eq(user.as_str()))
            .filter(assistant_server::Column::AssistantId.eq(assistant.as_str()))
            .exec(&txn)
            .await?;
        if !servers.is_empty() {
            let rows =
                servers
                    .iter()
                    .enumerate()
                    .map(|(position, id)| assistant_server::ActiveModel {
                        user_id: Set(user.as_str().to_owned()),
                        assistant_id: Set(assistant.as_str().to_owned()),
                        mcp_server_id: Set(*id),
                        position: Set(position as i32),
                    });
            assistant_server::Entity::insert_many(rows)
                .exec_without_returning(&txn)
                .await?;
        }
        txn.commit().await?;
        Ok(())
    }
}

/// An assistant's settings as stored (absent: every one at its default).
#[derive(Debug, Default)]
pub struct StoredSettings {
    /// `always`, `on_collision` or `never`; `None` follows `gateway.prefix`.
    pub gateway_prefix: Option<String>,
    pub overrides: ToolOverrides,
    /// `all` or `search`; `None`: `all`.
    pub tool_exposure: Option<String>,
}

/// A settings row of the assistant with every setting at its default.
fn settings_row(user: &UserId, assistant: &AssistantId) -> assistant_setting::ActiveModel {
    assistant_setting::ActiveModel {
        user_id: Set(user.as_str().to_owned()),
        assistant_id: Set(assistant.as_str().to_owned()),
        gateway_prefix: Set(None),
        tool_overrides: Set(None),
        tool_exposure: Set(None),
        updated_at: Set(crate::domain::now()),
    }
}
