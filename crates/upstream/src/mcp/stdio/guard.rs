//! The watchdog of the service's stdio servers: a `/bin/sh` that holds the list of live
//! process groups (and the groups their processes lead) and kills them, and empties the
//! servers' cgroups, when the service's end of its pipe closes, even after a SIGKILL of
//! the service; and the one-second survey of what each server runs ([`tree`]).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};

use super::cgroup::{self, ServerCgroup};
use super::tree::{self, GroupUsage};

/// Processes of the service's live stdio servers beyond their leaders (each leader is
/// already counted as a connection), in their groups or not: what
/// `pool.max_stdio_processes` also counts.
pub(crate) fn extra_group_processes() -> usize {
    guard()
        .survey()
        .values()
        .map(|usage| usage.processes.saturating_sub(1))
        .sum()
}

/// What each live stdio server runs now, by its process group: processes and resident
/// memory (a fresh reading of `/proc`).
pub fn group_usage() -> BTreeMap<i32, GroupUsage> {
    guard().survey()
}

/// A live server's group as the guard keeps it: what left the group, and its cgroup
/// where it has one (every process in it is the server's).
#[derive(Debug, Clone, Default)]
pub(super) struct LiveGroup {
    pub(super) escaped: tree::Escaped,
    pub(super) cgroup: Option<Arc<ServerCgroup>>,
    sandbox: Option<tree::SandboxShape>,
}

/// The watchdog: `/bin/sh` reading `+pgid` and `-pgid` lines, in its own process group so
/// a terminal's Ctrl-C does not reach it. When its stdin closes (the service exited, or
/// was killed with SIGKILL) it kills every group still listed and every process in the
/// servers' cgroups (its arguments are the directories that hold them), then exits.
pub(crate) struct GroupGuard {
    pipe: Mutex<Option<std::process::ChildStdin>>,
    /// Each live group, with what left it.
    live: Mutex<BTreeMap<i32, LiveGroup>>,
    page_bytes: u64,
}

const GUARD_SCRIPT: &str = r#"
trap '' INT TERM HUP
groups=" "
while IFS= read -r line; do
  case "$line" in
    +*) groups="$groups${line#+} " ;;
    -*) id="${line#-}"
        case "$groups" in *" $id "*) groups="${groups%% $id *} ${groups#* $id }" ;; esac ;;
  esac
done
for group in $groups; do kill -KILL "-$group" 2>/dev/null; done
for pass in 1 2 3; do
  for base in "$@"; do
    for server in "$base"/server-*/; do
      [ -e "${server}cgroup.procs" ] || continue
      [ -e "${server}cgroup.kill" ] && echo 1 > "${server}cgroup.kill"
      while IFS= read -r pid; do kill -KILL "$pid" 2>/dev/null; done < "${server}cgroup.procs"
    done
  done
done
"#;

/// The process's one guard, started on first use.
pub fn guard() -> &'static GroupGuard {
    static GUARD: OnceLock<GroupGuard> = OnceLock::new();
    GUARD.get_or_init(|| {
        use std::os::unix::process::CommandExt as _;
        let started = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(GUARD_SCRIPT)
            .arg("mcp-pool-guard")
            .args(cgroup::cgroups().bases())
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        let pipe = match started {
            Ok(mut child) => {
                let pipe = child.stdin.take();
                // Reaped by a thread of its own; it only exits after the service.
                std::thread::spawn(move || child.wait());
                pipe
            }
            Err(error) => {
                tracing::warn!(%error, "no stdio process guard: children may outlive a crash");
                None
            }
        };
        // Processes that leave a group are found while their parent lives: look often.
        let surveyor = std::thread::Builder::new()
            .name("stdio-survey".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(tree::SURVEY_EVERY);
                    guard().survey();
                }
            });
        if let Err(error) = surveyor {
            tracing::warn!(%error, "stdio processes are surveyed only when counted or stopped");
        }
        GroupGuard {
            pipe: Mutex::new(pipe),
            live: Mutex::new(BTreeMap::new()),
            page_bytes: tree::page_bytes(),
        }
    })
}

impl GroupGuard {
    fn tell(&self, line: String) {
        if let Some(pipe) = self.pipe.lock().expect("guard pipe").as_mut() {
            // Lines are far below PIPE_BUF: each write is atomic, and the guard only reads.
            let _ = pipe.write_all(line.as_bytes());
        }
    }

    // The watchdog is told while the list is locked, so that it hears of a group in the
    // order the list changed (a survey's `+` never after the `-` of its server's end).

    pub(super) fn add(
        &self,
        pgid: i32,
        cgroup: Option<Arc<ServerCgroup>>,
        sandbox: Option<tree::SandboxShape>,
    ) {
        let mut live = self.live.lock().expect("guard list");
        live.insert(
            pgid,
            LiveGroup {
                escaped: tree::Escaped::default(),
                cgroup,
                sandbox,
            },
        );
        self.tell(format!("+{pgid}\n"));
    }

    /// Forgets the group and the groups its processes led.
    pub(super) fn remove(&self, pgid: i32) {
        let mut live = self.live.lock().expect("guard list");
        let groups = live
            .remove(&pgid)
            .map(|e| e.escaped.groups)
            .unwrap_or_default();
        for group in std::iter::once(pgid).chain(groups) {
            self.tell(format!("-{group}\n"));
        }
    }

    /// What left the group, as last read.
    pub(super) fn escaped(&self, pgid: i32) -> LiveGroup {
        self.live
            .lock()
            .expect("guard list")
            .get(&pgid)
            .cloned()
            .unwrap_or_default()
    }

    /// Reads `/proc` once: records what left each live group (listing the groups its
    /// processes lead, so that a SIGKILL of the service ends them too) and tells what
    /// each group's server runs.
    pub(super) fn survey(&self) -> BTreeMap<i32, GroupUsage> {
        if self.live.lock().expect("guard list").is_empty() {
            return BTreeMap::new();
        }
        let table = tree::ProcessTable::read();
        let mut usage = BTreeMap::new();
        let mut live = self.live.lock().expect("guard list");
        for (pgid, group) in live.iter_mut() {
            let in_cgroup = group
                .cgroup
                .as_ref()
                .map(|cgroup| cgroup.members())
                .unwrap_or_default();
            let (now, new_groups) =
                group
                    .escaped
                    .survey(*pgid, in_cgroup, &table, self.page_bytes, group.sandbox);
            usage.insert(*pgid, now);
            for group in new_groups {
                self.tell(format!("+{group}\n"));
            }
        }
        usage
    }
}

/// Whether the guard lists a group (for tests).
#[cfg(test)]
pub(crate) fn guard_lists(pgid: i32) -> bool {
    guard().live.lock().expect("guard list").contains_key(&pgid)
}
