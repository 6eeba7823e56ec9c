//! A server's refusal for want of authorization, turned into what its owner needs to
//! authorize, wherever it comes: at the lease or on what follows.

use uuid::Uuid;

use super::UpstreamService;
use crate::domain::UserId;
use crate::error::{Error, Result};

impl UpstreamService {
    /// A refusal for want of authorization, with what the owner needs to authorize.
    pub(super) async fn explained(&self, user: &UserId, server_id: &str, error: Error) -> Error {
        match &error {
            Error::Pool(crate::pool::PoolError::Upstream(crate::mcp::McpError::AuthRequired(
                challenge,
            ))) => match Uuid::parse_str(server_id) {
                Ok(id) if self.globals.get(id).is_none() => {
                    self.oauth.required(user, id, challenge).await
                }
                _ => error,
            },
            _ => error,
        }
    }

    /// `result` of an operation on a leased connection, with a refusal for want of
    /// authorization explained as at the lease (a server may let `initialize` through and
    /// refuse, or ask for more scopes, only on what follows).
    pub(super) async fn explain<T>(
        &self,
        user: &UserId,
        server_id: &str,
        result: std::result::Result<T, impl Into<Error>>,
    ) -> Result<T> {
        match result {
            Ok(value) => Ok(value),
            Err(error) => Err(Box::pin(self.explained(user, server_id, error.into())).await),
        }
    }
}
