//! Turning a stored server into what the pool runs, every rule applied again: the preset
//! resolved anew (an admin change applies), the URL policy checked anew (DNS may change),
//! and the child given only the inherited variables plus its own env.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::UpstreamService;
use crate::domain::SandboxSpec;
use crate::domain::{McpServer, PresetSpec, Resolved, SecretUrl, Transport, UserId};
use crate::error::{Error, Resource, Result};
use crate::mcp::{StdioLimits, UpstreamSpec, UpstreamTransport};
use crate::pool::ServerRuntime;
use crate::sandbox::{Sandbox, SandboxPlan};

impl UpstreamService {
    pub(super) async fn load_runtime(
        &self,
        user: &UserId,
        id: Uuid,
        server_id: &str,
    ) -> Result<Arc<ServerRuntime>> {
        let server = self
            .store
            .servers()
            .usable(user, id)
            .await?
            .ok_or_else(|| Error::NotFound(Resource::McpServer, server_id.to_owned()))?;
        Ok(Arc::new(self.runtime(server).await?))
    }

    /// Builds what the pool needs to run `server`, applying every rule once more.
    pub(super) async fn runtime(&self, server: McpServer) -> Result<ServerRuntime> {
        if !server.spec.is_active {
            return Err(Error::ServerInactive);
        }
        let pool = &self.settings.pool;
        let mut preset_timeout = None;
        // Global servers are the admin's own definitions: no preset, no URL policy.
        let global = server.user_id == UserId::global();
        let transport = match &server.spec.catalog {
            // Made from the catalog: the entry resolved again (its version in force now).
            Some(using) if !global => match self.catalog.resolve(using).await? {
                Resolved::Stdio(launch) => UpstreamTransport::Stdio {
                    sandbox: self.sandbox_plan(&server, &launch.sandbox, &[]),
                    command: launch.command,
                    args: launch.args,
                    env: launch.env.expose().clone(),
                    inherited_env: self.inherited_env(),
                    working_dir: self.home_of(&server),
                    limits: self.stdio_limits(None),
                },
                Resolved::Remote { sse, url, headers } => {
                    let url = self.checked(&SecretUrl::new(url)).await?;
                    let headers = headers.expose().clone();
                    if sse {
                        UpstreamTransport::Sse { url, headers }
                    } else {
                        UpstreamTransport::StreamableHttp { url, headers }
                    }
                }
            },
            _ => {
                self.stored_transport(&server, global, &mut preset_timeout)
                    .await?
            }
        };
        let timeout_secs = server
            .spec
            .timeout_secs
            .or(preset_timeout)
            .unwrap_or(pool.default_call_timeout_secs);
        Ok(ServerRuntime {
            upstream: UpstreamSpec {
                label: format!("{}/{}", server.user_id, server.spec.name.as_str()),
                transport,
                connect_timeout: Duration::from_secs(pool.connect_timeout_secs),
                max_message_bytes: pool.max_message_bytes,
                url_policy: self.http.url_policy().clone(),
                http: self.http.clone(),
                // Global servers are shared by all users: no one user's tokens.
                auth: if global {
                    None
                } else {
                    self.oauth.connector(&server)
                },
                roots: server.spec.roots.clone(),
                owner: (!global).then(|| self.elicitations.for_user(&server)),
                revision: Default::default(),
            },
            call_timeout: Duration::from_secs(timeout_secs.into()),
            server,
        })
    }

    /// What a server's stored transport runs: a user's stdio server from its preset,
    /// resolved anew; a remote one under the URL policy once more.
    async fn stored_transport(
        &self,
        server: &McpServer,
        global: bool,
        preset_timeout: &mut Option<u32>,
    ) -> Result<UpstreamTransport> {
        Ok(match &server.spec.transport {
            Transport::Stdio(launch) if global => UpstreamTransport::Stdio {
                sandbox: self.sandbox_plan(server, &Default::default(), &launch.args),
                command: launch.command.clone(),
                args: launch.args.clone(),
                env: launch.env.expose().clone(),
                inherited_env: self.inherited_env(),
                working_dir: self.home_of(server),
                limits: self.stdio_limits(None),
            },
            Transport::Sse(endpoint) if global => UpstreamTransport::Sse {
                url: endpoint.url.clone(),
                headers: endpoint.headers.expose().clone(),
            },
            Transport::StreamableHttp(endpoint) if global => UpstreamTransport::StreamableHttp {
                url: endpoint.url.clone(),
                headers: endpoint.headers.expose().clone(),
            },
            Transport::Stdio(launch) => {
                let preset = self
                    .store
                    .presets()
                    .get(&launch.preset)
                    .await?
                    .ok_or_else(|| Error::NotFound(Resource::Preset, launch.preset.clone()))?;
                *preset_timeout = preset.spec.timeout_secs;
                let resolved = preset.spec.resolve(
                    &launch.preset_args,
                    &launch.env,
                    self.settings.limits.max_value_bytes,
                )?;
                UpstreamTransport::Stdio {
                    sandbox: self.sandbox_plan(server, &resolved.sandbox, &preset.spec.args),
                    command: resolved.command,
                    args: resolved.args,
                    env: resolved.env.expose().clone(),
                    inherited_env: self.inherited_env(),
                    working_dir: self.home_of(server),
                    limits: self.stdio_limits(Some(&preset.spec)),
                }
            }
            Transport::Sse(endpoint) => UpstreamTransport::Sse {
                url: self.checked(&endpoint.url).await?,
                headers: endpoint.headers.expose().clone(),
            },
            Transport::StreamableHttp(endpoint) => UpstreamTransport::StreamableHttp {
                url: self.checked(&endpoint.url).await?,
                headers: endpoint.headers.expose().clone(),
            },
            Transport::Embedded(kind) => UpstreamTransport::Embedded(*kind),
        })
    }

    /// The URL policy once more (DNS may have changed), credentials kept.
    async fn checked(&self, url: &SecretUrl) -> Result<SecretUrl> {
        let checked = self.http.url_policy().check(url.expose().as_str()).await?;
        Ok(SecretUrl::new(checked))
    }

    fn inherited_env(&self) -> Vec<(String, String)> {
        let mut env: BTreeMap<String, String> = self
            .settings
            .pool
            .inherited_env
            .iter()
            .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
            .collect();
        if self.settings.pool.inherited_env.iter().any(|n| n == "LANG") {
            env.entry("LANG".into()).or_insert_with(|| "C.UTF-8".into());
        }
        env.into_iter().collect()
    }

    /// The operator's limits on one stdio server: its preset's, else the pool's (0: none).
    fn stdio_limits(&self, preset: Option<&PresetSpec>) -> StdioLimits {
        let pool = &self.settings.pool;
        let memory_mib = preset
            .and_then(|p| p.memory_limit_mib)
            .map_or(pool.stdio_memory_limit_mib, u64::from);
        let tasks = preset
            .and_then(|p| p.max_tasks)
            .unwrap_or(pool.stdio_max_tasks_per_server);
        StdioLimits {
            memory_bytes: (memory_mib > 0).then(|| memory_mib.saturating_mul(1024 * 1024)),
            processes: (tasks > 0).then_some(tasks),
        }
    }

    /// What a server's sandbox holds: its home, the admin's paths (the preset's, the
    /// catalog runtime's), and the absolute paths the admin wrote among its arguments
    /// (a script's). Never a path from a user's value: those name places inside.
    fn sandbox_plan(
        &self,
        server: &McpServer,
        spec: &SandboxSpec,
        admin_args: &[String],
    ) -> Option<(Arc<Sandbox>, SandboxPlan)> {
        if !self.sandbox.is_on() {
            return None;
        }
        let mut read_only = spec.read_only_paths.clone();
        read_only.extend(
            admin_args
                .iter()
                .filter(|arg| arg.starts_with('/') && !arg.contains('{'))
                .cloned(),
        );
        let plan = SandboxPlan {
            home: self.home_of(server),
            network: spec.network,
            read_only,
            writable: spec.writable_paths.clone(),
            allow_hosts: spec.allow_hosts.clone(),
        };
        Some((self.sandbox.clone(), plan))
    }

    /// Where a stdio server's private home is on this instance's disk.
    pub fn home_of(&self, server: &McpServer) -> PathBuf {
        server_home(&self.settings.storage.data_dir, &server.user_id, server.id)
    }
}

/// A stdio server's private home (its working directory):
/// `<data_dir>/work/<hash of user>/<server id>`, per user and server, no user text in
/// paths. Kept across restarts and reconnects, deleted with the server.
pub(crate) fn server_home(data_dir: &std::path::Path, user: &UserId, server: Uuid) -> PathBuf {
    let user = hex::encode(Sha256::digest(user.as_str().as_bytes()));
    data_dir
        .join("work")
        .join(&user[..16])
        .join(server.to_string())
}

/// Most entries of a home read to size it: a server's files are its own to multiply, and
/// a page of the list must not wait on a million of them.
const MAX_HOME_ENTRIES: usize = 100_000;

/// The bytes of the files in a server's home, `folder` (links not followed, at most
/// [`MAX_HOME_ENTRIES`] entries read); `None` when it does not exist.
pub(crate) fn home_bytes(folder: &std::path::Path) -> Option<u64> {
    std::fs::symlink_metadata(folder).ok()?;
    let (mut total, mut seen, mut stack) = (0u64, 0usize, vec![folder.to_path_buf()]);
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            seen += 1;
            if seen > MAX_HOME_ENTRIES {
                return Some(total);
            }
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    Some(total)
}
