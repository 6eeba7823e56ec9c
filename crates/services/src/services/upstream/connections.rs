//! Connections as such rather than what runs on them: the connect test, health checks,
//! and the admin's view and control of live connections.

use std::time::{Duration, Instant};

use uuid::Uuid;

use super::UpstreamService;
use crate::domain::{CallOrigin, UserId};
use crate::error::{Error, Resource, Result};
use crate::pool::{ConnectionInfo, ConnectionKey};

/// The result of `POST /api/mcp-servers/{id}/connect`.
pub struct ConnectReport {
    pub server_name: Option<String>,
    pub server_version: Option<String>,
    pub protocol_version: Option<String>,
    pub tool_count: usize,
    pub latency: Duration,
}

pub struct HealthReport {
    pub healthy: bool,
    pub latency: Duration,
    pub error: Option<Error>,
    pub connection: Option<ConnectionInfo>,
}

impl UpstreamService {
    /// Connects now (reusing a live connection), re-lists the tools and times it all. A
    /// connection that fails is an audit row (`connect_failed`, with the cause), saying who
    /// tried: an operator's retry is on the record like a call.
    pub async fn test_connection(
        &self,
        user: &UserId,
        server_id: &str,
        origin: CallOrigin,
    ) -> Result<ConnectReport> {
        let result = self.connect_now(user, server_id).await;
        if let Err(error) = &result
            && !matches!(error, Error::NotFound(..))
        {
            let name = self.server_name(user, server_id).await.unwrap_or_default();
            self.audit
                .connect_failed(user, server_id, &name, origin, error);
        }
        result
    }

    async fn connect_now(&self, user: &UserId, server_id: &str) -> Result<ConnectReport> {
        let started = Instant::now();
        let lease = self.lease(user, server_id).await?;
        self.pool.invalidate(&lease.key).await;
        let listed = self.pool.tools(&lease).await;
        let tools = self.explain(user, server_id, listed).await?;
        let info = lease.client.server_info();
        Ok(ConnectReport {
            server_name: info.as_ref().map(|i| i.name.clone()),
            server_version: info.map(|i| i.version),
            protocol_version: lease.client.protocol_version(),
            tool_count: tools.tools.len(),
            latency: started.elapsed(),
        })
    }

    /// Seed 000's health check: a `ping` through the pool. Failures are reported, not raised,
    /// except for "no such server".
    pub async fn health(&self, user: &UserId, server_id: &str) -> Result<HealthReport> {
        let started = Instant::now();
        let result = async {
            let lease = self.lease(user, server_id).await?;
            lease
                .client
                .ping(lease.runtime.call_timeout)
                .await
                .inspect_err(|e| self.pool.report(&lease, e))?;
            Ok::<_, Error>(lease.key)
        }
        .await;
        let key = Uuid::parse_str(server_id)
            .ok()
            .map(|server| ConnectionKey::shared(user.clone(), server));
        let connection = key.and_then(|k| self.pool.connection(&k));
        match result {
            Ok(_) => Ok(HealthReport {
                healthy: true,
                latency: started.elapsed(),
                error: None,
                connection,
            }),
            Err(err @ Error::NotFound(Resource::McpServer, _)) => Err(err),
            Err(err) => Ok(HealthReport {
                healthy: false,
                latency: started.elapsed(),
                error: Some(err),
                connection,
            }),
        }
    }

    /// Connections whose cached lists were just dropped.
    pub(crate) fn pool_changes(&self) -> tokio::sync::broadcast::Receiver<ConnectionKey> {
        self.pool.subscribe_changes()
    }

    pub fn connections(&self) -> Vec<ConnectionInfo> {
        self.pool.connections()
    }

    /// What each connected stdio server runs now, by its process group (the status's
    /// `process_group`): processes in its group or not, and their resident memory. Reads
    /// `/proc`, so the admin's list asks, not each event.
    pub fn process_usage(&self) -> std::collections::BTreeMap<i32, crate::mcp::GroupUsage> {
        crate::mcp::group_usage()
    }

    /// The user's shared connection to `server` on this instance, if one is live.
    pub fn connection_of(&self, user: &UserId, server: Uuid) -> Option<ConnectionInfo> {
        self.pool
            .connection(&ConnectionKey::shared(user.clone(), server))
    }

    fn admin_key(user: &str, server: &str) -> Result<ConnectionKey> {
        let not_found = || Error::NotFound(Resource::Connection, format!("{user}/{server}"));
        Ok(ConnectionKey::shared(
            UserId::parse(user).map_err(|_| not_found())?,
            Uuid::parse_str(server).map_err(|_| not_found())?,
        ))
    }

    /// Stops the upstream sessions of a conversation or gateway session that ended.
    pub(crate) async fn end_scope(&self, user: &UserId, scope: &str) {
        let stopped = self.pool.stop_scope(user, scope).await;
        if stopped > 0 {
            tracing::info!(%user, scope, stopped, "stopped the connections of an ended session");
        }
    }

    pub async fn stop_connection(&self, user: &str, server: &str) -> Result<()> {
        let key = Self::admin_key(user, server)?;
        if !self.pool.stop_server(&key.user, key.server).await {
            return Err(Error::NotFound(
                Resource::Connection,
                format!("{user}/{server}"),
            ));
        }
        tracing::info!(user = %key.user, server = %key.server, "connection stopped by an admin");
        Ok(())
    }

    pub async fn refresh_connection(&self, user: &str, server: &str) -> Result<ConnectionInfo> {
        let key = Self::admin_key(user, server)?;
        let not_found = || Error::NotFound(Resource::Connection, format!("{user}/{server}"));
        if !self.pool.refresh(&key).await {
            return Err(not_found());
        }
        self.pool.connection(&key).ok_or_else(not_found)
    }
}
