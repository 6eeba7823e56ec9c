use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "messages")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub conversation_id: Option<Uuid>,
    pub user_id: String,
    pub role: String,
    #[sea_orm(column_type = "Text")]
    pub content: String,
    /// The message's tool calls (in `tool_calls`) still pending or invoking; kept by
    /// their writer in the same transaction as the rows.
    pub open_calls: i32,
    /// The instance whose confirmation actor writes the open calls (`instances.id`).
    pub owner_instance: Option<Uuid>,
    /// The agent loop's notes on an assistant message: model, rounds, finish reason.
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub metadata: Option<Json>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
