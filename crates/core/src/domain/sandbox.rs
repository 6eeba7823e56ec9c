//! What a stdio server's sandbox lets it reach: its network mode and the host paths an
//! admin shares with it beyond the system, its command and its private home.
//!
//! Only admins write these (in a preset, or for a catalog runtime in the configuration):
//! a user fills in a preset's slots and never widens what the server sees.

use serde::Deserialize;

use crate::invalid::InvalidInput;

/// Most paths of each kind one preset may share.
const MAX_PATHS: usize = 32;
/// Most host names in one allow list.
const MAX_HOSTS: usize = 64;
const MAX_PATH_BYTES: usize = 1024;

/// What a sandboxed server may reach on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// An empty network namespace: its own loopback, nothing else.
    None,
    /// Outbound only through the service's proxy, under the URL policy (and the
    /// preset's host allow list); no route to the host's loopback.
    Egress,
    /// The host's network as the service has it: an admin's explicit choice.
    Host,
}

impl NetworkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Egress => "egress",
            NetworkMode::Host => "host",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        match raw {
            "none" => Ok(NetworkMode::None),
            "egress" => Ok(NetworkMode::Egress),
            "host" => Ok(NetworkMode::Host),
            other => Err(InvalidInput::value(format!(
                "sandbox.network '{other}' is not none, egress or host"
            ))),
        }
    }
}

/// An admin's sandbox settings for the servers of one preset.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SandboxSpec {
    /// `None`: the pool's default (`pool.sandbox.network`).
    pub network: Option<NetworkMode>,
    /// Host paths the server may read (a runtime, a shared data set), at the same path.
    pub read_only_paths: Vec<String>,
    /// Host paths the server may write, at the same path (shared by every server of the
    /// preset: the admin's choice).
    pub writable_paths: Vec<String>,
    /// With `egress`: the only host names (or `*.suffix` patterns) the proxy lets the
    /// server reach; empty: any the URL policy allows.
    pub allow_hosts: Vec<String>,
}

impl SandboxSpec {
    pub fn is_default(&self) -> bool {
        *self == SandboxSpec::default()
    }

    pub fn validate(&self) -> Result<(), InvalidInput> {
        for (field, paths) in [
            ("sandbox.readOnlyPaths", &self.read_only_paths),
            ("sandbox.writablePaths", &self.writable_paths),
        ] {
            if paths.len() > MAX_PATHS {
                return Err(InvalidInput::value(format!(
                    "{field} has more than {MAX_PATHS} entries"
                )));
            }
            for path in paths {
                check_path(field, path)?;
            }
        }
        if self.allow_hosts.len() > MAX_HOSTS {
            return Err(InvalidInput::value(format!(
                "sandbox.allowHosts has more than {MAX_HOSTS} entries"
            )));
        }
        for host in &self.allow_hosts {
            let bare = host.strip_prefix("*.").unwrap_or(host);
            let valid = !bare.is_empty()
                && bare.len() <= 253
                && bare
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
            if !valid {
                return Err(InvalidInput::value(format!(
                    "sandbox.allowHosts entry '{host}' is not a host name, an address or *.suffix"
                )));
            }
        }
        if !self.allow_hosts.is_empty() && self.network.is_some_and(|n| n != NetworkMode::Egress) {
            return Err(InvalidInput::value(
                "sandbox.allowHosts applies only to network \"egress\"",
            ));
        }
        Ok(())
    }
}

/// An absolute, normalised path: no `..`, `.` or empty parts, nothing the sandbox's own
/// layout owns.
fn check_path(field: &str, path: &str) -> Result<(), InvalidInput> {
    let refuse = |why: &str| Err(InvalidInput::value(format!("{field} entry '{path}' {why}")));
    if path.len() > MAX_PATH_BYTES || path.contains('\0') {
        return refuse("is too long or holds NUL");
    }
    let Some(rest) = path.strip_prefix('/') else {
        return refuse("is not an absolute path");
    };
    if rest.is_empty() || rest.split('/').any(|part| matches!(part, "" | "." | "..")) {
        return refuse("must name a folder or file below / without '.', '..' or '//'");
    }
    let top = rest.split('/').next().unwrap_or_default();
    let own = |base: &str| path == base || path.starts_with(&format!("{base}/"));
    if matches!(top, "proc" | "dev" | "sys")
        || path == "/tmp"
        || own("/home/mcp")
        || own("/run/mcp-pool")
    {
        return refuse(
            "is a part of the sandbox it makes itself (/proc, /dev, /sys, /tmp, /home/mcp, /run/mcp-pool)",
        );
    }
    Ok(())
}

/// Whether `host` is allowed by a list of names and `*.suffix` patterns (case-blind);
/// an empty list allows every host.
pub fn host_allowed(allow: &[String], host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    allow.is_empty()
        || allow.iter().any(|entry| {
            let entry = entry.to_ascii_lowercase();
            match entry.strip_prefix("*.") {
                Some(suffix) => host.len() > suffix.len() && host.ends_with(&format!(".{suffix}")),
                None => host == entry,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_absolute_and_plain() {
        let with = |path: &str| SandboxSpec {
            read_only_paths: vec![path.into()],
            ..Default::default()
        };
        assert!(with("/opt/node").validate().is_ok());
        for bad in [
            "opt",
            "/",
            "/opt/../etc",
            "/opt//x",
            "/proc/1",
            "/home/mcp",
            "/tmp",
        ] {
            assert!(with(bad).validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn allow_lists_match_names_and_suffixes() {
        let allow = vec!["api.example.com".to_owned(), "*.github.com".to_owned()];
        assert!(host_allowed(&allow, "API.example.com."));
        assert!(host_allowed(&allow, "raw.github.com"));
        assert!(!host_allowed(&allow, "github.com"));
        assert!(!host_allowed(&allow, "example.com"));
        assert!(host_allowed(&[], "anything"));
    }

    #[test]
    fn an_allow_list_needs_egress() {
        let spec = SandboxSpec {
            network: Some(NetworkMode::Host),
            allow_hosts: vec!["a.example".into()],
            ..Default::default()
        };
        assert!(spec.validate().is_err());
    }
}
