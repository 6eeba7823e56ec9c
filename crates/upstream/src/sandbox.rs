//! The stdio servers' sandbox: each server runs under bubblewrap (`bwrap`, the tool
//! Flatpak and VS Code's MCP sandbox use) in namespaces of its own, seeing the system
//! read-only, its command's installation read-only, its private home and nothing else of
//! the host; its network is none, the service's egress proxy, or the host's.
//!
//! The namespaces and mounts are bubblewrap's work, not ours: this module only writes its
//! command line, checks once at start that a sandbox can be made here (and says why not),
//! and runs the egress proxy ([`egress`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::process::Command;

use crate::config::{SandboxMode, SandboxSettings};
use crate::domain::NetworkMode;
use crate::security::UrlPolicy;

mod egress;
mod etc;

pub use egress::EgressProxy;

/// Where a server's private home is mounted, as `HOME` and the working directory.
pub const HOME: &str = "/home/mcp";
/// The user a server runs as inside its sandbox (`mcp`, 1000:1000).
const UID: &str = "1000";
/// Where the egress proxy's socket folder is mounted.
const EGRESS_DIR: &str = "/run/mcp-pool";
/// Where the egress forwarder is mounted.
const FORWARDER: &str = "/run/mcp-pool-egress";
/// The port the in-sandbox forwarder listens on (the sandbox's own loopback).
const EGRESS_PORT: u16 = 3128;

/// What a stdio server's connection says where no sandbox can be made (short: an
/// error a person reads is cut at 200 characters).
const UNAVAILABLE: &str = "stdio servers need a sandbox and none can be made (pool.sandbox.mode = \"off\" runs them unisolated)";

/// The top-level folders of a usr-merged system; each is a link into `/usr` or a
/// read-only copy of the host's own.
const SYSTEM: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// The sandbox as configured and found at start.
#[derive(Debug)]
pub struct Sandbox {
    mode: SandboxMode,
    /// The bubblewrap program, found on the PATH.
    bwrap: PathBuf,
    /// Why no sandbox can be made here; `None` when one can.
    unavailable: Option<String>,
    /// Why egress cannot be offered (no forwarder inside); `None` when it can.
    no_egress: Option<String>,
    /// The egress forwarder (`mcp-pool-egress`), found at start.
    forwarder: PathBuf,
    /// The folder of the sandbox's `/etc` and of the egress sockets.
    files: PathBuf,
    /// The sandbox's `/etc` (`etc.rs`), made at start.
    etc: PathBuf,
    default_network: NetworkMode,
    tmp_size_bytes: u64,
    shared_read_only: Vec<String>,
}

/// What one server's sandbox holds besides the system.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxPlan {
    /// The private home on the host (created if missing).
    pub home: PathBuf,
    /// `None`: the pool's default network.
    pub network: Option<NetworkMode>,
    pub read_only: Vec<String>,
    pub writable: Vec<String>,
    pub allow_hosts: Vec<String>,
}

/// The sandbox's state, as `/readyz` and the console show it.
#[derive(Debug, Clone)]
pub struct SandboxStatus {
    /// `"on"` or `"off"`.
    pub mode: &'static str,
    /// Whether stdio servers start isolated.
    pub isolated: bool,
    /// What is wrong, in words (no sandbox here, no egress, or isolation turned off).
    pub problem: Option<String>,
}

/// A sandboxed command ready to spawn, and what must live as long as its server.
pub struct SandboxedCommand {
    pub command: Command,
    pub egress: Option<EgressProxy>,
}

impl Sandbox {
    /// Reads the settings and checks, once, that a sandbox can be made here.
    pub fn prepare(settings: &SandboxSettings, data_dir: &Path) -> Arc<Self> {
        let files = data_dir.join("sandbox");
        let mut sandbox = Sandbox {
            mode: settings.mode,
            bwrap: PathBuf::from(&settings.bwrap),
            unavailable: None,
            no_egress: None,
            forwarder: PathBuf::new(),
            etc: files.join("etc"),
            files,
            default_network: settings.network,
            tmp_size_bytes: u64::from(settings.tmp_size_mib) * 1024 * 1024,
            shared_read_only: settings.read_only_paths.clone(),
        };
        if settings.mode == SandboxMode::Off {
            tracing::warn!(
                "pool.sandbox.mode is \"off\": stdio servers run as the service, with its files, processes and network in reach; they are not isolated from each other or from the service"
            );
            return Arc::new(sandbox);
        }
        sandbox.unavailable = sandbox.probe().err();
        match find_forwarder(&settings.egress_forwarder) {
            Some(found) => sandbox.forwarder = found,
            None if sandbox.unavailable.is_none() => {
                sandbox.no_egress = Some(format!(
                    "network \"egress\" needs the forwarder mcp-pool-egress, installed beside mcp-pool (pool.sandbox.egress_forwarder: '{}'); servers with that network cannot start",
                    settings.egress_forwarder
                ));
            }
            None => {}
        }
        match (&sandbox.unavailable, &sandbox.no_egress) {
            (Some(why), _) => tracing::error!(
                "stdio servers cannot start: {why}; install bubblewrap and allow unprivileged user namespaces (a container needs them too), or set pool.sandbox.mode = \"off\" to run them unisolated"
            ),
            (None, Some(why)) => tracing::warn!("{why}"),
            (None, None) => {
                tracing::info!(bwrap = %sandbox.bwrap.display(), "stdio servers start sandboxed")
            }
        }
        Arc::new(sandbox)
    }

    pub fn is_on(&self) -> bool {
        self.mode == SandboxMode::On
    }

    pub fn status(&self) -> SandboxStatus {
        match self.mode {
            SandboxMode::Off => SandboxStatus {
                mode: "off",
                isolated: false,
                problem: Some(
                    "pool.sandbox.mode is \"off\": stdio servers are not isolated from the service or from each other".into(),
                ),
            },
            SandboxMode::On => SandboxStatus {
                mode: "on",
                isolated: self.unavailable.is_none(),
                problem: self
                    .unavailable
                    .as_ref()
                    .map(|why| format!("{UNAVAILABLE}: {why}"))
                    .or_else(|| self.no_egress.clone()),
            },
        }
    }

    /// The network a server of `plan` gets.
    pub fn network_of(&self, plan: &SandboxPlan) -> NetworkMode {
        plan.network.unwrap_or(self.default_network)
    }

    /// Finds bubblewrap, writes the sandbox's own user files and starts one sandbox.
    fn probe(&mut self) -> Result<(), String> {
        let Some(bwrap) = find_program(&self.bwrap.display().to_string(), None) else {
            return Err(format!(
                "bubblewrap ('{}', pool.sandbox.bwrap) is not installed (Debian's package bubblewrap)",
                self.bwrap.display()
            ));
        };
        self.bwrap = bwrap;
        self.etc = std::fs::create_dir_all(self.files.join("egress"))
            .and_then(|()| etc::prepare(&self.files))
            .map_err(|e| format!("cannot write {}: {e}", self.files.display()))?;
        let home = self.files.join("probe-home");
        let _ = std::fs::create_dir_all(&home);
        let mut args = self.base_args(NetworkMode::None, &home);
        args.extend(["--".into(), "true".into()]);
        let output = std::process::Command::new(&self.bwrap)
            .args(&args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("'{}' did not start: {e}", self.bwrap.display()))?;
        let _ = std::fs::remove_dir_all(&home);
        if !output.status.success() {
            let said = String::from_utf8_lossy(&output.stderr);
            return Err(format!(
                "bubblewrap cannot make a sandbox here (are unprivileged user namespaces allowed?): {}",
                said.trim()
            ));
        }
        Ok(())
    }

    /// What every sandbox has: namespaces, the system read-only, its own /proc, /dev,
    /// /tmp, users, and the home.
    fn base_args(&self, network: NetworkMode, home: &Path) -> Vec<String> {
        let mut args: Vec<String> = [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--uid",
            UID,
            "--gid",
            UID,
            "--hostname",
            "mcp-server",
            "--ro-bind",
            "/usr",
            "/usr",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        if network != NetworkMode::Host {
            args.push("--unshare-net".into());
        }
        for top in SYSTEM {
            let host = Path::new("/").join(top);
            match std::fs::read_link(&host) {
                Ok(target) => args.extend([
                    "--symlink".into(),
                    target.display().to_string(),
                    host.display().to_string(),
                ]),
                Err(_) if host.is_dir() => {
                    let host = host.display().to_string();
                    args.extend(["--ro-bind".into(), host.clone(), host]);
                }
                Err(_) => {}
            }
        }
        args.extend([
            "--ro-bind".into(),
            self.etc.display().to_string(),
            "/etc".into(),
        ]);
        args.extend([
            "--proc".into(),
            "/proc".into(),
            "--dev".into(),
            "/dev".into(),
            "--size".into(),
            self.tmp_size_bytes.max(1024 * 1024).to_string(),
            "--tmpfs".into(),
            "/tmp".into(),
            "--bind".into(),
            home.display().to_string(),
            HOME.into(),
            "--chdir".into(),
            HOME.into(),
        ]);
        args
    }

    /// The command line of a server in its sandbox. `env` is the server's whole
    /// environment (bubblewrap passes its own on, so no value is on a command line);
    /// its `HOME` becomes the private home's.
    pub fn command(
        &self,
        program: &str,
        args: &[String],
        env: Vec<(String, String)>,
        plan: &SandboxPlan,
        url_policy: &Arc<UrlPolicy>,
    ) -> Result<SandboxedCommand, String> {
        if let Some(why) = &self.unavailable {
            return Err(format!("{UNAVAILABLE}: {why}"));
        }
        let network = self.network_of(plan);
        if network == NetworkMode::Egress
            && let Some(why) = &self.no_egress
        {
            return Err(why.clone());
        }
        std::fs::create_dir_all(&plan.home)
            .map_err(|e| format!("cannot create the server's home: {e}"))?;
        let path_env = env
            .iter()
            .find(|(name, _)| name == "PATH")
            .map(|(_, value)| value.as_str());
        let mut bwrap_args = self.base_args(network, &plan.home);
        let mut read_only = installation_of(program, path_env);
        read_only.extend(self.shared_read_only.iter().map(PathBuf::from));
        read_only.extend(plan.read_only.iter().map(PathBuf::from));
        for path in read_only {
            // What is under /usr (also through /bin and the like) is there already.
            match std::fs::canonicalize(&path) {
                Ok(real) if !real.starts_with("/usr") => {}
                _ => continue,
            }
            let path = path.display().to_string();
            bwrap_args.extend(["--ro-bind".into(), path.clone(), path]);
        }
        for path in &plan.writable {
            if !Path::new(path).exists() {
                return Err(format!(
                    "the sandbox's writable path '{path}' does not exist on the host"
                ));
            }
            bwrap_args.extend(["--bind".into(), path.clone(), path.clone()]);
        }
        let mut env: Vec<(String, String)> =
            env.into_iter().filter(|(name, _)| name != "HOME").collect();
        env.push(("HOME".into(), HOME.into()));
        let egress = if network == NetworkMode::Egress {
            let proxy = EgressProxy::start(
                &self.files.join("egress"),
                url_policy.clone(),
                plan.allow_hosts.clone(),
            )
            .map_err(|e| format!("cannot start the server's egress proxy: {e}"))?;
            bwrap_args.extend([
                "--ro-bind".into(),
                proxy.folder().display().to_string(),
                EGRESS_DIR.into(),
                "--ro-bind".into(),
                self.forwarder.display().to_string(),
                FORWARDER.into(),
            ]);
            let proxy_url = format!("http://127.0.0.1:{EGRESS_PORT}");
            for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
                env.push((name.into(), proxy_url.clone()));
            }
            for name in ["NO_PROXY", "no_proxy"] {
                env.push((name.into(), "localhost,127.0.0.1,::1".into()));
            }
            env.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
            Some(proxy)
        } else {
            None
        };
        bwrap_args.push("--".into());
        if egress.is_some() {
            // The forwarder from the sandbox's own loopback to the proxy's socket: it
            // listens, then becomes the server and leaves a child forwarding (the pid
            // namespace ends it with the server).
            bwrap_args.extend([
                FORWARDER.into(),
                EGRESS_PORT.to_string(),
                format!("{EGRESS_DIR}/{}", egress::SOCKET),
                "--".into(),
            ]);
        }
        bwrap_args.push(program.into());
        bwrap_args.extend(args.iter().cloned());
        let mut command = Command::new(&self.bwrap);
        command.args(bwrap_args).env_clear().envs(env);
        Ok(SandboxedCommand { command, egress })
    }
}

/// The egress forwarder: the configured path, else `mcp-pool-egress` beside the running
/// executable (or the load tool, or a test, in `target/<profile>`), else on the PATH.
fn find_forwarder(configured: &str) -> Option<PathBuf> {
    const NAME: &str = "mcp-pool-egress";
    if !configured.is_empty() {
        return find_program(configured, None);
    }
    let exe = std::env::current_exe().ok()?;
    let beside = exe.parent().map(|dir| dir.join(NAME));
    // A test binary runs from target/<profile>/deps.
    let above = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join(NAME));
    beside
        .into_iter()
        .chain(above)
        .find_map(|path| find_program(&path.display().to_string(), None))
        .or_else(|| find_program(NAME, None))
}

/// Where `program` is installed: the file itself, or the prefix above its `bin/` (an
/// interpreter's or runtime's whole installation: `/opt/node/bin/node` → `/opt/node`),
/// for the path as named and for the file it links to.
fn installation_of(program: &str, path_env: Option<&str>) -> Vec<PathBuf> {
    let Some(found) = find_program(program, path_env) else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    let canonical = std::fs::canonicalize(&found).ok();
    for path in std::iter::once(found).chain(canonical) {
        let prefix = path
            .parent()
            .filter(|dir| dir.file_name().is_some_and(|name| name == "bin"))
            .and_then(Path::parent)
            .filter(|prefix| *prefix != Path::new("/"));
        let bound = prefix.map(Path::to_path_buf).unwrap_or(path);
        if !paths.contains(&bound) {
            paths.push(bound);
        }
    }
    paths
}

/// `program` as a path, or found on `path_env` (the service's PATH when `None`).
fn find_program(program: &str, path_env: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |path: &Path| {
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = PathBuf::from(program);
        return executable(&path).then_some(path);
    }
    let search = path_env
        .map(str::to_owned)
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    search
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|path| executable(path))
}

#[cfg(test)]
mod tests;
