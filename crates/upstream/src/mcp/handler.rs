//! The client-side handler: what an upstream may tell us while connected.

// Log notifications and roots are deprecated in 2026-07-28 but are what 2025-11-25 servers use.
#![allow(deprecated)]

use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, LoggingMessageNotificationParam,
    ProgressNotificationParam, ResourceUpdatedNotificationParam,
};
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ListRootsResult, Root,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData, RoleClient};
use std::sync::Arc;

use super::downstream::Callers;
use crate::domain::RootEntry;
use tokio::sync::mpsc;

/// Things an upstream announces: changes its owner (the connection actor) must act on,
/// and notices for whoever listens to the server (gateway sessions, event streams).
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamEvents {
    ToolsChanged,
    ResourcesChanged,
    PromptsChanged,
    /// `notifications/message`.
    Log(LoggingMessageNotificationParam),
    /// `notifications/resources/updated` for this URI.
    ResourceUpdated(String),
}

pub struct PoolClientHandler {
    /// Routes `notifications/progress` to the call that asked for them.
    pub(super) progress: ProgressDispatcher,
    /// Routes elicitation and sampling requests to the caller they relate to.
    pub(super) callers: Arc<Callers>,
    events: mpsc::UnboundedSender<UpstreamEvents>,
    /// The server's configured roots, for `roots/list` without a client to answer it.
    roots: Vec<Root>,
    /// Names the connection in logs (`user/server`).
    label: String,
    /// What a URL-mode question may send a person to.
    url_policy: Arc<crate::security::UrlPolicy>,
}

impl PoolClientHandler {
    async fn elicit_through(
        &self,
        asker: Arc<dyn super::downstream::Downstream>,
        mut request: ElicitRequestParams,
    ) -> Result<ElicitResult, ErrorData> {
        // Whoever is asked (a user on their event stream, a gateway client), a URL-mode
        // question never sends a person to a script, an inline document or plain http: it
        // is refused to the server here, and what is passed on is the URL as parsed.
        if let ElicitRequestParams::UrlElicitationParams { url, .. } = &mut request {
            let checked = self
                .url_policy
                .check_for_person(url, "the elicitation's url")
                .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
            *url = checked.to_string();
        }
        asker.elicit(request).await
    }

    /// The asker's own roots, else the server's configured ones.
    async fn roots_through(
        &self,
        asker: Option<Arc<dyn super::downstream::Downstream>>,
    ) -> Result<ListRootsResult, ErrorData> {
        if let Some(asker) = asker
            && let Some(roots) = asker.roots().await
        {
            return roots;
        }
        Ok(ListRootsResult::new(self.roots.clone()))
    }

    /// One of a task's questions (its `inputRequests`), put to `asker`, the caller of the
    /// call the task was made of: unlike a server-to-client request, the call is known, so
    /// no guess among the calls in flight. `None`: as a server-to-client request.
    pub(super) async fn answer_input(
        &self,
        asker: Option<Arc<dyn super::downstream::Downstream>>,
        request: rmcp::model::InputRequest,
    ) -> Result<serde_json::Value, ErrorData> {
        use rmcp::model::InputRequest;
        let asker = match asker {
            Some(asker) => Some(asker),
            None => self.callers.answering().ok(),
        };
        let nobody = || ErrorData::invalid_request("nobody can answer the server's question", None);
        let answer = match request {
            InputRequest::Elicitation(request) => serde_json::to_value(
                self.elicit_through(asker.ok_or_else(nobody)?, request.params)
                    .await?,
            ),
            InputRequest::CreateMessage(request) => {
                serde_json::to_value(asker.ok_or_else(nobody)?.sample(request.params).await?)
            }
            InputRequest::ListRoots(_) => serde_json::to_value(self.roots_through(asker).await?),
            _ => {
                return Err(ErrorData::invalid_params(
                    "a kind of question this service does not know",
                    None,
                ));
            }
        };
        answer.map_err(|e| ErrorData::internal_error(format!("an unwritable answer: {e}"), None))
    }

    pub fn new(
        events: mpsc::UnboundedSender<UpstreamEvents>,
        label: &str,
        roots: &[RootEntry],
        owner: Option<Arc<dyn super::downstream::Downstream>>,
        url_policy: Arc<crate::security::UrlPolicy>,
    ) -> Self {
        let roots = roots
            .iter()
            .map(|entry| {
                let mut root = Root::new(&entry.uri);
                root.name = entry.name.clone();
                root
            })
            .collect();
        Self {
            progress: ProgressDispatcher::new(),
            callers: Arc::new(Callers::new(owner)),
            events,
            roots,
            label: label.to_owned(),
            url_policy,
        }
    }
}

impl ClientHandler for PoolClientHandler {
    fn get_info(&self) -> ClientConfig {
        // Elicitation (form and URL) and sampling: passed to the caller who can answer
        // (see `downstream`), refused when there is none. Roots: the calling gateway
        // client's, else the server's configured list (a change of it reconnects). MCP
        // Apps: the pool carries servers' views to the hosts behind it (REST and the
        // gateway), so servers that offer a view only to hosts that render them do.
        let capabilities: ClientCapabilities = serde_json::from_value(serde_json::json!({
            "elicitation": {"form": {}, "url": {}},
            "sampling": {},
            "roots": {},
            "extensions": {
                crate::domain::app_ui::UI_EXTENSION: {"mimeTypes": [crate::domain::app_ui::APP_MIME_TYPE]}
            },
        }))
        .expect("valid client capabilities");
        // What `initialize` names: the newest revision that has it (rmcp's default is
        // its newest of all, 2026-07-28, which has no initialize). The discover probe
        // names 2026-07-28 on its own.
        ClientConfig::new(
            capabilities,
            Implementation::new("mcp-pool", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.elicit_through(self.callers.answering()?, request)
            .await
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.callers.answering()?.sample(params).await
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        self.roots_through(self.callers.answering().ok()).await
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.events.send(UpstreamEvents::ToolsChanged);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.events.send(UpstreamEvents::ResourcesChanged);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.events.send(UpstreamEvents::PromptsChanged);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // In the service log under the request of the call it came during, if one.
        let span = self
            .callers
            .only_call_span()
            .unwrap_or_else(tracing::Span::current);
        span.in_scope(|| {
            tracing::info!(
                upstream = %self.label,
                level = ?params.level,
                logger = params.logger.as_deref(),
                data = %params.data,
                "server log message"
            );
        });
        let _ = self.events.send(UpstreamEvents::Log(params));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self
            .events
            .send(UpstreamEvents::ResourceUpdated(params.uri));
    }
}
