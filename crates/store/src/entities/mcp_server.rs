use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "mcp_servers")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub user_id: String,
    pub name: String,
    pub transport: String,
    pub is_active: bool,
    /// With its credentials (user name, password, query values) masked.
    #[sea_orm(column_type = "Text", nullable)]
    pub base_url: Option<String>,
    /// The whole URL, sealed; set when `base_url` has masked parts.
    #[sea_orm(column_type = "Text", nullable)]
    pub base_url_sealed: Option<String>,
    /// Sealed JSON object.
    #[sea_orm(column_type = "Text", nullable)]
    pub headers: Option<String>,
    pub timeout_secs: Option<i32>,
    pub preset: Option<String>,
    #[sea_orm(column_type = "JsonBinary")]
    pub preset_args: Json,
    #[sea_orm(column_type = "Text", nullable)]
    pub command: Option<String>,
    #[sea_orm(column_type = "JsonBinary")]
    pub args: Json,
    /// Sealed JSON object.
    #[sea_orm(column_type = "Text", nullable)]
    pub env: Option<String>,
    #[sea_orm(column_type = "JsonBinary")]
    pub disabled_tools: Json,
    #[sea_orm(column_type = "JsonBinary")]
    pub auto_approve_tools: Json,
    /// Sealed JSON: the pre-registered OAuth client and scopes of a remote server.
    #[sea_orm(column_type = "Text", nullable)]
    pub oauth_client: Option<String>,
    /// The sampling policy; NULL is the default (deny).
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub sampling: Option<Json>,
    /// The configured roots; NULL is none.
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub roots: Option<Json>,
    /// `conversation`; NULL is `user`.
    #[sea_orm(column_type = "String(StringLen::N(16))", nullable)]
    pub session_scope: Option<String>,
    /// The catalog entry the server was made from, and the version the user pinned.
    pub catalog_entry: Option<String>,
    pub catalog_version: Option<String>,
    /// The user's values for the entry's inputs that are not secret.
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub catalog_values: Option<Json>,
    /// Sealed JSON object: the values of the entry's secret inputs.
    #[sea_orm(column_type = "Text", nullable)]
    pub catalog_secrets: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
