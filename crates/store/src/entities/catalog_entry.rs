use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "catalog_entries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub name: String,
    pub enabled: bool,
    pub latest_version: String,
    pub pinned_version: Option<String>,
    /// Sealed JSON object.
    #[sea_orm(column_type = "Text", nullable)]
    pub fixed_values: Option<String>,
    #[sea_orm(column_type = "JsonBinary")]
    pub patterns: Json,
    #[sea_orm(column_type = "Text")]
    pub title: String,
    #[sea_orm(column_type = "Text")]
    pub description: String,
    pub kind: String,
    #[sea_orm(column_type = "Text")]
    pub tags: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
