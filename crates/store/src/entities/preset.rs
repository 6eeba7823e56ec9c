use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "presets")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    #[sea_orm(unique)]
    pub name: String,
    #[sea_orm(column_type = "Text")]
    pub description: String,
    #[sea_orm(column_type = "Text")]
    pub command: String,
    #[sea_orm(column_type = "JsonBinary")]
    pub args: Json,
    #[sea_orm(column_type = "JsonBinary")]
    pub arg_slots: Json,
    #[sea_orm(column_type = "JsonBinary")]
    pub env_slots: Json,
    /// Sealed JSON object.
    #[sea_orm(column_type = "Text", nullable)]
    pub env: Option<String>,
    pub timeout_secs: Option<i32>,
    pub memory_limit_mib: Option<i32>,
    pub max_tasks: Option<i32>,
    /// The preset's sandbox (`SandboxSpec` as JSON); null: the pool's defaults.
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub sandbox: Option<Json>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
