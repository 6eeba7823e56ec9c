use sea_orm::entity::prelude::*;

/// An authorization in progress, found again by the hash of its `state`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "oauth_pending")]
pub struct Model {
    /// Hex SHA-256 of the `state`: the state itself is a credential and is not stored.
    #[sea_orm(primary_key, auto_increment = false)]
    pub state_hash: String,
    pub user_id: String,
    pub server_id: Uuid,
    /// Sealed JSON: PKCE verifier, client, AS metadata and scopes of this flow.
    #[sea_orm(column_type = "Text")]
    pub flow: String,
    /// Sealed: handed out again while the flow is young instead of starting another.
    #[sea_orm(column_type = "Text")]
    pub authorization_url: String,
    pub expires_at: DateTimeUtc,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
