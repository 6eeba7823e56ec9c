//! The gateway's client as the downstream of a call: what a server behind asks
//! (elicitation, sampling, roots) is put to the client, only if it declared it answers.

use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
};
use rmcp::{ErrorData, RoleServer};

use crate::mcp::downstream::Downstream;

/// The gateway client of a call, asked what the server behind asks (elicitation,
/// sampling) when it declared it can answer.
pub(super) struct PeerDownstream(pub(super) rmcp::Peer<RoleServer>);

pub(super) fn not_declared(what: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!("the client that made this call does not handle {what}"),
        None,
    )
}

fn peer_error(error: rmcp::service::ServiceError) -> ErrorData {
    match error {
        rmcp::service::ServiceError::McpError(error) => error,
        other => ErrorData::internal_error(format!("asking the client failed: {other}"), None),
    }
}

impl Downstream for PeerDownstream {
    fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> futures::future::BoxFuture<'_, Result<ElicitResult, ErrorData>> {
        Box::pin(async move {
            let url = matches!(params, ElicitRequestParams::UrlElicitationParams { .. });
            let declared = self.0.peer_info().is_some_and(|info| {
                info.capabilities.elicitation.as_ref().is_some_and(|e| {
                    if url {
                        e.url.is_some()
                    } else {
                        // A client that declares `elicitation: {}` handles forms (2025-06-18).
                        e.form.is_some() || e.url.is_none()
                    }
                })
            });
            if !declared {
                return Err(not_declared("elicitation"));
            }
            self.0.create_elicitation(params).await.map_err(peer_error)
        })
    }

    fn sample(
        &self,
        params: CreateMessageRequestParams,
    ) -> futures::future::BoxFuture<'_, Result<CreateMessageResult, ErrorData>> {
        Box::pin(async move {
            if self
                .0
                .peer_info()
                .is_none_or(|info| info.capabilities.sampling.is_none())
            {
                return Err(not_declared("sampling"));
            }
            self.0.create_message(params).await.map_err(peer_error)
        })
    }

    fn roots(
        &self,
    ) -> futures::future::BoxFuture<'_, Option<Result<rmcp::model::ListRootsResult, ErrorData>>>
    {
        Box::pin(async move {
            let declared = self
                .0
                .peer_info()
                .is_some_and(|info| info.capabilities.roots.is_some());
            if !declared {
                return None;
            }
            Some(self.0.list_roots().await.map_err(peer_error))
        })
    }
}
