use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "audit_log")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub user_id: String,
    pub mcp_server_id: Option<Uuid>,
    pub server_name: String,
    pub tool_name: String,
    pub message_id: Option<Uuid>,
    pub status: String,
    pub error_code: Option<String>,
    pub latency_ms: Option<i64>,
    /// The admin key that approved or rejected the call for its user.
    pub decided_by: Option<String>,
    pub created_at: DateTimeUtc,
    /// The door the call came in by (`rest`, `chat`, `gateway`, `xiaozhi`, `grpc`).
    pub via: Option<String>,
    /// The API key or gateway token the call came with.
    pub key_id: Option<String>,
    /// `key_id` is an admin's key acting for the user.
    pub by_admin: bool,
    /// The call was made by a server's view (MCP Apps) through its host.
    pub from_app: bool,
    pub instance_id: Option<Uuid>,
    /// As the redaction rule leaves them (see `services::audit`).
    pub arguments: Option<String>,
    pub result: Option<String>,
    pub error_message: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
