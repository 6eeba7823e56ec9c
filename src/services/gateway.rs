//! The gateway (seed 002): one assistant's servers as one MCP server, reached with a
//! per-assistant token. Tools and prompts are namespaced `{server}{separator}{name}`;
//! calls go through the same connection actors, confirmation rules and limits as the
//! REST API: auto-approved tools run at once, others are parked until the user decides.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use moka::future::Cache;
use rmcp::model::{
    CallToolResult, ContentBlock, GetPromptResult, JsonObject, Prompt, Resource, ResourceTemplate,
    Tool,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::tool_calls::{ModelToolCall, limit_result_in_place, plan_calls};
use super::{AssistantTools, Caller, ServerCatalog, UpstreamService};
use crate::config::Settings;
use crate::confirm::{Confirmations, Waited};
use crate::domain::tool_name::{PrefixMode, gateway_names};
use crate::domain::{AssistantId, ToolCallStatus, UserId};
use crate::error::{Error, Resource as Missing, Result};
use crate::mcp::{Progress, ServerFeatures};
use crate::security::GeneratedKey;
use crate::security::api_key::hash_key;
use crate::store::{GatewayToken, Store};

/// Who a gateway session acts for: one user's one assistant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayPrincipal {
    pub user: UserId,
    pub assistant: AssistantId,
}

/// The assistant's tools under their gateway names.
pub struct GatewayTools {
    pub listing: AssistantTools,
    /// Gateway name → index into `listing.tools`.
    names: HashMap<String, usize>,
    /// Gateway names in the listing's order.
    pub ordered: Vec<String>,
    /// The naming this view was built with.
    pub mode: PrefixMode,
    /// Tools not offered because another server's tool has the same name (`never`):
    /// (server name, tool name).
    pub hidden: Vec<(String, String)>,
}

impl GatewayTools {
    /// The tools as an MCP client sees them.
    pub fn tools(&self) -> Vec<Tool> {
        self.ordered
            .iter()
            .map(|name| {
                let mut tool = self.listing.tools[self.names[name]].tool.clone();
                tool.name = name.clone().into();
                tool
            })
            .collect()
    }
}

#[derive(Clone)]
pub struct GatewayService {
    store: Store,
    settings: Arc<Settings>,
    upstream: UpstreamService,
    confirmations: Confirmations,
    /// Accepted tokens by digest; a deleted token is forgotten at once on this instance.
    accepted: Cache<String, GatewayPrincipal>,
    /// Bindings and each assistant's prefix mode.
    bindings: super::assistants::BindingCache,
    /// The last tool view built per (user, assistant), with what it was built from.
    views: Cache<(UserId, AssistantId), Arc<ToolView>>,
}

/// A built tool view and its sources: each bound server's runtime and catalog. Any change
/// that matters (a `list_changed`, a refresh, a server or binding change) replaces one of
/// those `Arc`s or the list itself, so an equal list means the view is still exact.
/// Holding the `Arc`s keeps their addresses from being reused while compared.
struct ToolView {
    mode: PrefixMode,
    sources: Vec<(Uuid, Option<Sources>)>,
    tools: Arc<GatewayTools>,
}

type Sources = (
    Arc<crate::pool::ServerRuntime>,
    Arc<crate::pool::ToolCatalog>,
);

impl ToolView {
    fn built_from(&self, mode: PrefixMode, catalogs: &[ServerCatalog]) -> bool {
        self.mode == mode
            && self.sources.len() == catalogs.len()
            && self.sources.iter().zip(catalogs).all(|((id, kept), now)| {
                *id == now.server_id
                    && match (kept, &now.listing) {
                        (Some((runtime, catalog)), Ok((now_runtime, now_catalog))) => {
                            Arc::ptr_eq(runtime, now_runtime) && Arc::ptr_eq(catalog, now_catalog)
                        }
                        _ => false,
                    }
            })
    }
}

/// A token's prefix kept in clear so people can tell their tokens apart.
const TOKEN_PREFIX: &str = "mcpg_";

impl GatewayService {
    pub fn new(
        store: Store,
        settings: Arc<Settings>,
        upstream: UpstreamService,
        confirmations: Confirmations,
        bindings: super::assistants::BindingCache,
    ) -> Self {
        let accepted = Cache::builder()
            .max_capacity(10_000)
            .time_to_live(Duration::from_secs(settings.auth.key_cache_ttl_secs))
            .build();
        Self {
            store,
            settings,
            upstream,
            confirmations,
            accepted,
            bindings,
            views: Cache::builder()
                .max_capacity(10_000)
                .time_to_idle(Duration::from_secs(600))
                .build(),
        }
    }

    pub async fn create_token(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        name: &str,
    ) -> Result<(GatewayToken, String)> {
        let name = name.trim();
        if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
            return Err(Error::validation(
                "name must be 1 to 128 characters without control characters",
            ));
        }
        let repo = self.store.gateway();
        let max = self.settings.gateway.max_tokens_per_assistant;
        if repo.tokens(user, assistant).await?.len() as u64 >= max {
            return Err(Error::LimitReached(format!(
                "an assistant may have at most {max} gateway tokens"
            )));
        }
        let generated = GeneratedKey::new();
        let secret = format!(
            "{TOKEN_PREFIX}{}",
            generated.secret.trim_start_matches("mcpp_")
        );
        let record = GatewayToken {
            id: Uuid::now_v7(),
            user_id: user.clone(),
            assistant_id: assistant.clone(),
            name: name.to_owned(),
            prefix: secret.chars().take(12).collect(),
            created_at: crate::domain::now(),
        };
        repo.insert_token(&record, &hash_key(&secret)).await?;
        tracing::info!(token = %record.id, %user, assistant = assistant.as_str(), "gateway token created");
        Ok((record, secret))
    }

    pub async fn tokens(
        &self,
        user: &UserId,
        assistant: &AssistantId,
    ) -> Result<Vec<GatewayToken>> {
        Ok(self.store.gateway().tokens(user, assistant).await?)
    }

    pub async fn delete_token(
        &self,
        user: &UserId,
        assistant: &AssistantId,
        id: &str,
    ) -> Result<()> {
        let not_found = || Error::NotFound(Missing::GatewayToken, id.to_owned());
        let uuid = Uuid::parse_str(id).map_err(|_| not_found())?;
        let hash = self
            .store
            .gateway()
            .delete_token(user, assistant, uuid)
            .await?
            .ok_or_else(not_found)?;
        self.accepted.invalidate(&hash).await;
        Ok(())
    }

    pub async fn authenticate(&self, secret: &str) -> Result<GatewayPrincipal> {
        let hash = hash_key(secret);
        if let Some(principal) = self.accepted.get(&hash).await {
            return Ok(principal);
        }
        let token = self
            .store
            .gateway()
            .token_by_hash(&hash)
            .await?
            .ok_or_else(|| Error::Unauthorized("the gateway token is not valid".into()))?;
        let principal = GatewayPrincipal {
            user: token.user_id,
            assistant: token.assistant_id,
        };
        self.accepted.insert(hash, principal.clone()).await;
        Ok(principal)
    }

    /// The assistant's prefix mode: its own, else the service's.
    async fn prefix_mode(&self, principal: &GatewayPrincipal) -> Result<PrefixMode> {
        let own = self
            .bindings
            .gateway_prefix(&principal.user, &principal.assistant)
            .await?;
        Ok(own.unwrap_or_else(|| {
            PrefixMode::parse(&self.settings.gateway.prefix).unwrap_or_default()
        }))
    }

    /// The assistant's tools under their gateway names: the view built last time when
    /// nothing it was built from changed (a lookup per bound server), else a new one.
    pub async fn tools(&self, principal: &GatewayPrincipal) -> Result<Arc<GatewayTools>> {
        let catalogs = self
            .upstream
            .assistant_catalogs(&principal.user, &principal.assistant)
            .await?;
        let mode = self.prefix_mode(principal).await?;
        let key = (principal.user.clone(), principal.assistant.clone());
        if let Some(view) = self.views.get(&key).await
            && view.built_from(mode, &catalogs)
        {
            return Ok(view.tools.clone());
        }
        let sources = catalogs
            .iter()
            .map(|c| (c.server_id, c.listing.as_ref().ok().cloned()))
            .collect();
        let all_listed = catalogs.iter().all(|c| c.listing.is_ok());
        let tools = Arc::new(self.name_tools(mode, AssistantTools::assemble(catalogs)));
        // A view with a failing server is not kept: its error may pass at the next call.
        if all_listed {
            self.views
                .insert(
                    key,
                    Arc::new(ToolView {
                        mode,
                        sources,
                        tools: tools.clone(),
                    }),
                )
                .await;
        }
        Ok(tools)
    }

    fn name_tools(&self, mode: PrefixMode, listing: AssistantTools) -> GatewayTools {
        let items: Vec<(&str, &str)> = listing
            .tools
            .iter()
            .map(|t| (t.server.server.spec.name.as_str(), t.tool.name.as_ref()))
            .collect();
        let mut names = HashMap::new();
        let mut ordered = Vec::new();
        let mut hidden = Vec::new();
        for (index, name) in gateway_names(mode, &self.settings.gateway.separator, &items)
            .into_iter()
            .enumerate()
        {
            match name {
                Some(name) => {
                    names.insert(name.clone(), index);
                    ordered.push(name);
                }
                None => {
                    let (server, tool) = items[index];
                    tracing::info!(
                        server,
                        tool,
                        "a tool is not offered by the gateway: another bound server's tool has its name"
                    );
                    hidden.push((server.to_owned(), tool.to_owned()));
                }
            }
        }
        drop(items);
        GatewayTools {
            listing,
            names,
            ordered,
            mode,
            hidden,
        }
    }

    /// Stops the upstream sessions of an ended gateway session.
    pub async fn end_scope(&self, user: &UserId, scope: &str) {
        self.upstream.end_scope(user, scope).await;
    }

    /// Calls a tool by its gateway name. Progress goes to `caller.live`, what the server
    /// asks meanwhile to `caller.downstream`; `cancel` abandons the call (the upstream is
    /// told) or cancels it while it waits for approval.
    pub async fn call(
        &self,
        principal: &GatewayPrincipal,
        name: &str,
        arguments: Option<JsonObject>,
        caller: Caller<'_>,
        cancel: &CancellationToken,
        max_result_bytes: usize,
    ) -> Result<CallToolResult> {
        let tools = self.tools(principal).await?;
        let Some(&index) = tools.names.get(name) else {
            return Err(Error::NotFound(Missing::Tool, name.to_owned()));
        };
        let tool = &tools.listing.tools[index];
        let spec = &tool.server.server.spec;
        let arguments = Value::Object(arguments.unwrap_or_default());
        let limited = |result: CallToolResult| limit_result_in_place(result, max_result_bytes);
        if spec.auto_approve_tools.iter().any(|t| *t == tool.tool.name) {
            let server_id = tool.server.server.id.to_string();
            let call = self.upstream.call_tool_reporting(
                &principal.user,
                &server_id,
                &tool.tool.name,
                arguments,
                caller,
            );
            return tokio::select! {
                report = call => Ok(limited(report?.outcome.result)),
                () = cancel.cancelled() => Err(Error::Conflict("the client cancelled the call".into())),
            };
        }
        // Not auto-approved: parked like a model's call, on a message of its own.
        let message = Uuid::now_v7();
        let records = plan_calls(
            &tools.listing,
            &[ModelToolCall {
                id: "gateway".into(),
                name: tool.name.clone(),
                arguments,
            }],
        );
        if records[0].status == ToolCallStatus::Error {
            return Err(Error::InvalidArguments(vec![
                records[0].response.to_string(),
            ]));
        }
        let scope = caller.scope.map(Arc::from);
        self.confirmations
            .submit(&principal.user, message, None, scope, records)
            .await?;
        if let Some(live) = caller.live {
            let _ = live.send(Progress {
                progress: 0.0,
                total: None,
                message: Some(format!(
                    "waiting for the user's approval (message {message}, tool call 'gateway')"
                )),
            });
        }
        let limit = Duration::from_secs(self.settings.confirmation.timeout_secs + 60);
        let waited = tokio::select! {
            waited = self.confirmations.wait_settled(&principal.user, message, limit) => waited?,
            () = cancel.cancelled() => {
                self.confirmations
                    .cancel_parked(&principal.user, message, "Cancelled by the MCP client.")
                    .await;
                return Err(Error::Conflict("the client cancelled the call".into()));
            }
        };
        let record = match waited {
            Waited::Settled(records) | Waited::StillOpen(records) => records
                .into_iter()
                .next()
                .ok_or_else(|| Error::Unexpected(anyhow::anyhow!("the parked call vanished")))?,
        };
        let content = match record.response {
            Value::Array(_) => serde_json::from_value::<Vec<ContentBlock>>(record.response)
                .unwrap_or_else(|_| vec![ContentBlock::text("(unreadable result)")]),
            Value::String(text) => vec![ContentBlock::text(text)],
            other => vec![ContentBlock::text(other.to_string())],
        };
        let result = if record.is_error || record.status != ToolCallStatus::Done {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        Ok(limited(result))
    }

    /// The bound, active servers' ids and names.
    async fn servers(&self, principal: &GatewayPrincipal) -> Result<Vec<(Uuid, String)>> {
        let ids = self
            .store
            .assistants()
            .bound_servers(&principal.user, &principal.assistant)
            .await?;
        let mut servers = Vec::new();
        for id in ids {
            if let Some(server) = self.store.servers().get(&principal.user, id).await?
                && server.spec.is_active
            {
                servers.push((id, server.spec.name.as_str().to_owned()));
            }
        }
        Ok(servers)
    }

    /// What the assistant's servers support together: a capability is offered when one
    /// of them has it. A server that cannot be reached adds nothing.
    pub async fn features(&self, principal: &GatewayPrincipal) -> Result<ServerFeatures> {
        let mut all = ServerFeatures::default();
        for (id, _) in self.servers(principal).await? {
            if let Ok(one) = self
                .upstream
                .features(&principal.user, &id.to_string())
                .await
            {
                all.resources |= one.resources;
                all.prompts |= one.prompts;
                all.logging |= one.logging;
                all.completions |= one.completions;
                all.subscribe |= one.subscribe;
            }
        }
        Ok(all)
    }

    /// The ids of the assistant's active servers.
    pub async fn server_ids(&self, principal: &GatewayPrincipal) -> Result<HashSet<Uuid>> {
        Ok(self
            .servers(principal)
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    /// `logging/setLevel` on every bound server that logs.
    #[allow(deprecated)]
    pub async fn set_log_level(
        &self,
        principal: &GatewayPrincipal,
        level: rmcp::model::LoggingLevel,
    ) -> Result<()> {
        for (id, _) in self.servers(principal).await? {
            let id = id.to_string();
            if self.offers(principal, &id, |f| f.logging).await
                && let Err(error) = self
                    .upstream
                    .set_log_level(&principal.user, &id, level)
                    .await
            {
                tracing::info!(server = %id, %error, "a server refused logging/setLevel");
            }
        }
        Ok(())
    }

    /// Whether server `id` offers what `has` asks for (one that cannot be reached offers
    /// nothing).
    async fn offers(
        &self,
        principal: &GatewayPrincipal,
        id: &str,
        has: impl Fn(&ServerFeatures) -> bool,
    ) -> bool {
        self.upstream
            .features(&principal.user, id)
            .await
            .is_ok_and(|f| has(&f))
    }

    /// `completion/complete`: a prompt argument goes to the prompt's server (under its
    /// own name there), a resource template's to the servers that complete, first answer.
    pub async fn complete(
        &self,
        principal: &GatewayPrincipal,
        mut params: rmcp::model::CompleteRequestParams,
    ) -> Result<rmcp::model::CompleteResult> {
        use rmcp::model::Reference;
        let candidates: Vec<Uuid> = match &params.r#ref {
            Reference::Prompt(prompt) => {
                let Some((id, _, original)) = self
                    .named_prompts(principal)
                    .await?
                    .into_iter()
                    .find(|(_, name, _)| *name == prompt.name)
                else {
                    return Err(Error::NotFound(Missing::Prompt, prompt.name.clone()));
                };
                params.r#ref = Reference::for_prompt(original.name);
                vec![id]
            }
            _ => self
                .servers(principal)
                .await?
                .into_iter()
                .map(|(id, _)| id)
                .collect(),
        };
        let mut last_error = None;
        for id in candidates {
            let id = id.to_string();
            if !self.offers(principal, &id, |f| f.completions).await {
                continue;
            }
            match self
                .upstream
                .complete(&principal.user, &id, params.clone())
                .await
            {
                Ok(result) => return Ok(result),
                Err(error) => last_error = Some(error),
            }
        }
        match last_error {
            Some(error) => Err(error),
            None => Ok(rmcp::model::CompleteResult::default()),
        }
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
                .upstream
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

    /// Every bound server's resources; a failing server is left out.
    pub async fn resources(
        &self,
        principal: &GatewayPrincipal,
    ) -> Result<(Vec<Resource>, Vec<ResourceTemplate>)> {
        let mut resources = Vec::new();
        let mut templates = Vec::new();
        for (id, _) in self.servers(principal).await? {
            if let Ok(catalog) = self
                .upstream
                .resources(&principal.user, &id.to_string())
                .await
            {
                resources.extend(catalog.resources.iter().cloned());
                templates.extend(catalog.templates.iter().cloned());
            }
        }
        Ok((resources, templates))
    }

    /// Reads a resource from the first bound server that lists it (or, for URIs only a
    /// template matches, the first that can read it).
    pub async fn read_resource(
        &self,
        principal: &GatewayPrincipal,
        uri: &str,
    ) -> Result<rmcp::model::ReadResourceResult> {
        let servers = self.servers(principal).await?;
        let mut last_error = None;
        for (id, _) in &servers {
            let id = id.to_string();
            let listed = self
                .upstream
                .resources(&principal.user, &id)
                .await
                .map(|c| c.resources.iter().any(|r| r.uri == uri))
                .unwrap_or(false);
            if listed {
                return self.upstream.read_resource(&principal.user, &id, uri).await;
            }
        }
        for (id, _) in &servers {
            match self
                .upstream
                .read_resource(&principal.user, &id.to_string(), uri)
                .await
            {
                Ok(result) => return Ok(result),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| Error::NotFound(Missing::Resource, uri.to_owned())))
    }

    /// Every bound server's prompts under gateway names, with the server each one is
    /// from; named by the assistant's prefix mode like its tools.
    async fn named_prompts(
        &self,
        principal: &GatewayPrincipal,
    ) -> Result<Vec<(Uuid, String, Prompt)>> {
        let mut listed = Vec::new();
        for (id, server) in self.servers(principal).await? {
            if let Ok(prompts) = self
                .upstream
                .prompts(&principal.user, &id.to_string())
                .await
            {
                listed.extend(prompts.iter().map(|p| (id, server.clone(), p.clone())));
            }
        }
        let mode = self.prefix_mode(principal).await?;
        let items: Vec<(&str, &str)> = listed
            .iter()
            .map(|(_, server, prompt)| (server.as_str(), prompt.name.as_str()))
            .collect();
        let names = gateway_names(mode, &self.settings.gateway.separator, &items);
        drop(items);
        Ok(listed
            .into_iter()
            .zip(names)
            .filter_map(|((id, _, prompt), name)| name.map(|name| (id, name, prompt)))
            .collect())
    }

    pub async fn prompts(&self, principal: &GatewayPrincipal) -> Result<Vec<Prompt>> {
        Ok(self
            .named_prompts(principal)
            .await?
            .into_iter()
            .map(|(_, name, mut prompt)| {
                prompt.name = name;
                prompt
            })
            .collect())
    }

    pub async fn get_prompt(
        &self,
        principal: &GatewayPrincipal,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult> {
        let Some((id, _, prompt)) = self
            .named_prompts(principal)
            .await?
            .into_iter()
            .find(|(_, gateway_name, _)| gateway_name == name)
        else {
            return Err(Error::NotFound(Missing::Prompt, name.to_owned()));
        };
        self.upstream
            .get_prompt(&principal.user, &id.to_string(), &prompt.name, arguments)
            .await
    }

    pub fn pool_changes(&self) -> tokio::sync::broadcast::Receiver<crate::pool::ConnectionKey> {
        self.upstream.pool_changes()
    }
}
