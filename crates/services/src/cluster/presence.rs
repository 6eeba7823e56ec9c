//! Knowing at once that an instance on this host ended, however it ended.
//!
//! Each instance holds an exclusive lock (`flock`) on its own file in
//! `<data_dir>/instances/` for as long as its process lives. The kernel drops the lock
//! when the process ends, also on SIGKILL or an OOM kill, so a file whose lock can be
//! taken belongs to an instance that is gone: no pid that may be reused, no start time,
//! no clock. Locks are per open file, so even two instances in one process (tests) see
//! each other's locks.
//!
//! A lock only tells something to processes on the same kernel: on a network filesystem
//! mounted without locking, another host's lock is invisible here. Each file therefore
//! names the boot that wrote it (`/proc/sys/kernel/random/boot_id`) and only files of
//! this boot are judged; the others are left to their own host or to the heartbeat
//! timeout. Without a boot id (not Linux) there is no presence file at all.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::domain::InstanceId;

const DIR: &str = "instances";
const SUFFIX: &str = ".lock";
const STAGING: &str = ".tmp";
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// A staging file this old whose lock is free was left by a process that died while
/// creating its presence file.
const STALE_STAGING: Duration = Duration::from_secs(60);

/// This instance's locked file: the lock lasts as long as this value, at most as long as
/// the process.
pub(crate) struct Presence {
    dir: PathBuf,
    path: PathBuf,
    boot: String,
    _file: File,
}

/// The file of an instance that ended, still locked here so no other scan acts on it
/// meanwhile; [`Ended::forget`] it once the instance's row is gone.
pub struct Ended {
    pub instance: InstanceId,
    path: PathBuf,
    _file: File,
}

impl Ended {
    pub fn forget(self) {
        if let Err(e) = fs::remove_file(&self.path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(error = %e, path = %self.path.display(), "could not remove an ended instance's presence file");
        }
    }
}

impl Presence {
    /// Creates and locks this instance's file in `<data_dir>/instances/`.
    pub fn hold(data_dir: &Path, me: InstanceId) -> io::Result<Self> {
        Self::hold_as(data_dir, me, boot_id()?)
    }

    fn hold_as(data_dir: &Path, me: InstanceId, boot: String) -> io::Result<Self> {
        let dir = data_dir.join(DIR);
        fs::create_dir_all(&dir)?;
        // Written and locked under a name scans skip, then renamed into place: a file a
        // scan judges is complete and locked for as long as its process lives.
        let staging = dir.join(format!(".{me}{STAGING}"));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&staging)?;
        file.try_lock()?;
        file.write_all(format!("{boot}\n").as_bytes())?;
        let path = dir.join(format!("{me}{SUFFIX}"));
        fs::rename(&staging, &path)?;
        Ok(Self {
            dir,
            path,
            boot,
            _file: file,
        })
    }

    /// The instances whose presence files, written on this boot, are no longer locked:
    /// their processes are gone. Files it cannot read or judge are left alone.
    pub fn ended(&self) -> io::Result<Vec<Ended>> {
        let mut ended = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path == self.path {
                continue;
            }
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if let Some(id) = name.strip_suffix(SUFFIX) {
                let Ok(id) = uuid::Uuid::parse_str(id) else {
                    continue;
                };
                match self.judge(&path) {
                    Ok(Some(file)) => ended.push(Ended {
                        instance: InstanceId(id),
                        path,
                        _file: file,
                    }),
                    Ok(None) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::debug!(error = %e, path = %path.display(), "a presence file was not judged")
                    }
                }
            } else if name.starts_with('.') && name.ends_with(STAGING) {
                remove_stale_staging(&path);
            }
        }
        Ok(ended)
    }

    /// The file, locked here, if it was written on this boot and its lock is free.
    fn judge(&self, path: &Path) -> io::Result<Option<File>> {
        let mut file = File::open(path)?;
        let mut boot = String::new();
        file.read_to_string(&mut boot)?;
        if boot.trim() != self.boot {
            return Ok(None);
        }
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }

    /// A clean stop, once the instance's row is gone: nothing is left to judge.
    pub fn release(&self) {
        if let Err(e) = fs::remove_file(&self.path) {
            tracing::warn!(error = %e, "could not remove this instance's presence file");
        }
    }
}

fn remove_stale_staging(path: &Path) {
    let old = fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > STALE_STAGING));
    if old
        && let Ok(file) = File::open(path)
        && file.try_lock().is_ok()
    {
        let _ = fs::remove_file(path);
    }
}

fn boot_id() -> io::Result<String> {
    let boot = fs::read_to_string(BOOT_ID)?.trim().to_owned();
    if boot.is_empty() {
        return Err(io::Error::other("empty boot id"));
    }
    Ok(boot)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ended: Vec<Ended>) -> Vec<InstanceId> {
        ended.into_iter().map(|e| e.instance).collect()
    }

    #[test]
    fn a_held_file_is_live_and_a_released_lock_means_ended() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (InstanceId::generate(), InstanceId::generate());
        let first = Presence::hold_as(dir.path(), a, "boot-1".into()).unwrap();
        let second = Presence::hold_as(dir.path(), b, "boot-1".into()).unwrap();
        assert!(second.ended().unwrap().is_empty(), "the first is alive");
        assert!(first.ended().unwrap().is_empty(), "and so is the second");

        drop(first); // what the kernel does when the process dies
        let ended = second.ended().unwrap();
        assert_eq!(
            ids(second.ended().unwrap()),
            Vec::new(),
            "locked by the scan"
        );
        let only = ended.into_iter().next().expect("the first ended");
        assert_eq!(only.instance, a);
        only.forget();
        assert!(second.ended().unwrap().is_empty(), "its file is gone");
    }

    #[test]
    fn files_of_another_boot_are_never_judged() {
        let dir = tempfile::tempdir().unwrap();
        let other_host = Presence::hold_as(dir.path(), InstanceId::generate(), "boot-2".into());
        drop(other_host.unwrap()); // its lock means nothing here
        let me = Presence::hold_as(dir.path(), InstanceId::generate(), "boot-1".into()).unwrap();
        assert!(me.ended().unwrap().is_empty());
    }

    #[test]
    fn a_clean_stop_leaves_nothing_to_judge() {
        let dir = tempfile::tempdir().unwrap();
        let first = Presence::hold_as(dir.path(), InstanceId::generate(), "boot-1".into());
        let first = first.unwrap();
        first.release();
        drop(first);
        let me = Presence::hold_as(dir.path(), InstanceId::generate(), "boot-1".into()).unwrap();
        assert!(me.ended().unwrap().is_empty());
        assert_eq!(fs::read_dir(dir.path().join(DIR)).unwrap().count(), 1);
    }
}
