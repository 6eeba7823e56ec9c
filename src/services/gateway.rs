//! The gateway (seed 002): one assistant's servers as one MCP server, reached with a
//! per-assistant token. Tools and prompts are namespaced `{server}{separator}{name}`;
//! calls go through the same connection actors, confirmation rules and limits as the
//! REST API: auto-approved tools run at once, others are parked until the user decides.

use std::collections::HashMap;
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
use super::{AssistantTools, UpstreamService};
use crate::config::Settings;
use crate::confirm::{Confirmations, Waited};
use crate::domain::tool_name::gateway_name;
use crate::domain::{AssistantId, ToolCallStatus, UserId};
use crate::error::{Error, Resource as Missing, Result};
use crate::mcp::Progress;
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
}

/// A token's prefix kept in clear so people can tell their tokens apart.
const TOKEN_PREFIX: &str = "mcpg_";

impl GatewayService {
    pub fn new(
        store: Store,
        settings: Arc<Settings>,
        upstream: UpstreamService,
        confirmations: Confirmations,
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

    fn name_of(&self, server: &str, item: &str) -> String {
        gateway_name(server, &self.settings.gateway.separator, item)
    }

    pub async fn tools(&self, principal: &GatewayPrincipal) -> Result<GatewayTools> {
        let listing = self
            .upstream
            .assistant_tools(&principal.user, &principal.assistant)
            .await?;
        let mut names = HashMap::new();
        let mut ordered = Vec::new();
        for (index, tool) in listing.tools.iter().enumerate() {
            let name = self.name_of(tool.server.server.spec.name.as_str(), &tool.tool.name);
            if names.insert(name.clone(), index).is_none() {
                ordered.push(name);
            } else {
                tracing::warn!(%name, "two tools share a gateway name; the first is offered");
            }
        }
        Ok(GatewayTools {
            listing,
            names,
            ordered,
        })
    }

    /// Calls a tool by its gateway name. Progress goes to `live`; `cancel` abandons the
    /// call (the upstream is told) or cancels it while it waits for approval.
    pub async fn call(
        &self,
        principal: &GatewayPrincipal,
        name: &str,
        arguments: Option<JsonObject>,
        live: Option<&tokio::sync::mpsc::UnboundedSender<Progress>>,
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
                live,
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
        self.confirmations
            .submit(&principal.user, message, None, records)
            .await?;
        if let Some(live) = live {
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

    /// Every bound server's prompts under gateway names.
    pub async fn prompts(&self, principal: &GatewayPrincipal) -> Result<Vec<Prompt>> {
        let mut prompts = Vec::new();
        for (id, name) in self.servers(principal).await? {
            if let Ok(listed) = self
                .upstream
                .prompts(&principal.user, &id.to_string())
                .await
            {
                prompts.extend(listed.iter().map(|prompt| {
                    let mut prompt = prompt.clone();
                    prompt.name = self.name_of(&name, &prompt.name);
                    prompt
                }));
            }
        }
        Ok(prompts)
    }

    pub async fn get_prompt(
        &self,
        principal: &GatewayPrincipal,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult> {
        for (id, server) in self.servers(principal).await? {
            let Ok(listed) = self
                .upstream
                .prompts(&principal.user, &id.to_string())
                .await
            else {
                continue;
            };
            if let Some(prompt) = listed
                .iter()
                .find(|p| self.name_of(&server, &p.name) == name)
            {
                return self
                    .upstream
                    .get_prompt(&principal.user, &id.to_string(), &prompt.name, arguments)
                    .await;
            }
        }
        Err(Error::NotFound(Missing::Prompt, name.to_owned()))
    }

    pub fn pool_changes(&self) -> tokio::sync::broadcast::Receiver<crate::pool::ConnectionKey> {
        self.upstream.pool_changes()
    }
}
