//! The MCP server side: an assistant's servers re-exposed as one MCP server, over
//! streamable HTTP (`/mcp/assistants/{id}`, mounted by `api`) and over the Xiaozhi
//! WebSocket bridges ([`xiaozhi`]).
//!
//! [`GatewayHandler`] is an rmcp `ServerHandler` that only translates: every request goes
//! to [`GatewayService`], which goes through the pool. Progress of an upstream call is
//! relayed to the client as it arrives, the client's cancellation cancels the upstream
//! call, and a list_changed (or config change) of any of the user's connections tells the
//! client to list again.

pub mod xiaozhi;

use std::sync::Arc;

use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Resource as Missing};
use crate::services::{GatewayPrincipal, GatewayService};

#[derive(Clone)]
pub struct GatewayHandler {
    service: GatewayService,
    /// Set for a bridge; an HTTP session reads the principal of each request instead
    /// (the auth middleware puts it in the request's extensions).
    fixed: Option<GatewayPrincipal>,
    max_result_bytes: usize,
    /// Cancelled when the session's handler is dropped (rmcp drops it when the session
    /// ends: DELETE, idle expiry, a closed bridge socket), ending the session's tasks.
    session: CancellationToken,
    _session_guard: Arc<tokio_util::sync::DropGuard>,
}

/// An error as an MCP client sees it: the client's own mistakes are invalid params,
/// the rest internal errors; both carry the stable code.
fn to_mcp_error(error: Error) -> ErrorData {
    let data = Some(json!({"code": error.code()}));
    match &error {
        Error::NotFound(Missing::Tool | Missing::Prompt | Missing::Resource, _)
        | Error::InvalidArguments(_)
        | Error::Validation(_) => ErrorData::invalid_params(error.to_string(), data),
        _ => ErrorData::internal_error(error.to_string(), data),
    }
}

impl GatewayHandler {
    pub fn new(
        service: GatewayService,
        fixed: Option<GatewayPrincipal>,
        max_result_bytes: usize,
    ) -> Self {
        let session = CancellationToken::new();
        Self {
            service,
            fixed,
            max_result_bytes,
            _session_guard: Arc::new(session.clone().drop_guard()),
            session,
        }
    }

    fn principal(&self, extensions: &Extensions) -> Result<GatewayPrincipal, ErrorData> {
        if let Some(principal) = &self.fixed {
            return Ok(principal.clone());
        }
        extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<GatewayPrincipal>())
            .cloned()
            .ok_or_else(|| ErrorData::invalid_request("not authenticated", None))
    }
}

impl ServerHandler for GatewayHandler {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new(
            "mcp-pool gateway",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "The tools of one assistant's MCP servers, named {server}.{tool}. Some tools wait \
             for the user's approval before they run.",
        )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Ok(principal) = self.principal(&context.extensions) else {
            return;
        };
        let mut changes = self.service.pool_changes();
        let peer = context.peer;
        let ended = self.session.clone();
        tokio::spawn(async move {
            loop {
                let change = tokio::select! {
                    () = ended.cancelled() => break,
                    change = changes.recv() => change,
                };
                match change {
                    Ok(key) if key.user == principal.user => {
                        if peer.notify_tool_list_changed().await.is_err() {
                            break;
                        }
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
                if peer.is_transport_closed() {
                    break;
                }
            }
        });
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let tools = self.service.tools(&principal).await.map_err(to_mcp_error)?;
        Ok(ListToolsResult::with_all_items(tools.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let (live, mut progress) = tokio::sync::mpsc::unbounded_channel();
        let token = context.meta.get_progress_token();
        let cancel: CancellationToken = context.ct.clone();
        let call = self.service.call(
            &principal,
            &request.name,
            request.arguments,
            Some(&live),
            &cancel,
            self.max_result_bytes,
        );
        let relay = |update: crate::mcp::Progress| {
            let (peer, token) = (context.peer.clone(), token.clone());
            async move {
                if let Some(token) = token {
                    let mut param = ProgressNotificationParam::new(token, update.progress);
                    param.total = update.total;
                    param.message = update.message;
                    let _ = peer.notify_progress(param).await;
                }
            }
        };
        tokio::pin!(call);
        let result = loop {
            tokio::select! {
                biased;
                Some(update) = progress.recv() => relay(update).await,
                result = &mut call => break result,
            }
        };
        // Progress the upstream sent before its result goes out before the result too.
        while let Ok(update) = progress.try_recv() {
            relay(update).await;
        }
        match result {
            Ok(result) => Ok(result.into()),
            Err(error @ (Error::NotFound(..) | Error::InvalidArguments(_))) => {
                Err(to_mcp_error(error))
            }
            // The call was made and failed: the model should read why.
            Err(error) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "{}: {error}",
                error.code()
            ))])
            .into()),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let (resources, _) = self
            .service
            .resources(&principal)
            .await
            .map_err(to_mcp_error)?;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let (_, templates) = self
            .service
            .resources(&principal)
            .await
            .map_err(to_mcp_error)?;
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        self.service
            .read_resource(&principal, &request.uri)
            .await
            .map(Into::into)
            .map_err(to_mcp_error)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        let prompts = self
            .service
            .prompts(&principal)
            .await
            .map_err(to_mcp_error)?;
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        self.service
            .get_prompt(&principal, &request.name, request.arguments)
            .await
            .map(Into::into)
            .map_err(to_mcp_error)
    }
}
