//! What operators read that no user route shows: one user's whole picture (assistants,
//! bindings, gateway tokens, open tool calls), the audit log, and the instances. The
//! console and the admin API both read it here.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::cluster::{Cluster, InstanceInfo};
use crate::domain::{AssistantId, UserId};
use crate::error::{Error, Result};
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
    pub tool: Option<String>,
    pub outcome: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub page: Option<u64>,
    pub page_size: Option<u64>,
}

/// What an audit row's `outcome` may be.
const OUTCOMES: [&str; 5] = ["done", "error", "cancelled", "approved", "rejected"];

#[derive(Clone)]
pub struct OperatorService {
    store: Store,
    cluster: Cluster,
}

impl OperatorService {
    pub fn new(store: Store, cluster: Cluster) -> Self {
        Self { store, cluster }
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

    pub async fn audit(&self, query: AuditQuery) -> Result<AuditPage> {
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
        let server_id = match query.server_id.as_deref() {
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
        if let (Some(from), Some(to)) = (query.from, query.to)
            && from > to
        {
            return Err(Error::validation("from must not be after to"));
        }
        let filter = AuditFilter {
            user_id: query.user_id.filter(|u| !u.is_empty()),
            server_id,
            tool_name: query.tool.filter(|t| !t.is_empty()),
            outcome: query.outcome,
            from: query.from,
            to: query.to,
        };
        let (rows, total) = self.store.audit().page(&filter, page, page_size).await?;
        Ok(AuditPage {
            rows,
            page,
            page_size,
            total,
        })
    }

    pub async fn instances(&self) -> Result<Vec<InstanceInfo>> {
        Ok(self.cluster.instances().await?)
    }
}
