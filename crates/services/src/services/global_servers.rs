//! Admin-defined global servers (seed 002's config file): a TOML file listing servers that
//! every assistant of every user is offered, beside its bound servers. One shared
//! connection per global server (they hold no user's secrets).
//!
//! The file is polled and reloaded when its content changes; a reload is applied as a
//! diff: only servers whose definition changed or that were removed are stopped (their
//! next use reconnects), the others keep their live connections. A file that does not
//! parse or holds an invalid server is rejected as a whole, logged, and the previous set
//! stays. Polling (not inotify) so it also works on container volumes and network mounts.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::domain::{
    EmbeddedKind, McpServer, RemoteEndpoint, SecretMap, SecretUrl, ServerName, ServerSpec,
    StdioLaunch, Transport, UserId,
};
use crate::pool::Pool;

/// Fixed namespace of global server ids: an id depends only on the server's name.
const ID_NAMESPACE: Uuid = Uuid::from_u128(0x6d63_705f_706f_6f6c_5f67_6c6f_6261_6c73);

/// One server as the file describes it. No `Debug`: the URL, headers and env are in clear.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileServer {
    #[serde(rename = "type")]
    pub transport: String,
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub embedded: Option<String>,
    #[serde(default)]
    pub auto_approve_tools: Vec<String>,
    #[serde(default)]
    pub disabled_tools: Vec<String>,
    pub timeout_secs: Option<u32>,
    /// `{clientId, clientSecret, scopes}`: the OAuth client each user authorizes with.
    #[serde(default)]
    pub oauth: Option<crate::domain::OAuthClientSettings>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServersFile {
    #[serde(default)]
    servers: BTreeMap<String, FileServer>,
}

struct Entry {
    source: FileServer,
    server: McpServer,
}

/// What the admin API shows.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GlobalStatus {
    pub file: Option<String>,
    pub loaded_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Why the newest content of the file was rejected (the previous set is in use).
    pub last_error: Option<String>,
    pub servers: Vec<GlobalServerView>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GlobalServerView {
    pub id: Uuid,
    pub name: String,
    #[serde(rename = "type")]
    pub transport: &'static str,
}

/// What one reload changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ReloadDiff {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
}

/// The current set, shared by the upstream service (lookups) and the reloader.
#[derive(Default)]
pub struct GlobalServers {
    current: RwLock<Arc<HashMap<Uuid, Entry>>>,
    status: Mutex<GlobalStatus>,
}

impl GlobalServers {
    pub(crate) fn id_of(name: &str) -> Uuid {
        Uuid::new_v5(&ID_NAMESPACE, name.as_bytes())
    }

    pub fn get(&self, id: Uuid) -> Option<McpServer> {
        self.current
            .read()
            .expect("global servers lock")
            .get(&id)
            .map(|e| e.server.clone())
    }

    /// Ids of every global server, by name.
    pub fn ids(&self) -> Vec<Uuid> {
        let current = self.current.read().expect("global servers lock").clone();
        let mut servers: Vec<(&str, Uuid)> = current
            .values()
            .map(|e| (e.server.spec.name.as_str(), e.server.id))
            .collect();
        servers.sort();
        servers.into_iter().map(|(_, id)| id).collect()
    }

    pub fn status(&self) -> GlobalStatus {
        self.status.lock().expect("status lock").clone()
    }

    /// Parses the file's content into servers, refusing the whole file on any problem.
    fn parse(content: &str) -> Result<HashMap<Uuid, Entry>, String> {
        let file: ServersFile = toml::from_str(content).map_err(|e| e.to_string())?;
        let now = crate::domain::now();
        let mut servers = HashMap::new();
        for (name, source) in file.servers {
            let server_name =
                ServerName::parse(&name).map_err(|e| format!("server '{name}': {e}"))?;
            let transport =
                Self::transport(&source).map_err(|e| format!("server '{name}': {e}"))?;
            let id = Self::id_of(&name);
            servers.insert(
                id,
                Entry {
                    server: McpServer {
                        id,
                        user_id: UserId::global(),
                        team: None,
                        spec: ServerSpec {
                            name: server_name,
                            transport,
                            is_active: true,
                            timeout_secs: source.timeout_secs,
                            disabled_tools: source.disabled_tools.clone(),
                            auto_approve_tools: source.auto_approve_tools.clone(),
                            sampling: Default::default(),
                            roots: Vec::new(),
                            session_scope: Default::default(),
                            catalog: None,
                        },
                        created_at: now,
                        updated_at: now,
                    },
                    source,
                },
            );
        }
        Ok(servers)
    }

    fn transport(source: &FileServer) -> Result<Transport, String> {
        let fields_of = |kind: &str, allowed: &[&str]| -> Result<(), String> {
            let given = [
                ("url", source.url.is_some()),
                ("headers", !source.headers.is_empty()),
                ("command", source.command.is_some()),
                ("args", !source.args.is_empty()),
                ("env", !source.env.is_empty()),
                ("embedded", source.embedded.is_some()),
                ("oauth", source.oauth.is_some()),
            ];
            match given
                .iter()
                .find(|(field, set)| *set && !allowed.contains(field))
            {
                Some((field, _)) => Err(format!("{field} does not apply to type {kind}")),
                None => Ok(()),
            }
        };
        match source.transport.as_str() {
            "stdio" => {
                fields_of("stdio", &["command", "args", "env"])?;
                let command = source
                    .command
                    .clone()
                    .filter(|c| !c.trim().is_empty())
                    .ok_or("command is required for stdio")?;
                Ok(Transport::Stdio(StdioLaunch {
                    preset: "(global servers file)".into(),
                    preset_args: BTreeMap::new(),
                    env: SecretMap::new(source.env.clone()),
                    command,
                    args: source.args.clone(),
                }))
            }
            kind @ ("streamableHttp" | "sse") => {
                fields_of(kind, &["url", "headers", "oauth"])?;
                let url = source.url.as_deref().ok_or("url is required")?;
                let url = url::Url::parse(url).map_err(|e| format!("url: {e}"))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err("url must use http or https".into());
                }
                let endpoint = RemoteEndpoint {
                    url: SecretUrl::new(url),
                    headers: SecretMap::new(source.headers.clone()),
                    oauth: source.oauth.clone().unwrap_or_default(),
                };
                Ok(if kind == "sse" {
                    Transport::Sse(endpoint)
                } else {
                    Transport::StreamableHttp(endpoint)
                })
            }
            "embedded" => {
                fields_of("embedded", &["embedded"])?;
                let kind = source
                    .embedded
                    .as_deref()
                    .ok_or("embedded is required for type embedded")?;
                Ok(Transport::Embedded(
                    EmbeddedKind::parse(kind).map_err(|e| e.to_string())?,
                ))
            }
            other => Err(format!(
                "type '{other}' is not one of stdio, sse, streamableHttp, embedded"
            )),
        }
    }

    /// Installs a new set; returns what changed (whose connections must restart).
    fn replace(&self, next: HashMap<Uuid, Entry>) -> ReloadDiff {
        let mut current = self.current.write().expect("global servers lock");
        let mut diff = ReloadDiff::default();
        for (id, entry) in next.iter() {
            let name = entry.server.spec.name.as_str().to_owned();
            match current.get(id) {
                None => diff.added.push(name),
                Some(old) if old.source != entry.source => diff.changed.push(name),
                Some(_) => {}
            }
        }
        for (id, entry) in current.iter() {
            if !next.contains_key(id) {
                diff.removed
                    .push(entry.server.spec.name.as_str().to_owned());
            }
        }
        for list in [&mut diff.added, &mut diff.changed, &mut diff.removed] {
            list.sort();
        }
        *current = Arc::new(next);
        diff
    }
}

/// Watches the file and applies its changes.
pub struct GlobalServersReloader {
    servers: Arc<GlobalServers>,
    pool: Pool,
    file: PathBuf,
    poll: Duration,
}

impl GlobalServersReloader {
    pub fn new(servers: Arc<GlobalServers>, pool: Pool, file: PathBuf, poll: Duration) -> Self {
        Self {
            servers,
            pool,
            file,
            poll,
        }
    }

    /// Reads and applies the file once; `Err` (logged, old set kept) when it is invalid.
    pub(crate) async fn reload(&self) -> Result<ReloadDiff, String> {
        let result = match tokio::fs::read_to_string(&self.file).await {
            Ok(content) => GlobalServers::parse(&content),
            Err(error) => Err(format!("cannot read {}: {error}", self.file.display())),
        };
        let mut status = self.servers.status();
        status.file = Some(self.file.display().to_string());
        let (outcome, to_stop) = match result {
            Ok(next) => {
                let diff = self.servers.replace(next);
                status.loaded_at = Some(crate::domain::now());
                status.last_error = None;
                tracing::info!(
                    added = ?diff.added, changed = ?diff.changed, removed = ?diff.removed,
                    "global servers reloaded"
                );
                let to_stop: Vec<String> =
                    diff.changed.iter().chain(&diff.removed).cloned().collect();
                (Ok(diff), to_stop)
            }
            Err(error) => {
                tracing::error!(file = %self.file.display(), %error, "global servers file rejected; the previous set stays");
                status.last_error = Some(error.clone());
                (Err(error), Vec::new())
            }
        };
        // The status says what is offered from the moment it is offered; the connections
        // of changed and removed servers are stopped after (a stdio server may take seconds).
        let current = self
            .servers
            .current
            .read()
            .expect("global servers lock")
            .clone();
        let mut views: Vec<GlobalServerView> = current
            .values()
            .map(|e| GlobalServerView {
                id: e.server.id,
                name: e.server.spec.name.as_str().to_owned(),
                transport: e.server.spec.transport.kind().as_str(),
            })
            .collect();
        views.sort_by(|a, b| a.name.cmp(&b.name));
        status.servers = views;
        *self.servers.status.lock().expect("status lock") = status;
        for name in to_stop {
            self.pool
                .stop_server(&UserId::global(), GlobalServers::id_of(&name))
                .await;
        }
        outcome
    }

    async fn digest(&self) -> Vec<u8> {
        tokio::fs::read(&self.file)
            .await
            .map(|bytes| Sha256::digest(&bytes).to_vec())
            .unwrap_or_default()
    }

    /// Loads the file now, then reloads whenever its content changes, until `cancel`.
    pub async fn start(self, cancel: CancellationToken) {
        let mut seen = self.digest().await;
        let _ = self.reload().await;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(self.poll) => {}
                    () = cancel.cancelled() => return,
                }
                let digest = self.digest().await;
                if digest != seen {
                    seen = digest;
                    let _ = self.reload().await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reloads_are_diffs_and_bad_files_are_refused_whole() {
        let servers = GlobalServers::default();
        let first = GlobalServers::parse(
            "[servers.calc]\ntype = \"embedded\"\nembedded = \"calculator\"\n\
             [servers.clock]\ntype = \"embedded\"\nembedded = \"clock\"\n",
        )
        .unwrap();
        assert_eq!(servers.replace(first).added, vec!["calc", "clock"]);
        let second = GlobalServers::parse(
            "[servers.calc]\ntype = \"embedded\"\nembedded = \"calculator\"\nauto_approve_tools = [\"add\"]\n\
             [servers.web]\ntype = \"streamableHttp\"\nurl = \"https://example.com/mcp\"\n",
        )
        .unwrap();
        let diff = servers.replace(second);
        assert_eq!(diff.added, vec!["web"]);
        assert_eq!(diff.changed, vec!["calc"]);
        assert_eq!(diff.removed, vec!["clock"]);
        assert_eq!(servers.ids().len(), 2);
        for bad in [
            "[servers.x]\ntype = \"stdio\"\n",
            "[servers.x]\ntype = \"embedded\"\nembedded = \"clock\"\nurl = \"https://a\"\n",
            "[servers.x]\ntype = \"telepathy\"\n",
            "[servers.x\n",
            "[servers.x]\ntype = \"embedded\"\nembedded = \"clock\"\nsurprise = 1\n",
        ] {
            assert!(GlobalServers::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(GlobalServers::id_of("calc"), GlobalServers::id_of("calc"));
    }
}
