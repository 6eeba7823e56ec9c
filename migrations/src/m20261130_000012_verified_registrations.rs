//! Dynamic client registrations were kept under the issuer an authorization server's
//! metadata claimed, which a hostile MCP server could make up (metadata at a URL of no
//! RFC 8414 form was not issuer-checked), planting its client for every user of the real
//! authorization server. Registrations are now kept under what was verified; the ones
//! kept before cannot be told apart, so all are forgotten: the next authorization of each
//! authorization server registers again (grants in progress keep their own client).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .exec_stmt(Query::delete().from_table("oauth_clients").to_owned())
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Ok(())
    }
}
