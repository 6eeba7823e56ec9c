//! The HTTP clients remote upstream sessions (streamable HTTP, legacy SSE) use.
//!
//! Connections are kept alive, and HTTP/2 is spoken where a TLS server offers it by ALPN.
//! An HTTP/2 client puts every request to one server on one connection and never opens a
//! second when the server's stream limit is reached (RFC 9113 §9.1; hyper follows it).
//! Every MCP session holds a stream for as long as it lives (its standalone GET), so if
//! all sessions shared one client, the session past the server's limit (nginx: 128) would
//! wait forever, and every call of every user with it. Sessions on `https` servers
//! therefore lease a client in groups of at most `sessions_per_client`: a server sees one
//! connection per group, and a group's client goes (its idle connections closed) when its
//! last session does. Plain `http` never becomes HTTP/2 (no ALPN), so the sessions on one
//! origin share one client, whose idle HTTP/1.1 connections serve any of them, and which
//! goes with the origin's last session: a deleted server is left no idle connection (a
//! server waiting for its clients to leave could not stop for the idle timeout).
//!
//! Every client comes from the [`Dialer`], which holds the TLS configuration (its root
//! store, ~250 KiB once loaded, built once) and applies the URL policy to every dial.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::security::{Dialer, Redirects, UrlPolicy};

/// Hands out HTTP clients: for `http` one per origin, and for `https` each to at most
/// `sessions_per_client` sessions at once.
pub struct UpstreamHttp {
    groups: Arc<Groups>,
}

struct Groups {
    dialer: Dialer,
    sessions_per_client: usize,
    clients: Mutex<GroupClients>,
}

#[derive(Default)]
struct GroupClients {
    next_id: u64,
    all: Vec<GroupClient>,
}

struct GroupClient {
    id: u64,
    /// The `http` origin it serves alone; `None`: a group of `https` sessions.
    origin: Option<String>,
    client: reqwest::Client,
    sessions: usize,
}

/// A session's client. The transport clones it into its tasks; the session's place in
/// its group is given back when the last clone is dropped.
#[derive(Clone)]
pub struct LeasedClient {
    pub client: reqwest::Client,
    _lease: Arc<Lease>,
}

struct Lease {
    groups: Arc<Groups>,
    client: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut clients = self.groups.lock();
        if let Some(index) = clients.all.iter().position(|c| c.id == self.client) {
            clients.all[index].sessions -= 1;
            if clients.all[index].sessions == 0 {
                clients.all.swap_remove(index);
            }
        }
    }
}

impl std::fmt::Debug for UpstreamHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamHttp")
            .field("group_clients", &self.group_clients())
            .field("sessions_per_client", &self.groups.sessions_per_client)
            .finish()
    }
}

impl UpstreamHttp {
    /// `extra_ca_file`: PEM certificates trusted besides the system's (a company CA).
    pub fn new(
        connect_timeout: Duration,
        policy: Arc<UrlPolicy>,
        sessions_per_client: usize,
        extra_ca_file: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let groups = Groups {
            dialer: Dialer::new(policy, connect_timeout, extra_ca_file)?,
            sessions_per_client: sessions_per_client.max(1),
            clients: Mutex::default(),
        };
        Ok(Self {
            groups: Arc::new(groups),
        })
    }

    /// The client for one session on `url`: for `http`, its origin's; for `https`, one
    /// whose group has room, else a new one.
    pub fn lease(&self, url: &url::Url) -> LeasedClient {
        let origin = (url.scheme() != "https").then(|| url.origin().ascii_serialization());
        let per_client = self.groups.sessions_per_client;
        let mut clients = self.groups.lock();
        let index = match clients.all.iter().position(|c| match &origin {
            Some(origin) => c.origin.as_ref() == Some(origin),
            None => c.origin.is_none() && c.sessions < per_client,
        }) {
            Some(index) => index,
            None => {
                let id = clients.next_id;
                clients.next_id += 1;
                clients.all.push(GroupClient {
                    id,
                    origin,
                    client: self.groups.build(),
                    sessions: 0,
                });
                clients.all.len() - 1
            }
        };
        let chosen = &mut clients.all[index];
        chosen.sessions += 1;
        LeasedClient {
            client: chosen.client.clone(),
            _lease: Arc::new(Lease {
                groups: self.groups.clone(),
                client: chosen.id,
            }),
        }
    }

    /// From `pool` and `security` settings.
    pub fn from_settings(
        settings: &crate::config::Settings,
        policy: Arc<UrlPolicy>,
    ) -> anyhow::Result<Self> {
        let extra_ca_file = &settings.security.extra_ca_file;
        Self::new(
            Duration::from_secs(settings.pool.connect_timeout_secs),
            policy,
            settings.pool.sessions_per_http_client as usize,
            (!extra_ca_file.is_empty()).then(|| Path::new(extra_ca_file)),
        )
    }

    /// The dialer, for other clients that dial user-chosen URLs (OAuth): the same TLS
    /// configuration (extra CA included) and policy.
    pub fn dialer(&self) -> &Dialer {
        &self.groups.dialer
    }

    pub fn url_policy(&self) -> &Arc<UrlPolicy> {
        self.groups.dialer.policy()
    }

    /// How many `https` group clients exist (each with its own connections).
    pub(crate) fn group_clients(&self) -> usize {
        self.groups
            .lock()
            .all
            .iter()
            .filter(|c| c.origin.is_none())
            .count()
    }
}

impl Groups {
    fn lock(&self) -> std::sync::MutexGuard<'_, GroupClients> {
        self.clients.lock().expect("upstream http clients lock")
    }

    fn build(&self) -> reqwest::Client {
        // The URL was checked by the URL policy; a redirect would lead elsewhere.
        self.dialer.client(Redirects::Never, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream_http(per_client: usize) -> UpstreamHttp {
        let policy = Arc::new(UrlPolicy::from_settings(
            &crate::config::Settings::defaults().security,
        ));
        UpstreamHttp::new(Duration::from_secs(5), policy, per_client, None).unwrap()
    }

    #[test]
    fn https_sessions_share_a_client_in_groups_and_a_client_goes_with_its_last_session() {
        let http = upstream_http(2);
        let https = url::Url::parse("https://mcp.example.com/mcp").unwrap();
        // A transport clones its client into its tasks: still one session.
        let leases: Vec<(LeasedClient, LeasedClient)> = (0..5)
            .map(|_| {
                let lease = http.lease(&https);
                (lease.clone(), lease)
            })
            .collect();
        assert_eq!(http.group_clients(), 3, "five sessions in groups of two");
        let plain = url::Url::parse("http://mcp.example.com/mcp").unwrap();
        let plain_leases: Vec<LeasedClient> = (0..5).map(|_| http.lease(&plain)).collect();
        assert_eq!(http.group_clients(), 3, "plain http is in no group");
        assert_eq!(http.groups.lock().all.len(), 4, "one client for the origin");
        drop(leases);
        assert_eq!(http.group_clients(), 0, "clients nobody holds are gone");
        drop(plain_leases);
        assert!(
            http.groups.lock().all.is_empty(),
            "the origin's client goes with its last session"
        );
        let first = http.lease(&https);
        let second = http.lease(&https);
        assert_eq!(http.group_clients(), 1, "a group with room is filled first");
        drop((first, second));
    }

    #[test]
    fn an_unreadable_or_empty_ca_file_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let policy = Arc::new(UrlPolicy::from_settings(
            &crate::config::Settings::defaults().security,
        ));
        for path in [empty, dir.path().join("missing.pem")] {
            let error = UpstreamHttp::new(Duration::from_secs(5), policy.clone(), 1, Some(&path))
                .expect_err("refused");
            assert!(
                format!("{error:#}").contains("security.extra_ca_file"),
                "{error:#}"
            );
        }
    }
}
