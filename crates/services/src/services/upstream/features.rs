//! What a server offers beyond tools (resources, prompts, completions, subscriptions,
//! logging), each on the user's session, refusals explained like a call's.

use std::sync::Arc;

use rmcp::model::{GetPromptResult, JsonObject, Prompt, ReadResourceResult};

use super::UpstreamService;
use crate::domain::UserId;
use crate::error::{Error, Result};
use crate::mcp::ServerFeatures;
use crate::pool::ResourceCatalog;

impl UpstreamService {
    /// What the server supports beyond tools, from its `initialize` answer.
    pub async fn features(&self, user: &UserId, server_id: &str) -> Result<ServerFeatures> {
        Ok(self.lease(user, server_id).await?.client.capabilities())
    }

    /// `logging/setLevel` on the user's session with the server (shared by the user's
    /// callers: the last level set applies to all of them).
    #[allow(deprecated)]
    pub(crate) async fn set_log_level(
        &self,
        user: &UserId,
        server_id: &str,
        level: rmcp::model::LoggingLevel,
    ) -> Result<()> {
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .set_level(level, lease.runtime.call_timeout)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }

    pub async fn complete(
        &self,
        user: &UserId,
        server_id: &str,
        params: rmcp::model::CompleteRequestParams,
    ) -> Result<rmcp::model::CompleteResult> {
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .complete(params, lease.runtime.call_timeout)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }

    /// `resources/subscribe` or `resources/unsubscribe` on the user's session.
    pub async fn subscription(
        &self,
        user: &UserId,
        server_id: &str,
        uri: &str,
        subscribe: bool,
    ) -> Result<()> {
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .subscription(uri, subscribe, lease.runtime.call_timeout)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }

    /// Every server's log messages and resource updates (filter by user).
    pub fn notices(&self) -> tokio::sync::broadcast::Receiver<Arc<crate::pool::UpstreamNotice>> {
        self.pool.subscribe_notices()
    }

    pub async fn resources(&self, user: &UserId, server_id: &str) -> Result<Arc<ResourceCatalog>> {
        let lease = self.lease(user, server_id).await?;
        let listed = self.pool.resources(&lease).await;
        self.explain(user, server_id, listed).await
    }

    pub async fn read_resource(
        &self,
        user: &UserId,
        server_id: &str,
        uri: &str,
    ) -> Result<ReadResourceResult> {
        if uri.is_empty() || uri.len() > 4096 {
            return Err(Error::validation("uri must be 1 to 4096 characters"));
        }
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .read_resource(uri, lease.runtime.call_timeout)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }

    /// [`Self::read_resource`] for a caller that takes a 2026-07-28 server's rounds itself.
    pub async fn read_resource_relayed(
        &self,
        user: &UserId,
        server_id: &str,
        uri: &str,
        round: crate::mcp::RelayedRound,
    ) -> Result<rmcp::model::ReadResourceResponse> {
        if uri.is_empty() || uri.len() > 4096 {
            return Err(Error::validation("uri must be 1 to 4096 characters"));
        }
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .read_resource_relayed(uri, lease.runtime.call_timeout, round)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }

    pub async fn prompts(&self, user: &UserId, server_id: &str) -> Result<Arc<Vec<Prompt>>> {
        let lease = self.lease(user, server_id).await?;
        let listed = self.pool.prompts(&lease).await;
        self.explain(user, server_id, listed).await
    }

    pub async fn get_prompt(
        &self,
        user: &UserId,
        server_id: &str,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult> {
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .get_prompt(name, arguments, lease.runtime.call_timeout)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }

    /// [`Self::get_prompt`] for a caller that takes a 2026-07-28 server's rounds itself.
    pub async fn get_prompt_relayed(
        &self,
        user: &UserId,
        server_id: &str,
        (name, arguments): (&str, Option<JsonObject>),
        round: crate::mcp::RelayedRound,
    ) -> Result<rmcp::model::GetPromptResponse> {
        let lease = self.lease(user, server_id).await?;
        let result = lease
            .client
            .get_prompt_relayed(name, arguments, lease.runtime.call_timeout, round)
            .await
            .inspect_err(|e| self.pool.report(&lease, e));
        self.explain(user, server_id, result).await
    }
}
