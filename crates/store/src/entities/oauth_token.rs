use sea_orm::entity::prelude::*;

/// A (user, server) that asked for authorization, and the user's tokens once granted.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "oauth_tokens")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub user_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub server_id: Uuid,
    /// Sealed JSON (rmcp's `StoredCredentials`); NULL until granted and after forgetting.
    #[sea_orm(column_type = "Text", nullable)]
    pub credentials: Option<String>,
    /// Sealed JSON: the client and AS metadata the tokens were issued to.
    #[sea_orm(column_type = "Text", nullable)]
    pub client: Option<String>,
    #[sea_orm(column_type = "Text", nullable)]
    pub issuer: Option<String>,
    #[sea_orm(column_type = "JsonBinary")]
    pub scopes: Json,
    pub expires_at: Option<DateTimeUtc>,
    /// Authorizations started for `insufficient_scope` since the last plain one.
    pub step_ups: i32,
    /// Unix ms until which `refresh_lock_holder` may refresh; NULL when free.
    pub refresh_lock_until: Option<i64>,
    pub refresh_lock_holder: Option<String>,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
