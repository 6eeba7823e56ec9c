//! `tools/call` through the gateway: progress relayed as it comes, the client's
//! cancellation passed on, rounds for clients without server-to-client requests, and an
//! authorization the upstream needs asked for by URL elicitation.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    ProgressNotificationParam,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::downstream::PeerDownstream;
use super::rounds::Rounds;
use super::{GatewayHandler, relayed_round, speaks_modern, to_mcp_error};
use crate::error::Error;
use crate::mcp::McpError;
use crate::mcp::downstream::Downstream;
use crate::pool::PoolError;
use crate::services::{Caller, GatewayPrincipal};

/// `URLElicitationRequiredError` (MCP 2025-11-25).
const URL_ELICITATION_REQUIRED: i32 = -32042;

fn declares_url_elicitation(peer: &rmcp::Peer<RoleServer>) -> bool {
    peer.peer_info().is_some_and(|info| {
        info.capabilities
            .elicitation
            .as_ref()
            .is_some_and(|elicitation| elicitation.url.is_some())
    })
}

/// A call's outcome as the client gets it: a missing tool or bad arguments are protocol
/// errors; a call that was made and failed is a result the model should read.
pub(super) fn call_outcome(
    result: Result<CallToolResponse, Error>,
) -> Result<CallToolResponse, ErrorData> {
    match result {
        Ok(response) => Ok(response),
        Err(
            error @ (Error::NotFound(..)
            | Error::InvalidArguments(_)
            | Error::Pool(PoolError::Upstream(McpError::Remote { .. }))),
        ) => Err(to_mcp_error(error)),
        Err(error) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
            "{}: {error}",
            error.code()
        ))])
        .into()),
    }
}

/// An upstream's progress, to the client under the token its request gave (none: none).
async fn relay_progress(
    peer: &rmcp::Peer<RoleServer>,
    token: Option<rmcp::model::ProgressToken>,
    update: crate::mcp::Progress,
) {
    if let Some(token) = token {
        let mut param = ProgressNotificationParam::new(token, update.progress);
        param.total = update.total;
        param.message = update.message;
        let _ = peer.notify_progress(param).await;
    }
}

impl GatewayHandler {
    /// A call of a client without server-to-client requests (2026-07-28) that can answer
    /// what the upstream asks: in rounds. `None` for other clients.
    async fn call_in_rounds(
        &self,
        principal: &GatewayPrincipal,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Option<Result<CallToolResponse, ErrorData>> {
        if !speaks_modern(context) {
            return None;
        }
        if let Some(state) = &request.request_state
            && Rounds::made_here(state)
        {
            let responses = request.input_responses.clone();
            return Some(self.rounds.resume(&principal.user, state, responses).await);
        }
        let answers = context
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some() || c.sampling.is_some() || c.roots.is_some());
        if !answers {
            return None;
        }
        let (service, principal_owned) = (self.service.clone(), principal.clone());
        let (name, arguments) = (request.name.to_string(), request.arguments.clone());
        let app = super::app_view(request, context);
        let relayed = relayed_round(
            request.input_responses.clone(),
            request.request_state.clone(),
            context,
        );
        let max_result_bytes = self.max_result_bytes;
        // Progress during the first round goes out on this request's stream; a resumed
        // round's request has none to give it (what comes then is dropped).
        let (live, mut progress) = tokio::sync::mpsc::unbounded_channel();
        let start = self
            .rounds
            .start(&principal.user, move |downstream, cancel| {
                Box::pin(async move {
                    let caller = Caller {
                        live: Some(&live),
                        downstream: Some(downstream),
                        scope: None,
                        relayed,
                        timeout: None,
                        origin: principal_owned.origin(),
                        without_tasks: true,
                        became_task: None,
                        task: None,
                        decided: None,
                    };
                    let result = service
                        .call(
                            &principal_owned,
                            &name,
                            arguments,
                            caller,
                            &cancel,
                            max_result_bytes,
                            app.as_deref(),
                        )
                        .await;
                    call_outcome(result)
                })
            });
        tokio::pin!(start);
        let token = context.meta.get_progress_token();
        let response = loop {
            tokio::select! {
                biased;
                Some(update) = progress.recv() => relay_progress(&context.peer, token.clone(), update).await,
                response = &mut start => break response,
            }
        };
        while let Ok(update) = progress.try_recv() {
            relay_progress(&context.peer, token.clone(), update).await;
        }
        Some(response)
    }

    /// `tools/call`, boxed by [`ServerHandler::call_tool`]: the largest of the handler's
    /// futures, so rmcp's request future (copied on its way into a task) stays small.
    ///
    /// [`ServerHandler::call_tool`]: rmcp::ServerHandler::call_tool
    pub(super) async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let principal = self.principal(&context.extensions)?;
        if let Some(answer) = Box::pin(self.call_in_rounds(&principal, &request, &context)).await {
            return answer;
        }
        let (live, mut progress) = tokio::sync::mpsc::unbounded_channel();
        let token = context.meta.get_progress_token();
        let cancel: CancellationToken = context.ct.clone();
        let downstream: Arc<dyn Downstream> = Arc::new(PeerDownstream(context.peer.clone()));
        let relayed = relayed_round(
            request.input_responses.clone(),
            request.request_state.clone(),
            &context,
        );
        let app = super::app_view(&request, &context);
        let mut call = Box::pin(self.service.call(
            &principal,
            &request.name,
            request.arguments,
            Caller {
                live: Some(&live),
                downstream: Some(downstream),
                scope: Some(self.session_scope(&principal)),
                relayed,
                timeout: None,
                origin: principal.origin(),
                without_tasks: true,
                became_task: None,
                task: None,
                decided: None,
            },
            &cancel,
            self.max_result_bytes,
            app.as_deref(),
        ));
        let relay = |update| relay_progress(&context.peer, token.clone(), update);
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
            Ok(response) => Ok(response),
            Err(error @ (Error::NotFound(..) | Error::InvalidArguments(_))) => {
                Err(to_mcp_error(error))
            }
            // 2025-11-25: a client that handles URL-mode elicitation is asked to send its
            // user to the authorization URL, then retry.
            Err(Error::AuthRequired {
                authorization_url: Some(url),
                server_id,
                insufficient_scope,
                expires_at,
            }) if declares_url_elicitation(&context.peer) => {
                let error = Error::AuthRequired {
                    authorization_url: Some(url.clone()),
                    server_id,
                    insufficient_scope,
                    expires_at,
                };
                Err(ErrorData::new(
                    rmcp::model::ErrorCode(URL_ELICITATION_REQUIRED),
                    error.to_string(),
                    Some(json!({
                        "code": error.code(),
                        "elicitations": [{
                            "mode": "url",
                            "elicitationId": uuid::Uuid::new_v4().to_string(),
                            "url": url,
                            "message": "Authorize this MCP server to continue.",
                        }],
                    })),
                ))
            }
            other => call_outcome(other),
        }
    }

    /// The scope of this session's calls; the first one arranges for its upstream
    /// sessions to end with it.
    fn session_scope(&self, principal: &GatewayPrincipal) -> &str {
        if self.scope_owner.set(principal.user.clone()).is_ok() {
            let (service, user, scope) = (
                self.service.clone(),
                principal.user.clone(),
                self.scope.clone(),
            );
            let ended = self.session.clone();
            tokio::spawn(async move {
                ended.cancelled().await;
                service.end_scope(&user, &scope).await;
            });
        }
        &self.scope
    }
}
