use sea_orm::entity::prelude::*;

/// A tool call run as a task: any instance answers for it from this row.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "tasks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub user_id: String,
    pub assistant_id: Option<String>,
    /// rest | gateway | grpc
    pub origin: String,
    #[sea_orm(column_type = "Text")]
    pub server_name: String,
    #[sea_orm(column_type = "Text")]
    pub tool_name: String,
    /// working | input_required | completed | failed | cancelled
    pub status: String,
    #[sea_orm(column_type = "Text", nullable)]
    pub status_message: Option<String>,
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub result: Option<Json>,
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub error: Option<Json>,
    /// While `input_required`: the requests the call waits on, by key.
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub input_requests: Option<Json>,
    /// The instance running it; a task whose instance stopped is failed by the next sweep.
    pub instance_id: Uuid,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// After this the row is dropped, whatever its status.
    pub expires_at: DateTimeUtc,
    /// The user's server that made a task of the call, and that task's id there: another
    /// instance follows it on when this task's instance stops.
    pub server_id: Option<Uuid>,
    #[sea_orm(column_type = "Text", nullable)]
    pub upstream_task_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
