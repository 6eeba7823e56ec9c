//! A cgroup per stdio server, where the service may create one: every process the server
//! starts is in it whatever its group, session or parent (a double fork escapes the
//! parentage [`super::tree`] follows, not a cgroup), and its memory and process count
//! can be limited.
//!
//! Each server's cgroup is `<hierarchy>/<the service's own cgroup>/<instance>/server-<n>`
//! (`<instance>` is `mcp-pool-<pid>-<start time>`), in every hierarchy it needs: cgroup
//! v2 where it is mounted and writable (membership, `cgroup.kill`, and the limits where
//! its `memory` and `pids` controllers can be enabled for the service's children);
//! cgroup v1's `pids` and `memory` hierarchies for what v2 does not give. A server joins
//! its cgroups between `fork` and `exec`, so it never runs outside them. Where no
//! hierarchy is writable, servers run without (parentage alone).
//!
//! v2 lets a cgroup enable controllers for its children only while it holds no process
//! itself (the real root excepted). A service alone in its cgroup (a systemd unit with
//! `Delegate=yes`, a container's own cgroup namespace) moves itself into a leaf,
//! `<instance>/service`, first, as container runtimes do; a service that shares its
//! cgroup with other processes gets membership alone there.
//!
//! Directories of an instance that is gone (no process with its pid and start time) are
//! emptied and removed when the next instance starts in the same cgroup.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// What one stdio server may use; `None`: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StdioLimits {
    pub memory_bytes: Option<u64>,
    pub processes: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// One mounted hierarchy the service may create cgroups in.
#[derive(Debug)]
struct Hierarchy {
    version: Version,
    /// `<mount>/<own cgroup>/mcp-pool-<pid>`, created.
    base: PathBuf,
    memory: bool,
    pids: bool,
}

/// The hierarchies found at start.
#[derive(Debug, Default)]
pub(crate) struct Cgroups {
    hierarchies: Vec<Hierarchy>,
    next: AtomicU64,
}

/// The service's cgroups, found (and stale ones of dead instances removed) on first use.
pub(crate) fn cgroups() -> &'static Cgroups {
    static CGROUPS: OnceLock<Cgroups> = OnceLock::new();
    CGROUPS.get_or_init(|| {
        let found = Cgroups::find();
        match found.hierarchies.is_empty() {
            true => tracing::info!(
                "no writable cgroup hierarchy: stdio servers' processes are followed by parentage, without memory or process limits"
            ),
            false => tracing::info!(
                cgroups = ?found.hierarchies.iter().map(|h| h.base.display().to_string()).collect::<Vec<_>>(),
                memory = found.memory(), pids = found.pids(),
                "stdio servers run in cgroups of their own"
            ),
        }
        found
    })
}

impl Cgroups {
    fn find() -> Self {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let Some(instance) = instance_name(std::process::id() as i32) else {
            return Self::default();
        };
        let mut hierarchies = Vec::new();
        for mount in mounts.lines().filter_map(CgroupMount::parse) {
            let Some(own_path) = mount.own_path(&own) else {
                continue;
            };
            let own_dir = mount.point.join(own_path.trim_start_matches('/'));
            remove_stale(&own_dir);
            let base = own_dir.join(&instance);
            if std::fs::create_dir(&base).is_err() && !base.is_dir() {
                continue;
            }
            let (memory, pids) = match mount.version {
                Version::V1 => (mount.has("memory"), mount.has("pids")),
                Version::V2 => enable_v2_controllers(&own_dir, &base),
            };
            if mount.version == Version::V1 && !memory && !pids {
                // Other v1 controllers add nothing a server needs.
                let _ = std::fs::remove_dir(&base);
                continue;
            }
            hierarchies.push(Hierarchy {
                version: mount.version,
                base,
                memory,
                pids,
            });
        }
        // Membership is read from the first hierarchy: v2 (it has `cgroup.kill`), else
        // v1's `pids` (it costs nothing to be in).
        hierarchies.sort_by_key(|h| (h.version == Version::V1, !h.pids));
        Self {
            hierarchies,
            next: AtomicU64::new(1),
        }
    }

    pub(crate) fn memory(&self) -> bool {
        self.hierarchies.iter().any(|h| h.memory)
    }

    pub(crate) fn pids(&self) -> bool {
        self.hierarchies.iter().any(|h| h.pids)
    }

    /// The directories the watchdog empties when the service dies.
    pub(crate) fn bases(&self) -> Vec<PathBuf> {
        self.hierarchies.iter().map(|h| h.base.clone()).collect()
    }

    /// A new cgroup for one server, with `limits` written; `None` where no hierarchy is
    /// writable. Fails when a limit was asked for and could not be set.
    pub(crate) fn create(&self, limits: StdioLimits) -> Result<Option<ServerCgroup>, String> {
        let Some(first) = self.hierarchies.first() else {
            return Ok(None);
        };
        let name = format!("server-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let memory_home = self.hierarchies.iter().find(|h| h.memory);
        let pids_home = self.hierarchies.iter().find(|h| h.pids);
        let mut cgroup = ServerCgroup {
            dirs: Vec::new(),
            join: Vec::new(),
            memory: None,
            pids: None,
            limits,
        };
        for hierarchy in &self.hierarchies {
            let is = |home: Option<&Hierarchy>| home.is_some_and(|h| std::ptr::eq(h, hierarchy));
            let for_memory = limits.memory_bytes.is_some() && is(memory_home);
            let for_pids = limits.processes.is_some() && is(pids_home);
            if !std::ptr::eq(hierarchy, first) && !for_memory && !for_pids {
                continue;
            }
            let dir = hierarchy.base.join(&name);
            std::fs::create_dir(&dir)
                .map_err(|e| format!("cannot create the cgroup {}: {e}", dir.display()))?;
            let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
                .map_err(|_| "a cgroup path with a NUL byte".to_owned())?;
            cgroup.dirs.push((dir.clone(), hierarchy.version));
            cgroup.join.push(procs);
            if for_memory && let Some(bytes) = limits.memory_bytes {
                set_memory_limit(&dir, hierarchy.version, bytes)?;
                cgroup.memory = Some((dir.clone(), hierarchy.version));
            }
            if for_pids && let Some(processes) = limits.processes {
                write(&dir.join("pids.max"), &processes.to_string())?;
                cgroup.pids = Some(dir.clone());
            }
        }
        Ok(Some(cgroup))
    }
}

/// A server's cgroups (one per hierarchy it needs), removed when dropped if empty.
#[derive(Debug)]
pub(crate) struct ServerCgroup {
    /// The first is where membership is read.
    dirs: Vec<(PathBuf, Version)>,
    /// Each dir's `cgroup.procs`, ready before `fork`.
    join: Vec<CString>,
    /// Where the memory limit is, and the OOM kills counted.
    memory: Option<(PathBuf, Version)>,
    pids: Option<PathBuf>,
    limits: StdioLimits,
}

impl ServerCgroup {
    pub(crate) fn limits(&self) -> StdioLimits {
        StdioLimits {
            memory_bytes: self.memory.as_ref().and(self.limits.memory_bytes),
            processes: self.pids.as_ref().and(self.limits.processes),
        }
    }

    /// Moves the calling process into the cgroups: run in the child between `fork` and
    /// `exec`, so only `open`, `write` and `close` on paths made before the fork.
    pub(crate) fn join_in_child(&self) -> std::io::Result<()> {
        use nix::libc;
        for path in &self.join {
            // SAFETY: a NUL-terminated path owned by `self`, and a two-byte buffer; all
            // three calls are async-signal-safe.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0" is the writing process itself.
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                let error = std::io::Error::last_os_error();
                libc::close(fd);
                if written != 1 {
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// The processes in the cgroup now.
    pub(crate) fn members(&self) -> Vec<i32> {
        self.dirs
            .first()
            .map(|(dir, _)| procs_in(dir))
            .unwrap_or_default()
    }

    /// `signal` to every process in the cgroup; SIGKILL through `cgroup.kill` where v2
    /// has it (no process can fork past it). Without it a process may fork between the
    /// reading and the kill: callers send SIGKILL again while any is left.
    pub(crate) fn signal(&self, signal: Signal) {
        if signal == Signal::SIGKILL
            && let Some((dir, Version::V2)) = self.dirs.first()
            && write(&dir.join("cgroup.kill"), "1").is_ok()
        {
            return;
        }
        for pid in self.members() {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), signal);
        }
    }

    /// How many processes the kernel killed for going over the memory limit.
    pub(crate) fn oom_kills(&self) -> u64 {
        let Some((dir, version)) = &self.memory else {
            return 0;
        };
        let file = match version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        counter(&dir.join(file), "oom_kill")
    }

    /// How many times a new process was refused for the process limit.
    pub(crate) fn forks_refused(&self) -> u64 {
        self.pids
            .as_ref()
            .map_or(0, |dir| counter(&dir.join("pids.events"), "max"))
    }

    /// Why the server's processes ended, as far as the cgroup knows.
    pub(crate) fn explain(&self) -> Option<String> {
        let limits = self.limits();
        if self.oom_kills() > 0 {
            let limit = limits.memory_bytes.map(mib).unwrap_or_default();
            return Some(format!("it went over its memory limit of {limit}"));
        }
        if self.forks_refused() > 0 {
            let limit = limits.processes.unwrap_or_default();
            return Some(format!(
                "it reached its limit of {limit} processes and threads"
            ));
        }
        None
    }

    /// Removes the cgroups; false while processes remain in one.
    pub(crate) fn remove(&self) -> bool {
        self.dirs
            .iter()
            .all(|(dir, _)| std::fs::remove_dir(dir).is_ok() || !dir.exists())
    }
}

impl Drop for ServerCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `bytes` in MiB, as the operator configured it.
fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes / (1024 * 1024))
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn set_memory_limit(dir: &Path, version: Version, bytes: u64) -> Result<(), String> {
    let bytes = bytes.to_string();
    match version {
        Version::V1 => {
            write(&dir.join("memory.limit_in_bytes"), &bytes)?;
            // With swap, the limit would only move the excess to swap.
            let swap = dir.join("memory.memsw.limit_in_bytes");
            if swap.exists() {
                write(&swap, &bytes)?;
            }
        }
        Version::V2 => {
            write(&dir.join("memory.max"), &bytes)?;
            // Over the limit, the whole server goes, not just its largest process.
            let group = dir.join("memory.oom.group");
            if group.exists() {
                write(&group, "1")?;
            }
            let swap = dir.join("memory.swap.max");
            if swap.exists() {
                write(&swap, "0")?;
            }
        }
    }
    Ok(())
}

/// `name N` in a flat-keyed cgroup file.
fn counter(path: &Path, name: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(' ')?;
            (key == name).then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// The leaf a service alone in its v2 cgroup moves itself into (see the module's doc);
/// the watchdog leaves it alone.
pub(crate) const SERVICE_LEAF: &str = "service";

/// Enables v2's `memory` and `pids` controllers for the servers' cgroups, where the
/// service's cgroup offers them: at once where the kernel allows (the real root, or a
/// cgroup without processes), else after moving the service into `<base>/service` if
/// it is alone in its cgroup. Says which are on.
fn enable_v2_controllers(own: &Path, base: &Path) -> (bool, bool) {
    let offered = std::fs::read_to_string(own.join("cgroup.controllers")).unwrap_or_default();
    let wanted: Vec<&str> = ["memory", "pids"]
        .into_iter()
        .filter(|c| offered.split_whitespace().any(|o| o == *c))
        .collect();
    if wanted.is_empty() {
        return (false, false);
    }
    let enable = |dir: &Path, controller: &str| {
        std::fs::write(dir.join("cgroup.subtree_control"), format!("+{controller}")).is_ok()
    };
    let mut on: Vec<&str> = wanted.iter().copied().filter(|c| enable(own, c)).collect();
    if on.len() < wanted.len() && alone_in(own) {
        let leaf = base.join(SERVICE_LEAF);
        let moved = std::fs::create_dir(&leaf).is_ok()
            && std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string()).is_ok();
        if moved {
            tracing::info!(cgroup = %leaf.display(), "moved the service into a leaf cgroup, so its servers' cgroups can have memory and pids limits");
            on = wanted.iter().copied().filter(|c| enable(own, c)).collect();
        } else {
            let _ = std::fs::remove_dir(&leaf);
        }
    }
    let on: Vec<&str> = on.into_iter().filter(|c| enable(base, c)).collect();
    (on.contains(&"memory"), on.contains(&"pids"))
}

/// Whether the service is the only process in the cgroup `dir`.
fn alone_in(dir: &Path) -> bool {
    let me = std::process::id() as i32;
    procs_in(dir).into_iter().all(|pid| pid == me)
}

/// The processes in the cgroup `dir` (none if it cannot be read).
fn procs_in(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// `mcp-pool-<pid>-<start time>`: names one instance even where pids are reused.
fn instance_name(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let start = super::tree::start_time(pid, &stat)?;
    Some(format!("mcp-pool-{pid}-{start}"))
}

/// Empties and removes what instances that are gone left beside this one: their
/// watchdog killed what it could when they died, this kills what is left. Each
/// directory is tried once; one still busy is left for the next start.
fn remove_stale(own_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(own_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("mcp-pool-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        if instance_name(pid).is_some_and(|live| name.to_str() == Some(live.as_str())) {
            continue;
        }
        let base = entry.path();
        for server in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let dir = server.path();
            if !dir.is_dir() {
                continue;
            }
            for pid in procs_in(&dir) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = std::fs::remove_dir(&dir);
        }
        let _ = std::fs::remove_dir(&base);
    }
}

/// A cgroup filesystem from `/proc/self/mountinfo`.
struct CgroupMount {
    version: Version,
    point: PathBuf,
    /// The cgroup the mount shows at its point (`/` unless a namespace or bind mount).
    root: String,
    options: String,
}

impl CgroupMount {
    /// `id parent major:minor root point options [optional…] - fstype source super`.
    fn parse(line: &str) -> Option<Self> {
        let (before, after) = line.split_once(" - ")?;
        let fields: Vec<&str> = before.split(' ').collect();
        let mut after = after.split(' ');
        let version = match after.next()? {
            "cgroup2" => Version::V2,
            "cgroup" => Version::V1,
            _ => return None,
        };
        let _source = after.next();
        Some(Self {
            version,
            root: unescape(fields.get(3)?),
            point: PathBuf::from(unescape(fields.get(4)?)),
            options: after.next().unwrap_or_default().to_owned(),
        })
    }

    fn has(&self, controller: &str) -> bool {
        self.options.split(',').any(|o| o == controller)
    }

    /// The service's cgroup in this hierarchy, relative to the mount's point.
    fn own_path(&self, proc_self_cgroup: &str) -> Option<String> {
        let path = proc_self_cgroup.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let matches = match self.version {
                Version::V2 => id == "0" && controllers.is_empty(),
                Version::V1 => {
                    !controllers.is_empty() && controllers.split(',').all(|c| self.has(c))
                }
            };
            matches.then(|| path.to_owned())
        })?;
        // Whole components only: a mount of `/a` does not show `/ab`.
        let root = self.root.trim_end_matches('/');
        let relative = path.strip_prefix(root)?;
        (relative.is_empty() || relative.starts_with('/')).then(|| relative.to_owned())
    }
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.clone().take(3).collect();
            if let Ok(byte) = u8::from_str_radix(&code, 8) {
                out.push(byte as char);
                for _ in 0..3 {
                    chars.next();
                }
                continue;
            }
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_mounts_and_the_services_place_in_them_are_read() {
        let v1 = CgroupMount::parse(
            "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory",
        )
        .expect("a v1 mount");
        assert_eq!(v1.version, Version::V1);
        assert!(v1.has("memory") && !v1.has("pids"));
        let own = "8:pids:/\n4:memory:/process_api/abc\n0::/\n";
        assert_eq!(v1.own_path(own).as_deref(), Some("/process_api/abc"));

        let v2 = CgroupMount::parse(
            "40 25 0:35 /user.slice /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate",
        )
        .expect("a v2 mount");
        assert_eq!(v2.version, Version::V2);
        let own = "0::/user.slice/session-1.scope\n";
        assert_eq!(v2.own_path(own).as_deref(), Some("/session-1.scope"));
        // A cgroup outside what the mount shows cannot be reached through it.
        assert_eq!(v2.own_path("0::/system.slice\n"), None);
        assert_eq!(v2.own_path("0::/user.slicex/a\n"), None);

        assert!(CgroupMount::parse("22 1 0:5 / /proc rw - proc proc rw").is_none());
        assert_eq!(unescape(r"/a\040b"), "/a b");
    }

    #[test]
    fn counters_are_read_by_name() {
        let dir = std::env::temp_dir().join(format!("cgroup-counter-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("memory.oom_control");
        std::fs::write(&file, "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n").unwrap();
        assert_eq!(counter(&file, "oom_kill"), 2);
        assert_eq!(counter(&file, "missing"), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
