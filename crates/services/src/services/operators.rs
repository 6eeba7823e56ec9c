//! What operators read that no user route shows: one user's whole picture (assistants,
//! bindings, gateway tokens, open tool calls), the audit log, and the instances. The
//! console and the admin API both read it here.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::AuditTrail;
use crate::cluster::{Cluster, InstanceInfo};
use crate::domain::{AssistantId, CallVia, UserId};
use crate::error::{Error, Resource, Result};
use crate::store::{AuditFilter, AuditRow, GatewayToken, Store, StoredMessage};

/// The most messages with open calls shown for one user.
const OPEN_MESSAGES_SHOWN: u64 = 100;
/// The largest page of the audit log.
pub(crate) const MAX_AUDIT_PAGE: u64 = 200;

pub struct AssistantOverview {
    pub id: AssistantId,
    /// Bound servers, in order.
    pub servers: Vec<Uuid>,
    pub gateway_tokens: Vec<GatewayToken>,
}

pub struct UserOverview {
    pub assistants: Vec<AssistantOverview>,
    /// Newest first, at most [`OPEN_MESSAGES_SHOWN`].
    pub open_messages: Vec<StoredMessage>,
}

/// A page of the audit log.
pub struct AuditPage {
    pub rows: Vec<AuditRow>,
    pub page: u64,
    pub page_size: u64,
    pub total: u64,
}

/// The audit log's filters as a caller gives them (strings from a query).
#[derive(Default)]
pub struct AuditQuery {
    pub user_id: Option<String>,
    pub server_id: Option<String>,
    /// The server's name.
    pub server: Option<String>,
    pub via: Option<String>,
    pub tool: Option<String>,
    pub outcome: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub page: Option<u64>,
    pub page_size: Option<u64>,
}

/// Rows per page of an export.
const EXPORT_PAGE: u64 = 1000;

/// The store's filter for `query`, checked.
fn audit_filter(query: AuditQuery) -> Result<AuditFilter> {
    let server_id = match query.server_id.as_deref().filter(|s| !s.is_empty()) {
        Some(raw) => Some(
            Uuid::parse_str(raw)
                .map_err(|_| Error::validation("serverId must be a server's id (a UUID)"))?,
        ),
        None => None,
    };
    if let Some(outcome) = query.outcome.as_deref()
        && !OUTCOMES.contains(&outcome)
    {
        return Err(Error::validation(format!(
            "outcome must be one of {}",
            OUTCOMES.join(", ")
        )));
    }
    if let Some(via) = query.via.as_deref()
        && CallVia::parse(via).is_none()
    {
        return Err(Error::validation(
            "via must be one of rest, chat, gateway, xiaozhi, grpc",
        ));
    }
    if let (Some(from), Some(to)) = (query.from, query.to)
        && from > to
    {
        return Err(Error::validation("from must not be after to"));
    }
    let given = |value: Option<String>| value.filter(|v| !v.is_empty());
    Ok(AuditFilter {
        user_id: given(query.user_id),
        server_id,
        server_name: given(query.server),
        tool_name: given(query.tool),
        outcome: query.outcome,
        via: query.via,
        from: query.from,
        to: query.to,
    })
}

/// What an audit row's `outcome` may be.
const OUTCOMES: [&str; 5] = ["done", "error", "cancelled", "approved", "rejected"];

#[derive(Clone)]
pub struct OperatorService {
    store: Store,
    cluster: Cluster,
    audit: AuditTrail,
}

impl OperatorService {
    pub fn new(store: Store, cluster: Cluster, audit: AuditTrail) -> Self {
        Self {
            store,
            cluster,
            audit,
        }
    }

    pub async fn user_overview(&self, user: &UserId) -> Result<UserOverview> {
        let bindings = self.store.assistants().bindings_of_user(user).await?;
        let tokens = self.store.gateway().tokens_of_user(user).await?;
        // An assistant is known by its bindings or its tokens.
        let mut assistants: BTreeMap<String, AssistantOverview> = BTreeMap::new();
        for (id, servers) in bindings {
            assistants.insert(
                id.as_str().to_owned(),
                AssistantOverview {
                    id,
                    servers,
                    gateway_tokens: Vec::new(),
                },
            );
        }
        for token in tokens {
            assistants
                .entry(token.assistant_id.as_str().to_owned())
                .or_insert_with(|| AssistantOverview {
                    id: token.assistant_id.clone(),
                    servers: Vec::new(),
                    gateway_tokens: Vec::new(),
                })
                .gateway_tokens
                .push(token);
        }
        let open_messages = self
            .store
            .messages()
            .with_open_calls(user, OPEN_MESSAGES_SHOWN)
            .await?;
        Ok(UserOverview {
            assistants: assistants.into_values().collect(),
            open_messages,
        })
    }

    /// Rows this instance has taken reach the database before a read: an operator sees
    /// every call this instance answered (others' within `audit.flush_ms`).
    async fn audit_flushed(&self) {
        if let Err(error) = self.audit.flush().await {
            tracing::warn!(%error, "the audit log is read without this instance's newest rows");
        }
    }

    pub async fn audit(&self, query: AuditQuery) -> Result<AuditPage> {
        self.audit_flushed().await;
        let page_size = query.page_size.unwrap_or(50);
        if !(1..=MAX_AUDIT_PAGE).contains(&page_size) {
            return Err(Error::validation(format!(
                "pageSize must be between 1 and {MAX_AUDIT_PAGE}"
            )));
        }
        let page = query.page.unwrap_or(0);
        if page > 1_000_000 {
            return Err(Error::validation("page is too large"));
        }
        let filter = audit_filter(query)?;
        let (rows, total) = self.store.audit().page(&filter, page, page_size).await?;
        Ok(AuditPage {
            rows,
            page,
            page_size,
            total,
        })
    }

    /// One audit row with what it kept of the call's arguments and result.
    pub async fn audit_row(&self, id: &str) -> Result<AuditRow> {
        self.audit_flushed().await;
        let missing = || Error::NotFound(Resource::AuditRow, id.to_owned());
        let id = Uuid::parse_str(id).map_err(|_| missing())?;
        self.store.audit().get(id).await?.ok_or_else(missing)
    }

    /// Every row `query` keeps, newest first, a page at a time (an export): each page a
    /// seek on an index, so the thousandth page costs what the first does.
    pub async fn audit_export(
        &self,
        query: AuditQuery,
    ) -> Result<impl futures::Stream<Item = Result<Vec<AuditRow>>> + Send + 'static> {
        let filter = audit_filter(query)?;
        self.audit_flushed().await;
        let audit = self.store.audit();
        Ok(futures::stream::try_unfold(
            (audit, filter, None, false),
            |(audit, filter, after, done)| async move {
                if done {
                    return Ok(None);
                }
                let rows = audit.after(&filter, after, EXPORT_PAGE).await?;
                let done = (rows.len() as u64) < EXPORT_PAGE;
                if rows.is_empty() {
                    return Ok(None);
                }
                let last = rows.last().map(|row| (row.created_at, row.id));
                Ok(Some((rows, (audit, filter, last, done))))
            },
        ))
    }

    pub async fn instances(&self) -> Result<Vec<InstanceInfo>> {
        Ok(self.cluster.instances().await?)
    }
}
