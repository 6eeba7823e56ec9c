//! The gateway (seed 002): one assistant's servers as one MCP server, reached with a
//! per-assistant token. Tools and prompts are namespaced `{server}{separator}{name}`;
//! calls go through the same connection actors, confirmation rules and limits as the
//! REST API: auto-approved tools run at once, others are parked until the user decides.

use std::sync::Arc;
use std::time::Duration;

use moka::future::Cache;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, JsonObject};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::authenticator::TokenAuthenticator;
use super::policies::CallDecider;
use super::tool_calls::{ModelToolCall, limit_result_in_place, plan_calls};
use super::{AssistantTools, Audience, Caller, UpstreamService};
use crate::config::Settings;
use crate::confirm::{Confirmations, Waited};
use crate::domain::tool_search::{CALL_TOOL, SEARCH_TOOLS};
use crate::domain::{AssistantId, CallOrigin, CallVia, ToolCallStatus, ToolExposure, UserId};
use crate::error::{Error, Resource as Missing, Result};
use crate::mcp::{CallOutcome, Progress};
use crate::security::GeneratedKey;
use crate::security::api_key::hash_key;
use crate::store::{GatewayToken, Store};

mod aggregate;
mod subscriptions;
mod view;

pub use view::GatewayTools;
use view::ToolView;

/// Who a gateway session acts for: one user's one assistant, and the door it came in by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GatewayPrincipal {
    pub user: UserId,
    pub assistant: AssistantId,
    pub channel: GatewayChannel,
    /// The client speaks 2025-11-25 or older: a server that also speaks 2026-07-28 is
    /// spoken to in the client's revision, on a session of its own.
    pub older_client: bool,
    /// The gateway token (or Xiaozhi bridge) the session came with, for audit rows.
    pub credential: Option<Uuid>,
}

impl GatewayPrincipal {
    /// What the audit rows of this session's calls say of who asked.
    pub fn origin(&self) -> CallOrigin {
        let via = match self.channel {
            GatewayChannel::Mcp => CallVia::Gateway,
            GatewayChannel::Xiaozhi => CallVia::Xiaozhi,
        };
        CallOrigin {
            key_id: self.credential,
            ..CallOrigin::new(via)
        }
    }
}

/// How a gateway session reached the service: its tool names take that door's separator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GatewayChannel {
    /// `/mcp/assistants/{id}` (`gateway.separator`).
    #[default]
    Mcp,
    /// A Xiaozhi bridge (`xiaozhi.separator`).
    Xiaozhi,
}

#[derive(Clone)]
pub struct GatewayService {
    store: Store,
    settings: Arc<Settings>,
    upstream: UpstreamService,
    /// `upstream` for clients of 2025-11-25 and older.
    older_upstream: UpstreamService,
    confirmations: Confirmations,
    /// A deleted token is forgotten at once on this instance.
    tokens: TokenAuthenticator<GatewayPrincipal>,
    /// Bindings and each assistant's prefix mode.
    bindings: super::assistants::BindingCache,
    /// The last tool view built per (user, assistant, channel), with what it was built
    /// from.
    views: Cache<GatewayPrincipal, Arc<ToolView>>,
    /// Calls of clients that declare the tasks extension run as tasks.
    tasks: super::Tasks,
    /// For this service's public URL (the default approval page).
    oauth: super::OAuthService,
}

/// A token's prefix kept in clear so people can tell their tokens apart.
const TOKEN_PREFIX: &str = "mcpg_";

impl GatewayService {
    /// The question a task's client gets for a call waiting for the user's approval: where
    /// a person decides (`tasks.approval_url`), named by the parked call's message.
    fn approval_question(&self, message: Uuid, tool: &str) -> Value {
        let configured = self.settings.tasks.approval_url.trim();
        let url = if configured.is_empty() {
            format!("{}/console/#/approvals", self.oauth.public_url())
        } else {
            configured.replace("{message}", &message.to_string())
        };
        json!({
            "method": "elicitation/create",
            "params": {
                "mode": "url",
                "message": format!(
                    "The call of '{tool}' waits for the user's approval (message {message}): \
                     the user approves or rejects it there."
                ),
                "url": url,
                "elicitationId": message.to_string(),
            }
        })
    }

    pub fn new(
        store: Store,
        settings: Arc<Settings>,
        upstream: UpstreamService,
        confirmations: Confirmations,
        bindings: super::assistants::BindingCache,
        tasks: super::Tasks,
        oauth: super::OAuthService,
    ) -> Self {
        Self {
            tasks,
            oauth,
            tokens: TokenAuthenticator::new(&settings, "the gateway token is not valid"),
            store,
            settings,
            older_upstream: upstream.for_older_clients(),
            upstream,
            confirmations,
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
        self.tokens.forget(&hash).await;
        Ok(())
    }

    pub async fn authenticate(&self, secret: &str) -> Result<GatewayPrincipal> {
        let tokens = self.store.gateway();
        self.tokens
            .authenticate(secret, |digest| async move {
                Ok(tokens
                    .token_by_hash(&digest)
                    .await?
                    .map(|token| GatewayPrincipal {
                        user: token.user_id,
                        assistant: token.assistant_id,
                        channel: GatewayChannel::Mcp,
                        older_client: false,
                        credential: Some(token.id),
                    }))
            })
            .await
    }

    /// The assistant's tools under their gateway names: the view built last time when
    /// nothing it was built from changed (a lookup per bound server), else a new one.
    pub async fn tools(&self, principal: &GatewayPrincipal) -> Result<Arc<GatewayTools>> {
        Ok(self.tools_and_rules(principal).await?.0)
    }

    /// [`Self::tools`] with the rules' decider it was filtered by, which a call then asks
    /// (one lookup of the user's attributes for both).
    async fn tools_and_rules(
        &self,
        principal: &GatewayPrincipal,
    ) -> Result<(Arc<GatewayTools>, CallDecider)> {
        let catalogs = self
            .upstream_for(principal)
            .assistant_catalogs(&principal.user, &principal.assistant)
            .await?;
        // The prefix mode and the curation, in one lookup.
        let settings = self
            .bindings
            .settings(&principal.user, &principal.assistant)
            .await?;
        let mode = self.mode_of(&settings);
        let decider = self
            .upstream
            .policies()
            .decider(&principal.user, principal.origin().via)
            .await?;
        let governance = decider.fingerprint();
        let overrides = settings.overrides.clone();
        let key = principal.clone();
        if let Some(view) = self.views.get(&key).await
            && view.built_from(mode, settings.exposure, &catalogs, &governance, &overrides)
        {
            return Ok((view.tools.clone(), decider));
        }
        let sources = catalogs
            .iter()
            .map(|c| (c.server_id, c.listing.as_ref().ok().cloned()))
            .collect();
        let all_listed = catalogs.iter().all(|c| c.listing.is_ok());
        let separator = self.separator(principal);
        let tools = Arc::new(self.name_tools(
            mode,
            settings.exposure,
            separator,
            AssistantTools::assemble(catalogs, &decider, Audience::ModelAndApps, &overrides),
        ));
        // A view with a failing server is not kept: its error may pass at the next call.
        if all_listed {
            self.views
                .insert(
                    key,
                    Arc::new(ToolView {
                        mode,
                        exposure: settings.exposure,
                        sources,
                        governance,
                        overrides,
                        tools: tools.clone(),
                    }),
                )
                .await;
        }
        Ok((tools, decider))
    }

    /// The upstream service for the principal's client's revision (see
    /// `UpstreamService::for_older_clients`).
    fn upstream_for(&self, principal: &GatewayPrincipal) -> &UpstreamService {
        if principal.older_client {
            &self.older_upstream
        } else {
            &self.upstream
        }
    }

    pub fn tasks(&self) -> &super::Tasks {
        &self.tasks
    }

    /// The name of the server behind a tool's gateway name.
    pub async fn server_of(&self, principal: &GatewayPrincipal, name: &str) -> Result<String> {
        let tools = self.tools(principal).await?;
        let Some(&index) = tools.names.get(name) else {
            return Err(Error::NotFound(Missing::Tool, name.to_owned()));
        };
        Ok(tools.listing.tools[index]
            .server
            .server
            .spec
            .name
            .as_str()
            .to_owned())
    }

    /// Stops the upstream sessions of an ended gateway session.
    pub(crate) async fn end_scope(&self, user: &UserId, scope: &str) {
        self.upstream.end_scope(user, scope).await;
    }

    /// Calls a tool by its gateway name. Progress goes to `caller.live`, what the server
    /// asks meanwhile to `caller.downstream`; `cancel` abandons the call (the upstream is
    /// told) or cancels it while it waits for approval. `app`: the call is a view's, relayed
    /// by its host (MCP Apps), the view's gateway URI.
    #[allow(clippy::too_many_arguments)]
    pub async fn call(
        &self,
        principal: &GatewayPrincipal,
        name: &str,
        arguments: Option<JsonObject>,
        caller: Caller<'_>,
        cancel: &CancellationToken,
        max_result_bytes: usize,
        app: Option<&str>,
    ) -> Result<CallToolResponse> {
        let (tools, decider) = self.tools_and_rules(principal).await?;
        // Search mode: the model finds tools with `search_tools` and may call one through
        // `call_tool`, which is then the call of that tool as any other.
        let unwrapped;
        let (name, arguments) = match (app, tools.exposure, name) {
            (None, ToolExposure::Search, SEARCH_TOOLS) => {
                return self
                    .search(principal, &tools, arguments.unwrap_or_default())
                    .await;
            }
            (None, ToolExposure::Search, CALL_TOOL) => {
                unwrapped = super::called_through(arguments.unwrap_or_default())?;
                (unwrapped.0.as_str(), unwrapped.1)
            }
            _ => (name, arguments),
        };
        let (index, origin) = match app {
            Some(view) => (tools.app_tool(view, name)?, principal.origin().from_app()),
            None => match tools.names.get(name) {
                Some(&index) => (index, principal.origin()),
                None => return Err(Error::NotFound(Missing::Tool, name.to_owned())),
            },
        };
        let tool = &tools.listing.tools[index];
        // Before a parked call waits for an approval its door would refuse anyway.
        super::upstream::check_audience(&tool.tool, origin)?;
        let spec = &tool.server.server.spec;
        let arguments = Value::Object(arguments.unwrap_or_default());
        let limited = |result: CallToolResult| limit_result_in_place(result, max_result_bytes);
        let decision = decider.decide(&tool.server.server, &tool.tool, Some(&arguments));
        if decision.is_denied()
            && let Some(refusal) = decider.refusal(&decision)
        {
            return Err(refusal);
        }
        if !decision.requires_approval()
            && spec.auto_approve_tools.iter().any(|t| *t == tool.tool.name)
        {
            let server_id = tool.server.server.id.to_string();
            // Allowed by the rules just now: the door takes this decision.
            let caller = Caller {
                origin,
                decided: Some(decision),
                ..caller
            };
            // Boxed, so that this future (copied into the gateway handler's box) stays small.
            let call = Box::pin(self.upstream_for(principal).call_tool_reporting(
                &principal.user,
                &server_id,
                &tool.tool.name,
                arguments,
                caller,
            ));
            return tokio::select! {
                report = call => Ok(match report?.outcome {
                    // A 2026-07-28 upstream's question, for the client to answer.
                    CallOutcome { input_required: Some(asked), .. } => asked.into(),
                    outcome => limited(outcome.result).into(),
                }),
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
            &decider,
        );
        if records[0].status == ToolCallStatus::Error {
            return Err(Error::InvalidArguments(vec![
                records[0].response.to_string(),
            ]));
        }
        let scope = caller.scope.map(Arc::from);
        self.confirmations
            .submit(&principal.user, message, None, scope, records, origin)
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
        // A task's client sees the wait as `input_required`: a URL-mode question that sends
        // a person to decide. Answering it does not approve (only the user does); declining
        // it rejects the call, as the user declining would.
        let mut waiting = match caller.task {
            Some(task) => Some(task.waiting_on(self.approval_question(message, name)).await),
            None => None,
        };
        let limit = Duration::from_secs(self.settings.confirmation.timeout_secs + 60);
        let settled = self
            .confirmations
            .wait_settled(&principal.user, message, limit);
        tokio::pin!(settled);
        let waited = loop {
            let declined = async {
                match waiting.as_mut() {
                    Some(waiting) => waiting.answered().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                waited = &mut settled => break waited?,
                () = cancel.cancelled() => {
                    self.confirmations
                        .cancel_parked(&principal.user, message, "Cancelled by the MCP client.")
                        .await;
                    return Err(Error::Conflict("the client cancelled the call".into()));
                }
                answer = declined => {
                    waiting = None;
                    if answer["action"] != "accept" {
                        self.confirmations
                            .cancel_parked(&principal.user, message, "Declined through the MCP client.")
                            .await;
                    }
                }
            }
        };
        drop(waiting);
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
        Ok(limited(result).into())
    }

    /// `search_tools` (search mode): the tools a model may call that answer its query, by
    /// their gateway names, best first.
    async fn search(
        &self,
        principal: &GatewayPrincipal,
        tools: &GatewayTools,
        arguments: JsonObject,
    ) -> Result<CallToolResponse> {
        let search = super::SearchArguments::of(arguments)?;
        let ranked: Vec<_> = self
            .upstream
            .rank_tools(
                &principal.user,
                &principal.assistant,
                Audience::ModelAndApps,
                &tools.listing,
                &search.query,
                usize::MAX,
            )
            .await?
            .into_iter()
            .filter(|found| {
                tools.listing.tools[found.position].ui().for_model
                    && tools.name_at(found.position).is_some()
            })
            .take(search.limit)
            .collect();
        let found = super::found_tools(&tools.listing, &ranked, |i| tools.name_at(i));
        Ok(CallToolResult::success(vec![ContentBlock::text(found.to_string())]).into())
    }
}
