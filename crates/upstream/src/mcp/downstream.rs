//! Who answers what a server asks back during a call (elicitation, sampling).
//!
//! One upstream session serves all of a user's callers, so a server's request must reach
//! the caller it relates to. Every tool call enters [`Callers`] for its duration, with the
//! [`Downstream`] that can answer for it (a gateway client, or the call's user); a server
//! request is answered by the only call in flight. When it cannot be tied to one call
//! (none or several in flight), the connection's own user is asked on their event stream,
//! never another user's caller. Nobody to ask (a global server, shared by every user) is
//! an error to the server, never a made-up answer: `decline` means only that a user
//! declined.

// Sampling is deprecated in 2026-07-28 but is what 2025-11-25 servers use.
#![allow(deprecated)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ListRootsResult,
};

/// A caller that can put a server's questions to its user (or model).
pub trait Downstream: Send + Sync {
    fn elicit(&self, params: ElicitRequestParams)
    -> BoxFuture<'_, Result<ElicitResult, ErrorData>>;
    fn sample(
        &self,
        params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorData>>;
    /// The caller's own roots; `None` when it has none to offer (the server's configured
    /// roots then answer).
    fn roots(&self) -> BoxFuture<'_, Option<Result<ListRootsResult, ErrorData>>> {
        Box::pin(async { None })
    }
}

/// One call in flight: its number, who can answer for it, and its caller's span (the
/// request id what the server says during it is logged under).
type InFlight = (u64, Option<Arc<dyn Downstream>>, tracing::Span);

/// The tool calls in flight on one connection.
#[derive(Default)]
pub struct Callers {
    next: AtomicU64,
    calls: Mutex<Vec<InFlight>>,
    /// The connection's user, for requests no single call answers; `None` for a server
    /// shared by all users.
    owner: Option<Arc<dyn Downstream>>,
    /// The span of the last call to leave when it left the connection without calls, and
    /// when: see [`Callers::only_call_span`].
    last_alone: Mutex<Option<(std::time::Instant, tracing::Span)>>,
}

/// How long after the only call ended what the server says is still taken to be its: rmcp
/// handles each notification in a task of its own, so one the server sent just before its
/// answer may run after the answer reached its caller.
const LATE_NOTICE: std::time::Duration = std::time::Duration::from_secs(1);

/// Leaves [`Callers`] when the call ends (answered, failed or abandoned).
pub struct CallerGuard {
    callers: Arc<Callers>,
    id: u64,
}

impl Drop for CallerGuard {
    fn drop(&mut self) {
        let mut calls = self.callers.calls.lock().expect("callers lock");
        let Some(at) = calls.iter().position(|(id, _, _)| *id == self.id) else {
            return;
        };
        let (_, _, span) = calls.remove(at);
        if calls.is_empty() {
            *self.callers.last_alone.lock().expect("callers lock") =
                Some((std::time::Instant::now(), span));
        }
    }
}

impl Callers {
    pub fn new(owner: Option<Arc<dyn Downstream>>) -> Self {
        Self {
            owner,
            ..Self::default()
        }
    }

    pub fn enter(self: &Arc<Self>, downstream: Option<Arc<dyn Downstream>>) -> CallerGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.calls
            .lock()
            .expect("callers lock")
            .push((id, downstream, tracing::Span::current()));
        CallerGuard {
            callers: self.clone(),
            id,
        }
    }

    /// The span of the only call in flight: what the server says meanwhile belongs to it.
    /// With none in flight, that of the call that was alone and ended less than
    /// [`LATE_NOTICE`] ago (what the server said before its answer, handled after it).
    pub(crate) fn only_call_span(&self) -> Option<tracing::Span> {
        match self.calls.lock().expect("callers lock").as_slice() {
            [(_, _, span)] => Some(span.clone()),
            [] => self
                .last_alone
                .lock()
                .expect("callers lock")
                .as_ref()
                .filter(|(left, _)| left.elapsed() < LATE_NOTICE)
                .map(|(_, span)| span.clone()),
            _ => None,
        }
    }

    /// Who a server's request goes to: the only call in flight, when it has someone to
    /// ask. With none or several in flight the request cannot be tied to a call, so the
    /// connection's user is asked rather than the wrong caller.
    pub fn answering(&self) -> Result<Arc<dyn Downstream>, ErrorData> {
        let calls = self.calls.lock().expect("callers lock");
        if let [(_, Some(downstream), _)] = calls.as_slice() {
            return Ok(downstream.clone());
        }
        self.owner.clone().ok_or_else(|| {
            let why = match calls.len() {
                0 => "no call is in flight on this connection",
                1 => "this call's client does not take requests from the server",
                _ => "several calls are in flight and the request names none",
            };
            ErrorData::invalid_request(
                format!("nobody can answer: {why}, and this server is shared by all users"),
                None,
            )
        })
    }
}
