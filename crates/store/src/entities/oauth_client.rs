use sea_orm::entity::prelude::*;

/// A client this service registered dynamically (RFC 7591) at an authorization server.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "oauth_clients")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false, column_type = "Text")]
    pub issuer: String,
    #[sea_orm(primary_key, auto_increment = false, column_type = "Text")]
    pub redirect_uri: String,
    #[sea_orm(column_type = "Text")]
    pub client_id: String,
    /// Sealed; NULL for a public client.
    #[sea_orm(column_type = "Text", nullable)]
    pub client_secret: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
