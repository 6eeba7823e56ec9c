use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "policy_sets")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub version: i64,
    #[sea_orm(column_type = "JsonBinary")]
    pub rules: Json,
    /// NULL (a set saved before quotas existed) is none.
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub quotas: Option<Json>,
    pub created_by: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
