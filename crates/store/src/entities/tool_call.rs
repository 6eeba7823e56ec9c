use sea_orm::entity::prelude::*;

/// One ToolCallRecord (seed 001) of an assistant message.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "tool_calls")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub message_id: Uuid,
    /// The model's id for the call, unique within its message.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// Order within the message (0-based).
    pub position: i32,
    pub server_id: Option<Uuid>,
    #[sea_orm(column_type = "Text", nullable)]
    pub server_name: Option<String>,
    #[sea_orm(column_type = "Text", nullable)]
    pub tool_name: Option<String>,
    #[sea_orm(column_type = "Text")]
    pub display_name: String,
    #[sea_orm(column_type = "JsonBinary")]
    pub arguments: Json,
    /// pending | invoking | done | error | cancelled
    pub status: String,
    #[sea_orm(column_type = "JsonBinary")]
    pub response: Json,
    pub is_error: bool,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// Who submitted the call (`CallOrigin`): the door, the key, an admin for the user.
    pub via: Option<String>,
    pub key_id: Option<Uuid>,
    pub by_admin: bool,
    /// Submitted by a server's view (MCP Apps) through its host.
    pub from_app: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
