//! Users' MCP server definitions: create, read, update, delete, with every rule applied.

mod catalog;
mod input;
mod transport;

use std::sync::Arc;

use uuid::Uuid;

pub use input::{OAuthInput, ServerInput};
use transport::embedded_transport;

use super::normalize_tool_list;
use crate::cluster::{Cluster, Note};
use crate::config::Settings;
use crate::domain::{
    McpServer, RootEntry, SamplingPolicy, SamplingSettings, ServerName, ServerSpec, SessionScope,
    Transport, TransportKind, UserId,
};
use crate::error::{Error, Resource, Result};
use crate::pool::Pool;
use crate::security::UrlPolicy;
use crate::store::{AuditEntry, AuditOutcome, Store, StoreError};

#[derive(Clone)]
pub struct ServerService {
    store: Store,
    settings: Arc<Settings>,
    url_policy: Arc<UrlPolicy>,
    /// Changing or deleting a server stops its live connection.
    pool: Pool,
    /// Deleting a server unbinds it everywhere.
    bindings: super::assistants::BindingCache,
    /// Other instances close their connections to a changed server too.
    cluster: Cluster,
    /// Deleting a server revokes and forgets its users' tokens.
    oauth: super::OAuthService,
    /// An admin's change to a user's server is on the record.
    audit: Option<super::AuditTrail>,
    /// Servers made from a catalog entry.
    catalog: super::CatalogService,
    /// The operator's rules over servers users save.
    policies: Option<super::Policies>,
}

impl ServerService {
    pub fn new(
        store: Store,
        settings: Arc<Settings>,
        url_policy: Arc<UrlPolicy>,
        pool: Pool,
        bindings: super::assistants::BindingCache,
        cluster: Cluster,
        oauth: super::OAuthService,
    ) -> Self {
        Self {
            // Stateless over the store: its own handle resolves entries as any other's.
            catalog: super::CatalogService::new(store.clone(), settings.clone()),
            store,
            settings,
            url_policy,
            pool,
            bindings,
            cluster,
            oauth,
            audit: None,
            policies: None,
        }
    }

    /// Records admins' changes to users' servers in `audit`.
    pub fn audited_by(self, audit: super::AuditTrail) -> Self {
        Self {
            audit: Some(audit),
            ..self
        }
    }

    /// Checks servers users save against the operator's rules.
    pub fn governed_by(self, policies: super::Policies) -> Self {
        Self {
            policies: Some(policies),
            ..self
        }
    }

    /// Refuses a server a policy rule denies (a dry-run rule only counts).
    async fn check_policies(&self, server: &McpServer) -> Result<()> {
        let Some(policies) = &self.policies else {
            return Ok(());
        };
        let attributes = policies.attributes(&server.user_id).await?;
        let decision = policies.decide_server(&server.user_id, &attributes, server);
        match decision.refusal(policies) {
            Some(refusal) if decision.is_denied() => Err(refusal),
            _ => Ok(()),
        }
    }

    /// An admin's change (`admin`, their key) to `user`'s server, as an audit row.
    fn record_admin_change(
        &self,
        user: &UserId,
        server: Uuid,
        name: &str,
        admin: Option<Uuid>,
        outcome: AuditOutcome,
    ) {
        let (Some(audit), Some(admin)) = (&self.audit, admin) else {
            return;
        };
        let mut entry = AuditEntry::new(user, outcome, name, "");
        entry.server_id = Some(server);
        entry.decided_by = Some(admin.to_string());
        audit.record(entry);
    }

    async fn stop_everywhere(&self, user: &UserId, server: Uuid) {
        self.pool.stop_server(user, server).await;
        self.cluster.tell(Note::ServerChanged {
            user: user.to_string(),
            server,
        });
    }

    /// The user's servers, then their groups' team servers (a team owner's: its own).
    pub async fn list(&self, user: &UserId) -> Result<Vec<McpServer>> {
        let repo = self.store.servers();
        let mut servers = repo.list(user).await?;
        if user.team_group().is_none() {
            servers.extend(repo.team_servers_of(user).await?);
        }
        Ok(servers)
    }

    pub async fn get(&self, user: &UserId, id: &str) -> Result<McpServer> {
        let uuid = parse_server_id(id)?;
        self.store
            .servers()
            .get(user, uuid)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::McpServer, id.to_owned()))
    }

    /// A server the user may use, to read: their own, or a team server of their groups.
    pub async fn view(&self, user: &UserId, id: &str) -> Result<McpServer> {
        let uuid = parse_server_id(id)?;
        self.store
            .servers()
            .usable(user, uuid)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::McpServer, id.to_owned()))
    }

    pub async fn create(&self, user: &UserId, input: ServerInput) -> Result<McpServer> {
        let repo = self.store.servers();
        let limit = self.settings.limits.max_servers_per_user;
        if repo.count(user).await? >= limit {
            return Err(Error::LimitReached(format!(
                "a user may define at most {limit} MCP servers"
            )));
        }
        let spec = self.build_spec(input, None).await?;
        let now = crate::domain::now();
        let server = McpServer {
            id: Uuid::now_v7(),
            user_id: user.clone(),
            team: user.team_group().map(str::to_owned),
            spec,
            created_at: now,
            updated_at: now,
        };
        self.check_policies(&server).await?;
        repo.insert(&server)
            .await
            .map_err(|e| duplicate_name(e, &server.spec.name))?;
        tracing::info!(user = %user, server = %server.id, transport = server.spec.transport.kind().as_str(), "MCP server created");
        Ok(server)
    }

    /// Changes the server; `admin` is the key of an admin acting for the user, whose
    /// change is audit-logged as theirs.
    pub async fn update(
        &self,
        user: &UserId,
        id: &str,
        input: ServerInput,
        admin: Option<Uuid>,
    ) -> Result<McpServer> {
        let mut server = self.get(user, id).await?;
        let spec = self.build_spec(input, Some(&server.spec)).await?;
        let mut changed = server.clone();
        changed.spec = spec;
        self.check_policies(&changed).await?;
        let spec = changed.spec;
        if super::oauth::resource_of(&server.spec) != super::oauth::resource_of(&spec) {
            // Tokens are bound to the resource they were issued for: a server moved to
            // another origin or path must never receive them, so they are forgotten (and
            // revoked at the authorization server that issued them) before the new URL
            // is saved, and the user is asked again.
            self.oauth.server_deleted(user, server.id).await?;
        }
        server.spec = spec;
        server.updated_at = crate::domain::now();
        let updated = self
            .store
            .servers()
            .update(&server)
            .await
            .map_err(|e| duplicate_name(e, &server.spec.name))?;
        if !updated {
            return Err(Error::NotFound(Resource::McpServer, id.to_owned()));
        }
        // The next use connects with the new definition, here and on other instances.
        self.stop_everywhere(user, server.id).await;
        tracing::info!(user = %user, server = %server.id, "MCP server updated");
        let name = server.spec.name.as_str();
        self.record_admin_change(user, server.id, name, admin, AuditOutcome::ServerChanged);
        Ok(server)
    }

    /// Deletes the server; `admin` as for [`Self::update`].
    pub async fn delete(&self, user: &UserId, id: &str, admin: Option<Uuid>) -> Result<()> {
        let uuid = parse_server_id(id)?;
        let name = match admin {
            Some(_) => self.get(user, id).await?.spec.name.as_str().to_owned(),
            None => String::new(),
        };
        if !self.store.servers().delete(user, uuid).await? {
            return Err(Error::NotFound(Resource::McpServer, id.to_owned()));
        }
        self.bindings.forget_all();
        self.stop_everywhere(user, uuid).await;
        // Its home goes with it (stopped above, so nothing writes there any more).
        let home = super::upstream::server_home(&self.settings.storage.data_dir, user, uuid);
        if let Ok(Err(error)) =
            tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&home) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            })
            .await
        {
            tracing::warn!(%error, server = %uuid, "could not delete the server's home");
        }
        // The server is gone either way; a failure here leaves only unusable rows.
        if let Err(error) = self.oauth.server_deleted(user, uuid).await {
            tracing::warn!(%error, server = %uuid, "could not forget the server's OAuth tokens");
        }
        tracing::info!(user = %user, server = %uuid, "MCP server deleted");
        self.record_admin_change(user, uuid, &name, admin, AuditOutcome::ServerDeleted);
        Ok(())
    }

    /// Validates `input` laid over `current` (None when creating) into a complete spec.
    async fn build_spec(
        &self,
        input: ServerInput,
        current: Option<&ServerSpec>,
    ) -> Result<ServerSpec> {
        let name = match (&input.name, current, &input.catalog) {
            (Some(raw), _, _) => ServerName::parse(raw)?,
            (None, Some(current), _) => current.name.clone(),
            (None, None, Some(entry)) => default_name(entry)?,
            (None, None, None) => return Err(Error::validation("name is required")),
        };
        let (transport, catalog) = match self.catalog_transport(&input, current).await? {
            Some((transport, using)) => (transport, Some(Box::new(using))),
            None => (self.plain_transport(&input, current).await?, None),
        };
        let limits = &self.settings.limits;
        let timeout_secs = match input.timeout_secs {
            Some(secs) => {
                let max = self.settings.pool.max_call_timeout_secs;
                if secs == 0 || secs > max {
                    return Err(Error::validation(format!(
                        "timeoutSecs must be between 1 and {max}"
                    )));
                }
                Some(secs)
            }
            None => current.and_then(|c| c.timeout_secs),
        };
        let tool_list =
            |field: &str, given: Option<Vec<String>>, current: Option<&Vec<String>>| match given {
                Some(list) => normalize_tool_list(field, list, limits.max_tool_list_entries),
                None => Ok(current.cloned().unwrap_or_default()),
            };
        let sampling = match input.sampling {
            Some(sampling) => self.checked_sampling(sampling)?,
            None => current.map(|c| c.sampling.clone()).unwrap_or_default(),
        };
        let roots = match input.roots {
            Some(roots) => checked_roots(roots, limits.max_tool_list_entries)?,
            None => current.map(|c| c.roots.clone()).unwrap_or_default(),
        };
        let session_scope = match &input.session_scope {
            Some(raw) => SessionScope::parse(raw)?,
            None => current.map(|c| c.session_scope).unwrap_or_default(),
        };
        Ok(ServerSpec {
            name,
            transport,
            catalog,
            sampling,
            roots,
            session_scope,
            is_active: input
                .is_active
                .or(current.map(|c| c.is_active))
                .unwrap_or(true),
            timeout_secs,
            disabled_tools: tool_list(
                "disabledTools",
                input.disabled_tools,
                current.map(|c| &c.disabled_tools),
            )?,
            auto_approve_tools: tool_list(
                "autoApproveTools",
                input.auto_approve_tools,
                current.map(|c| &c.auto_approve_tools),
            )?,
        })
    }

    /// The transport of a server not made from the catalog, laid over `current`'s.
    async fn plain_transport(
        &self,
        input: &ServerInput,
        current: Option<&ServerSpec>,
    ) -> Result<Transport> {
        if input.values.is_some() || input.catalog_version.is_some() {
            return Err(Error::validation(
                "values and catalogVersion only apply to servers made from the catalog (give catalog)",
            ));
        }
        let kind = self.transport_kind(input, current)?;
        // Fields of the current transport carry over only while the family is unchanged.
        let carried = current
            .map(|c| &c.transport)
            .filter(|t| t.kind().is_remote() == kind.is_remote());
        if kind == TransportKind::Embedded {
            embedded_transport(input, current.map(|c| &c.transport))
        } else if kind.is_remote() {
            self.remote_transport(kind, input, carried).await
        } else {
            self.stdio_transport(input, carried.and_then(Transport::stdio))
                .await
        }
    }

    /// A policy that runs requests must name a configured provider and a model it offers.
    fn checked_sampling(&self, sampling: SamplingSettings) -> Result<SamplingSettings> {
        if sampling.policy == SamplingPolicy::Deny {
            return Ok(sampling);
        }
        let (Some(provider), Some(model)) = (&sampling.provider, &sampling.model) else {
            return Err(Error::validation(
                "sampling.provider and sampling.model are required unless sampling.policy is deny",
            ));
        };
        let Some(configured) = self.settings.llm.providers.get(provider) else {
            return Err(Error::validation(format!(
                "sampling.provider '{provider}' is not a configured LLM provider"
            )));
        };
        if !configured.models.is_empty() && !configured.models.contains(model) {
            return Err(Error::validation(format!(
                "sampling.model '{model}' is not offered by provider '{provider}'"
            )));
        }
        Ok(sampling)
    }
}

/// A server's name from its catalog entry's: `io.github.x/weather-api` → `weather-api`.
fn default_name(entry: &str) -> Result<ServerName> {
    let short: String = entry
        .rsplit('/')
        .next()
        .unwrap_or(entry)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    ServerName::parse(&short)
        .map_err(|_| Error::validation("name is required (the entry's name does not make one)"))
}

/// A malformed id cannot exist, so it answers exactly like a missing one.
fn parse_server_id(id: &str) -> Result<Uuid> {
    Uuid::parse_str(id).map_err(|_| Error::NotFound(Resource::McpServer, id.to_owned()))
}

fn duplicate_name(err: StoreError, name: &ServerName) -> Error {
    match err {
        StoreError::Duplicate => Error::Conflict(format!(
            "an MCP server named '{}' already exists",
            name.as_str()
        )),
        other => other.into(),
    }
}

/// Roots are `file://` URIs (the MCP specification's only kind), at most `max` of them.
fn checked_roots(roots: Vec<RootEntry>, max: usize) -> Result<Vec<RootEntry>> {
    if roots.len() > max {
        return Err(Error::validation(format!(
            "roots may list at most {max} entries"
        )));
    }
    for root in &roots {
        let parsed = url::Url::parse(&root.uri)
            .map_err(|e| Error::validation(format!("roots: '{}' is not a URI: {e}", root.uri)))?;
        if parsed.scheme() != "file" {
            return Err(Error::validation(format!(
                "roots: '{}' is not a file:// URI",
                root.uri
            )));
        }
    }
    Ok(roots)
}
