//! The `mcp_servers` table, always filtered by user.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QueryTrait, TransactionTrait,
};
use uuid::Uuid;

use super::entities::{assistant_server, mcp_server, user_attribute};
use super::{
    Counted, Db, StoreError, contains, corrupt, count_capped, from_json, open_map, seal_map,
};
use crate::domain::{
    CatalogUse, EmbeddedKind, McpServer, RemoteEndpoint, SecretUrl, ServerName, ServerSpec,
    SessionScope, StdioLaunch, Transport, TransportKind, UserId,
};
use crate::security::Cipher;

#[derive(Debug, Clone)]
pub struct ServerRepo {
    db: Db,
    cipher: Arc<Cipher>,
}

impl ServerRepo {
    pub(super) fn new(db: Db, cipher: Arc<Cipher>) -> Self {
        Self { db, cipher }
    }

    pub async fn list(&self, user: &UserId) -> Result<Vec<McpServer>, StoreError> {
        mcp_server::Entity::find()
            .filter(mcp_server::Column::UserId.eq(user.as_str()))
            .order_by_asc(mcp_server::Column::CreatedAt)
            .order_by_asc(mcp_server::Column::Id)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| self.to_domain(row))
            .collect()
    }

    pub async fn get(&self, user: &UserId, id: Uuid) -> Result<Option<McpServer>, StoreError> {
        mcp_server::Entity::find_by_id(id)
            .filter(mcp_server::Column::UserId.eq(user.as_str()))
            .one(self.db.reader()?)
            .await?
            .map(|row| self.to_domain(row))
            .transpose()
    }

    /// The owners whose servers `user` may use: themself, and the team owner of each of
    /// their groups.
    async fn owners_for(&self, user: &UserId) -> Result<Vec<String>, StoreError> {
        let mut owners = vec![user.as_str().to_owned()];
        if let Some(row) = user_attribute::Entity::find_by_id(user.as_str().to_owned())
            .one(self.db.reader()?)
            .await?
        {
            let groups: Vec<String> = from_json("groups", row.groups)?;
            owners.extend(
                groups
                    .iter()
                    .map(|g| UserId::of_team(g).as_str().to_owned()),
            );
        }
        Ok(owners)
    }

    /// A server `user` may use: their own, or a team server of one of their groups, then
    /// with `user_id` the user (their connection, their tokens).
    pub async fn usable(&self, user: &UserId, id: Uuid) -> Result<Option<McpServer>, StoreError> {
        if let Some(own) = self.get(user, id).await? {
            return Ok(Some(own));
        }
        let owners = self.owners_for(user).await?;
        if owners.len() == 1 {
            return Ok(None);
        }
        let Some(row) = mcp_server::Entity::find_by_id(id)
            .filter(mcp_server::Column::UserId.is_in(owners))
            .one(self.db.reader()?)
            .await?
        else {
            return Ok(None);
        };
        let mut server = self.to_domain(row)?;
        server.user_id = user.clone();
        Ok(Some(server))
    }

    /// The team servers of `user`'s groups, as [`Self::usable`] gives them.
    pub async fn team_servers_of(&self, user: &UserId) -> Result<Vec<McpServer>, StoreError> {
        let mut owners = self.owners_for(user).await?;
        owners.remove(0);
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        mcp_server::Entity::find()
            .filter(mcp_server::Column::UserId.is_in(owners))
            .order_by_asc(mcp_server::Column::CreatedAt)
            .order_by_asc(mcp_server::Column::Id)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| {
                let mut server = self.to_domain(row)?;
                server.user_id = user.clone();
                Ok(server)
            })
            .collect()
    }

    /// Users with servers, by id, whose id holds `search` (any case), with how many servers
    /// each has; and how many such users there are in all.
    pub async fn users(
        &self,
        search: Option<&str>,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<(String, u64)>, Counted), StoreError> {
        use sea_orm::QuerySelect;
        use sea_orm::sea_query::ExprTrait;
        // Team servers' owners (`*team:<group>`) are not users.
        let mut condition = Condition::all().add(mcp_server::Column::UserId.not_like("*%"));
        if let Some(search) = search {
            condition = condition.add(contains(mcp_server::Column::UserId, search));
        }
        // DISTINCT in a subquery, not COUNT(DISTINCT …): PostgreSQL walks the
        // (user_id, name) index and stops at the cap instead of sorting every row.
        let total = count_capped(
            self.db.reader()?,
            mcp_server::Entity::find()
                .select_only()
                .column(mcp_server::Column::UserId)
                .distinct()
                .filter(condition.clone())
                .into_query(),
        )
        .await?;
        let rows: Vec<(String, i64)> = mcp_server::Entity::find()
            .select_only()
            .column(mcp_server::Column::UserId)
            .column_as(Expr::col(mcp_server::Column::Id).count(), "servers")
            .filter(condition)
            .group_by(mcp_server::Column::UserId)
            .order_by_asc(mcp_server::Column::UserId)
            .offset(offset)
            .limit(limit)
            .into_tuple()
            .all(self.db.reader()?)
            .await?;
        Ok((
            rows.into_iter()
                .map(|(user, servers)| (user, u64::try_from(servers).unwrap_or(0)))
                .collect(),
            total,
        ))
    }

    /// Every user's servers whose name, user id or URL (as stored, credentials masked)
    /// holds `search` (any case), by user then name; and how many there are in all.
    /// With `only`, just those servers.
    pub async fn browse(
        &self,
        search: Option<&str>,
        only: Option<&[Uuid]>,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<McpServer>, Counted), StoreError> {
        use sea_orm::QuerySelect;
        let mut condition = Condition::all();
        if let Some(only) = only {
            condition = condition.add(mcp_server::Column::Id.is_in(only.iter().copied()));
        }
        if let Some(search) = search {
            condition = condition.add(
                Condition::any()
                    .add(contains(mcp_server::Column::Name, search))
                    .add(contains(mcp_server::Column::UserId, search))
                    .add(contains(mcp_server::Column::BaseUrl, search)),
            );
        }
        let query = mcp_server::Entity::find().filter(condition);
        let total = count_capped(
            self.db.reader()?,
            query
                .clone()
                .select_only()
                .column(mcp_server::Column::Id)
                .into_query(),
        )
        .await?;
        let servers = query
            .order_by_asc(mcp_server::Column::UserId)
            .order_by_asc(mcp_server::Column::Name)
            .offset(offset)
            .limit(limit)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| self.to_domain(row))
            .collect::<Result<_, _>>()?;
        Ok((servers, total))
    }

    pub async fn count(&self, user: &UserId) -> Result<u64, StoreError> {
        Ok(mcp_server::Entity::find()
            .filter(mcp_server::Column::UserId.eq(user.as_str()))
            .count(self.db.reader()?)
            .await?)
    }

    pub async fn count_using_preset(&self, preset: &str) -> Result<u64, StoreError> {
        Ok(mcp_server::Entity::find()
            .filter(mcp_server::Column::Preset.eq(preset))
            .count(self.db.reader()?)
            .await?)
    }

    /// The servers made from a catalog entry, oldest first, a page at a time, and how many
    /// there are.
    pub async fn using_catalog_entry(
        &self,
        entry: &str,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<McpServer>, u64), StoreError> {
        use sea_orm::QuerySelect;
        let query = mcp_server::Entity::find().filter(mcp_server::Column::CatalogEntry.eq(entry));
        let total = query.clone().count(self.db.reader()?).await?;
        let servers = query
            .order_by_asc(mcp_server::Column::CreatedAt)
            .order_by_asc(mcp_server::Column::Id)
            .offset(offset)
            .limit(limit)
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| self.to_domain(row))
            .collect::<Result<_, _>>()?;
        Ok((servers, total))
    }

    /// How many servers each catalog entry has (entries with none are absent).
    pub async fn count_by_catalog_entry(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        use sea_orm::{FromQueryResult, QuerySelect};
        #[derive(FromQueryResult)]
        struct Row {
            catalog_entry: Option<String>,
            servers: i64,
        }
        let rows = mcp_server::Entity::find()
            .select_only()
            .column(mcp_server::Column::CatalogEntry)
            .column_as(mcp_server::Column::Id.count(), "servers")
            .filter(mcp_server::Column::CatalogEntry.is_not_null())
            .group_by(mcp_server::Column::CatalogEntry)
            .into_model::<Row>()
            .all(self.db.reader()?)
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| r.catalog_entry.map(|e| (e, r.servers.max(0) as u64)))
            .collect())
    }

    /// Which of `ids` `user` may use (their own, and their groups' team servers).
    pub async fn usable_ids(
        &self,
        user: &UserId,
        ids: &[Uuid],
    ) -> Result<HashSet<Uuid>, StoreError> {
        if ids.is_empty() {
            return Ok(HashSet::new());
        }
        let owners = self.owners_for(user).await?;
        Ok(mcp_server::Entity::find()
            .filter(mcp_server::Column::UserId.is_in(owners))
            .filter(mcp_server::Column::Id.is_in(ids.iter().copied()))
            .all(self.db.reader()?)
            .await?
            .into_iter()
            .map(|row| row.id)
            .collect())
    }

    pub async fn insert(&self, server: &McpServer) -> Result<(), StoreError> {
        mcp_server::Entity::insert(self.to_row(server))
            .exec_without_returning(self.db.writer()?)
            .await?;
        Ok(())
    }

    /// Replaces the stored definition; `false` when the row is gone.
    pub async fn update(&self, server: &McpServer) -> Result<bool, StoreError> {
        let result = mcp_server::Entity::update_many()
            .set(self.to_row(server))
            .filter(mcp_server::Column::Id.eq(server.id))
            .filter(mcp_server::Column::UserId.eq(server.user_id.as_str()))
            .exec(self.db.writer()?)
            .await?;
        Ok(result.rows_affected == 1)
    }

    /// Deletes the server and its assistant bindings together; `false` when not found.
    pub async fn delete(&self, user: &UserId, id: Uuid) -> Result<bool, StoreError> {
        let txn = self.db.writer()?.begin().await?;
        let deleted = mcp_server::Entity::delete_many()
            .filter(mcp_server::Column::Id.eq(id))
            .filter(mcp_server::Column::UserId.eq(user.as_str()))
            .exec(&txn)
            .await?
            .rows_affected;
        if deleted == 1 {
            assistant_server::Entity::delete_many()
                .filter(assistant_server::Column::McpServerId.eq(id))
                .exec(&txn)
                .await?;
        }
        txn.commit().await?;
        Ok(deleted == 1)
    }

    /// Seals the credentials of URLs stored in clear (rows written before URLs were
    /// sealed): `base_url` becomes the masked URL, `base_url_sealed` the whole one.
    /// Idempotent; a row another instance sealed meanwhile is left alone.
    pub async fn seal_clear_urls(&self) -> Result<u64, StoreError> {
        let rows = mcp_server::Entity::find()
            .filter(mcp_server::Column::BaseUrlSealed.is_null())
            .filter(
                Condition::any()
                    .add(mcp_server::Column::BaseUrl.contains("@"))
                    .add(mcp_server::Column::BaseUrl.contains("?")),
            )
            .all(self.db.reader()?)
            .await?;
        let mut sealed = 0;
        for row in rows {
            // A URL that does not parse holds nothing to seal; reading the row reports it.
            let Ok(url) = self.open_url(row.base_url.as_deref(), None) else {
                continue;
            };
            if !url.has_secrets() {
                continue;
            }
            sealed += mcp_server::Entity::update_many()
                .col_expr(mcp_server::Column::BaseUrl, Expr::value(url.masked()))
                .col_expr(
                    mcp_server::Column::BaseUrlSealed,
                    Expr::value(seal_url(&self.cipher, &url)),
                )
                .filter(mcp_server::Column::Id.eq(row.id))
                .filter(mcp_server::Column::BaseUrlSealed.is_null())
                .exec(self.db.writer()?)
                .await?
                .rows_affected;
        }
        Ok(sealed)
    }

    /// The URL of a remote server: the sealed one when there is one, else the plain column.
    fn open_url(
        &self,
        base_url: Option<&str>,
        sealed: Option<&str>,
    ) -> Result<SecretUrl, StoreError> {
        let clear = match sealed {
            Some(sealed) => self
                .cipher
                .open(sealed)
                .map_err(|e| corrupt("base_url_sealed", e))?,
            None => base_url
                .ok_or_else(|| corrupt("base_url", "missing"))?
                .to_owned(),
        };
        let url = clear.parse().map_err(|e| corrupt("base_url", e))?;
        Ok(SecretUrl::new(url))
    }

    fn to_row(&self, server: &McpServer) -> mcp_server::ActiveModel {
        let spec = &server.spec;
        let (base_url, base_url_sealed, headers) = match spec.transport.remote() {
            Some(endpoint) => (
                Some(endpoint.url.masked()),
                seal_url(&self.cipher, &endpoint.url),
                seal_map(&self.cipher, &endpoint.headers),
            ),
            None => (None, None, None),
        };
        let stdio = spec.transport.stdio();
        mcp_server::ActiveModel {
            id: Set(server.id),
            user_id: Set(server.user_id.as_str().to_owned()),
            name: Set(spec.name.as_str().to_owned()),
            transport: Set(spec.transport.kind().as_str().to_owned()),
            is_active: Set(spec.is_active),
            base_url: Set(base_url),
            base_url_sealed: Set(base_url_sealed),
            headers: Set(headers),
            timeout_secs: Set(spec.timeout_secs.map(|t| t as i32)),
            preset: Set(stdio.map(|s| s.preset.clone())),
            preset_args: Set(serde_json::json!(
                stdio.map(|s| s.preset_args.clone()).unwrap_or_default()
            )),
            // An embedded server's kind lives in `command`: it is the program, in-process.
            command: Set(match &spec.transport {
                Transport::Embedded(kind) => Some(kind.as_str().to_owned()),
                _ => stdio.map(|s| s.command.clone()),
            }),
            args: Set(serde_json::json!(
                stdio.map(|s| s.args.clone()).unwrap_or_default()
            )),
            env: Set(stdio.and_then(|s| seal_map(&self.cipher, &s.env))),
            disabled_tools: Set(serde_json::json!(spec.disabled_tools)),
            auto_approve_tools: Set(serde_json::json!(spec.auto_approve_tools)),
            oauth_client: Set(spec
                .transport
                .remote()
                .filter(|e| !e.oauth.is_empty())
                .map(|e| {
                    self.cipher
                        .seal(&serde_json::to_string(&e.oauth).expect("settings serialize"))
                })),
            sampling: Set((!spec.sampling.is_default()).then(|| serde_json::json!(spec.sampling))),
            roots: Set((!spec.roots.is_empty()).then(|| serde_json::json!(spec.roots))),
            session_scope: Set((spec.session_scope != SessionScope::User)
                .then(|| spec.session_scope.as_str().to_owned())),
            catalog_entry: Set(spec.catalog.as_ref().map(|c| c.entry.clone())),
            catalog_version: Set(spec.catalog.as_ref().and_then(|c| c.version.clone())),
            catalog_values: Set(spec.catalog.as_ref().map(|c| serde_json::json!(c.values))),
            catalog_secrets: Set(spec
                .catalog
                .as_ref()
                .and_then(|c| seal_map(&self.cipher, &c.secrets))),
            created_at: Set(server.created_at),
            updated_at: Set(server.updated_at),
        }
    }

    fn to_domain(&self, row: mcp_server::Model) -> Result<McpServer, StoreError> {
        let kind = TransportKind::parse(&row.transport).map_err(|e| corrupt("transport", e))?;
        let transport = match kind {
            TransportKind::Stdio => Transport::Stdio(StdioLaunch {
                preset: row.preset.ok_or_else(|| corrupt("preset", "missing"))?,
                preset_args: from_json::<BTreeMap<String, String>>("preset_args", row.preset_args)?,
                env: open_map(&self.cipher, row.env.as_deref())?,
                command: row.command.unwrap_or_default(),
                args: from_json("args", row.args)?,
            }),
            TransportKind::Embedded => Transport::Embedded(
                EmbeddedKind::parse(row.command.as_deref().unwrap_or_default())
                    .map_err(|e| corrupt("command", e))?,
            ),
            TransportKind::Sse | TransportKind::StreamableHttp => {
                let endpoint = RemoteEndpoint {
                    url: self.open_url(row.base_url.as_deref(), row.base_url_sealed.as_deref())?,
                    headers: open_map(&self.cipher, row.headers.as_deref())?,
                    oauth: match row.oauth_client.as_deref() {
                        Some(sealed) => {
                            let json = self
                                .cipher
                                .open(sealed)
                                .map_err(|e| corrupt("oauth_client", e))?;
                            serde_json::from_str(&json).map_err(|e| corrupt("oauth_client", e))?
                        }
                        None => Default::default(),
                    },
                };
                if kind == TransportKind::Sse {
                    Transport::Sse(endpoint)
                } else {
                    Transport::StreamableHttp(endpoint)
                }
            }
        };
        let user_id = UserId::parse_owner(&row.user_id).map_err(|e| corrupt("user_id", e))?;
        Ok(McpServer {
            id: row.id,
            team: user_id.team_group().map(str::to_owned),
            user_id,
            spec: ServerSpec {
                name: ServerName::parse(&row.name).map_err(|e| corrupt("name", e))?,
                transport,
                is_active: row.is_active,
                timeout_secs: row.timeout_secs.map(|t| t.max(0) as u32),
                disabled_tools: from_json("disabled_tools", row.disabled_tools)?,
                auto_approve_tools: from_json("auto_approve_tools", row.auto_approve_tools)?,
                sampling: match row.sampling {
                    Some(json) => from_json("sampling", json)?,
                    None => Default::default(),
                },
                roots: match row.roots {
                    Some(json) => from_json("roots", json)?,
                    None => Vec::new(),
                },
                session_scope: match row.session_scope.as_deref() {
                    Some(raw) => {
                        SessionScope::parse(raw).map_err(|e| corrupt("session_scope", e))?
                    }
                    None => SessionScope::User,
                },
                catalog: match row.catalog_entry {
                    Some(entry) => Some(Box::new(CatalogUse {
                        entry,
                        version: row.catalog_version,
                        values: match row.catalog_values {
                            Some(json) => from_json("catalog_values", json)?,
                            None => BTreeMap::new(),
                        },
                        secrets: open_map(&self.cipher, row.catalog_secrets.as_deref())?,
                    })),
                    None => None,
                },
            },
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
    }
}

/// The whole URL, sealed, when it holds credentials; NULL otherwise (nothing to hide).
fn seal_url(cipher: &Cipher, url: &SecretUrl) -> Option<String> {
    url.has_secrets()
        .then(|| cipher.seal(url.expose().as_str()))
}
