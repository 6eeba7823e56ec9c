//! What the gateway fans out to every bound server that supports it (log levels and
//! resource subscriptions), and the notices and list changes it passes back.

use std::sync::Arc;

use super::{GatewayPrincipal, GatewayService};
use crate::error::{Error, Resource as Missing, Result};

impl GatewayService {
    /// `logging/setLevel` on every bound server that logs.
    #[allow(deprecated)]
    pub(crate) async fn set_log_level(
        &self,
        principal: &GatewayPrincipal,
        level: rmcp::model::LoggingLevel,
    ) -> Result<()> {
        for (id, _) in self.servers(principal).await? {
            let id = id.to_string();
            if self.offers(principal, &id, |f| f.logging).await
                && let Err(error) = self
                    .upstream_for(principal)
                    .set_log_level(&principal.user, &id, level)
                    .await
            {
                tracing::info!(server = %id, %error, "a server refused logging/setLevel");
            }
        }
        Ok(())
    }

    /// `resources/subscribe` or `resources/unsubscribe` on every bound server that
    /// supports subscriptions; fine when one of them accepts.
    pub async fn subscription(
        &self,
        principal: &GatewayPrincipal,
        uri: &str,
        subscribe: bool,
    ) -> Result<()> {
        let mut accepted = false;
        let mut last_error = None;
        for (id, _) in self.servers(principal).await? {
            let id = id.to_string();
            if !self.offers(principal, &id, |f| f.subscribe).await {
                continue;
            }
            match self
                .upstream_for(principal)
                .subscription(&principal.user, &id, uri, subscribe)
                .await
            {
                Ok(()) => accepted = true,
                Err(error) => last_error = Some(error),
            }
        }
        match (accepted, last_error) {
            (true, _) => Ok(()),
            (false, Some(error)) => Err(error),
            (false, None) => Err(Error::NotFound(Missing::Resource, uri.to_owned())),
        }
    }

    /// Every server's log messages and resource updates (filter by user and server).
    pub fn notices(&self) -> tokio::sync::broadcast::Receiver<Arc<crate::pool::UpstreamNotice>> {
        self.upstream.notices()
    }

    pub fn pool_changes(&self) -> tokio::sync::broadcast::Receiver<crate::pool::ConnectionKey> {
        self.upstream.pool_changes()
    }
}
