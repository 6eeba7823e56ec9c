//! What operators read that no user route shows: one user's whole picture (assistants,
//! bindings, gateway tokens, open tool calls), the audit log, and the instances. The
//! console and the admin API both read it here.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{AuditTrail, UpstreamService};
use crate::cluster::{Cluster, InstanceInfo};
use crate::domain::{AssistantId, CallVia, McpServer, UserId};
use crate::error::{Error, Resource, Result};
use crate::pool::ConnectionInfo;
use crate::store::{AuditFilter, AuditRow, GatewayToken, Store, StoredMessage, WaitingCall};

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

/// One page of a list, and how many rows the list has in all.
pub struct Page<T> {
    pub rows: Vec<T>,
    pub page: u64,
    pub page_size: u64,
    pub total: u64,
    /// There are more rows than `total`: counting stopped at the store's `COUNT_CAP`.
    pub total_capped: bool,
}

/// A page of the audit log.
pub type AuditPage = Page<AuditRow>;

/// A user as the users list shows them.
pub struct UserSummary {
    pub user_id: String,
    pub servers: u64,
    /// Calls waiting for a decision or running.
    pub open_calls: u64,
}

/// A server of any user, with its connection on this instance if one is live.
pub struct ServerSummary {
    pub server: McpServer,
    pub connection: Option<ConnectionInfo>,
    /// What its private home holds on this instance, for a stdio server (`None` for the
    /// others, and for one that never ran here).
    pub home_bytes: Option<u64>,
}

/// Which page of a list, as a caller gives it.
#[derive(Default, Clone, Copy)]
pub struct Paging {
    pub page: Option<u64>,
    pub page_size: Option<u64>,
}

impl Paging {
    /// (page, page size), checked: pages of 1 to [`MAX_AUDIT_PAGE`] rows (50 by default).
    pub(crate) fn checked(self) -> Result<(u64, u64)> {
        let page_size = self.page_size.unwrap_or(50);
        if !(1..=MAX_AUDIT_PAGE).contains(&page_size) {
            return Err(Error::validation(format!(
                "pageSize must be between 1 and {MAX_AUDIT_PAGE}"
            )));
        }
        let page = self.page.unwrap_or(0);
        if page > 1_000_000 {
            return Err(Error::validation("page is too large"));
        }
        Ok((page, page_size))
    }
}

/// A search term: trimmed, none when empty, at most 128 characters.
pub(crate) fn search_term(search: Option<String>) -> Result<Option<String>> {
    let Some(search) = search
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
    else {
        return Ok(None);
    };
    if search.chars().count() > 128 {
        return Err(Error::validation("search must be at most 128 characters"));
    }
    Ok(Some(search))
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

/// What a connection's state may be, for the servers list's filter.
const CONNECTION_STATES: [&str; 5] = [
    "connected",
    "connecting",
    "disconnected",
    "error",
    "auth_required",
];

/// At most this many servers are matched by a state (an SQL list of ids).
const MAX_STATE_MATCHES: usize = 10_000;

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
const OUTCOMES: [&str; 8] = [
    "done",
    "error",
    "cancelled",
    "approved",
    "rejected",
    "server_changed",
    "server_deleted",
    "connect_failed",
];

#[derive(Clone)]
pub struct OperatorService {
    store: Store,
    cluster: Cluster,
    audit: AuditTrail,
    /// Live connections, for the servers list.
    upstream: UpstreamService,
}

impl OperatorService {
    pub fn new(
        store: Store,
        cluster: Cluster,
        audit: AuditTrail,
        upstream: UpstreamService,
    ) -> Self {
        Self {
            store,
            cluster,
            audit,
            upstream,
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
        self.audit.flush_for_reader().await;
    }

    /// Users with servers whose id holds `search`, by id, with their counts.
    pub async fn users(&self, search: Option<String>, paging: Paging) -> Result<Page<UserSummary>> {
        let (page, page_size) = paging.checked()?;
        let search = search_term(search)?;
        let (users, total) = self
            .store
            .servers()
            .users(search.as_deref(), page * page_size, page_size)
            .await?;
        let ids: Vec<String> = users.iter().map(|(user, _)| user.clone()).collect();
        let open = self.store.messages().open_calls_of(&ids).await?;
        let rows = users
            .into_iter()
            .map(|(user_id, servers)| UserSummary {
                open_calls: open.get(&user_id).copied().unwrap_or(0),
                user_id,
                servers,
            })
            .collect();
        Ok(Page {
            rows,
            page,
            page_size,
            total: total.total,
            total_capped: total.capped,
        })
    }

    /// Every user's servers whose name, user or URL holds `search`, by user then name;
    /// with `state`, only those whose connection on this instance is in that state.
    pub async fn servers(
        &self,
        search: Option<String>,
        state: Option<String>,
        paging: Paging,
    ) -> Result<Page<ServerSummary>> {
        let (page, page_size) = paging.checked()?;
        let search = search_term(search)?;
        let only: Option<Vec<Uuid>> = match state.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(state) => {
                if !CONNECTION_STATES.contains(&state) {
                    return Err(Error::validation(format!(
                        "state must be one of {}",
                        CONNECTION_STATES.join(", ")
                    )));
                }
                let mut ids: Vec<Uuid> = self
                    .upstream
                    .connections()
                    .into_iter()
                    // The connection each row shows: the user's shared one.
                    .filter(|c| c.key.scope.is_none() && c.status.state.as_str() == state)
                    .map(|c| c.key.server)
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                // A list, not a report: the first ones by id are enough to act on.
                ids.truncate(MAX_STATE_MATCHES);
                Some(ids)
            }
        };
        let (servers, total) = self
            .store
            .servers()
            .browse(
                search.as_deref(),
                only.as_deref(),
                page * page_size,
                page_size,
            )
            .await?;
        let homes: Vec<Option<std::path::PathBuf>> = servers
            .iter()
            .map(|server| {
                matches!(server.spec.transport, crate::domain::Transport::Stdio(_))
                    .then(|| self.upstream.home_of(server))
            })
            .collect();
        let sizes = tokio::task::spawn_blocking(move || {
            homes
                .into_iter()
                .map(|home| home.and_then(|home| super::upstream::home_bytes(&home)))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let rows = servers
            .into_iter()
            .enumerate()
            .map(|(n, server)| ServerSummary {
                connection: self.upstream.connection_of(&server.user_id, server.id),
                home_bytes: sizes.get(n).copied().flatten(),
                server,
            })
            .collect();
        Ok(Page {
            rows,
            page,
            page_size,
            total: total.total,
            total_capped: total.capped,
        })
    }

    /// Calls waiting for a decision across every user, oldest first.
    pub async fn approvals(&self, paging: Paging) -> Result<Page<WaitingCall>> {
        let (page, page_size) = paging.checked()?;
        let (rows, total) = self
            .store
            .messages()
            .waiting_calls(page * page_size, page_size)
            .await?;
        Ok(Page {
            rows,
            page,
            page_size,
            total,
            total_capped: false,
        })
    }

    pub async fn audit(&self, query: AuditQuery) -> Result<AuditPage> {
        self.audit_flushed().await;
        let (page, page_size) = Paging {
            page: query.page,
            page_size: query.page_size,
        }
        .checked()?;
        let filter = audit_filter(query)?;
        let (rows, total) = self.store.audit().page(&filter, page, page_size).await?;
        Ok(AuditPage {
            rows,
            page,
            page_size,
            total: total.total,
            total_capped: total.capped,
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
