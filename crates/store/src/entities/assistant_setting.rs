use sea_orm::entity::prelude::*;

/// An assistant's settings (absent: every setting at its service default).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "assistant_settings")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub user_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub assistant_id: String,
    /// `always`, `on_collision` or `never`; NULL follows `gateway.prefix`.
    pub gateway_prefix: Option<String>,
    /// The user's tool overrides (`domain::ToolOverrides`, as a JSON list); NULL: none.
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub tool_overrides: Option<Json>,
    /// `all` or `search` (`domain::ToolExposure`); NULL: `all`.
    pub tool_exposure: Option<String>,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
