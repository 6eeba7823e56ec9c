//! Which remote MCP server URLs a user may register (server-side request forgery guard).
//!
//! Loopback, private, link-local and CGNAT ranges are refused unless the admin allows them;
//! cloud metadata addresses and reserved ranges are refused unless the host is listed in
//! `security.allowed_url_hosts`. IPv6 forms that carry an IPv4 address are judged by that
//! address too. The same policy runs twice: on the URL when it is saved (a clear error for
//! the user), and on every address a connection actually dials ([`GuardedResolver`],
//! [`UrlPolicy::resolve`]), which is what defeats DNS rebinding and late-resolving names.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use url::{Host, Url};

use crate::config::SecuritySettings;
use crate::invalid::InvalidInput;

const DNS_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AddressClass {
    Public,
    Loopback,
    Private,
    Metadata,
    Reserved,
}

impl AddressClass {
    fn describe(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "a loopback address",
            AddressClass::Private => "a private or link-local address",
            AddressClass::Metadata => "a cloud metadata address",
            AddressClass::Reserved => "a reserved or multicast address",
        }
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, ..] = ip.octets();
    // AWS/GCP/Azure IMDS, Alibaba, AWS ECS task credentials and EKS Pod Identity, Azure
    // WireServer (a public-looking address that only answers inside Azure).
    const METADATA: [Ipv4Addr; 5] = [
        Ipv4Addr::new(169, 254, 169, 254),
        Ipv4Addr::new(100, 100, 100, 200),
        Ipv4Addr::new(169, 254, 170, 2),
        Ipv4Addr::new(169, 254, 170, 23),
        Ipv4Addr::new(168, 63, 129, 16),
    ];
    if METADATA.contains(&ip) {
        AddressClass::Metadata
    } else if ip.is_loopback() || a == 0 {
        AddressClass::Loopback
    } else if ip.is_private() || ip.is_link_local() || (a == 100 && (64..128).contains(&b)) {
        AddressClass::Private
    } else if ip.is_multicast() || ip.is_broadcast() || a >= 240 {
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

fn classify_v6(v6: Ipv6Addr) -> AddressClass {
    let first = v6.segments()[0];
    // AWS IMDS and EKS Pod Identity over IPv6.
    if v6.segments()[..2] == [0xfd00, 0xec2] {
        AddressClass::Metadata
    } else if v6.is_loopback() || v6.is_unspecified() {
        AddressClass::Loopback
    } else if (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80 || (first & 0xffc0) == 0xfec0
    {
        // Unique local, link-local, and the deprecated site-local range.
        AddressClass::Private
    } else if v6.segments()[..3] == [0x64, 0xff9b, 1] {
        // Local-use NAT64 (RFC 8215): translated to addresses of the operator's network.
        AddressClass::Private
    } else if v6.is_multicast()
        || v6.segments()[..2] == [0x2001, 0xdb8]
        || v6.segments()[..4] == [0x100, 0, 0, 0]
    {
        // Multicast, documentation, discard-only.
        AddressClass::Reserved
    } else {
        AddressClass::Public
    }
}

/// The IPv4 addresses an IPv6 address delivers to: the forms that embed one
/// (IPv4-compatible, -mapped and -translated, NAT64 well-known and local-use prefixes,
/// 6to4, and both ends of Teredo). A dial to any of them is a dial to that IPv4 address.
fn embedded_v4(v6: Ipv6Addr) -> Vec<Ipv4Addr> {
    let o = v6.octets();
    let at = |i: [usize; 4]| Ipv4Addr::new(o[i[0]], o[i[1]], o[i[2]], o[i[3]]);
    let last32 = at([12, 13, 14, 15]);
    match v6.segments() {
        // ::a.b.c.d (compatible), ::ffff:a.b.c.d (mapped), ::ffff:0:a.b.c.d (translated)
        [0, 0, 0, 0, 0, 0 | 0xffff, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => vec![last32],
        // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052).
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => vec![last32],
        // NAT64 local-use 64:ff9b:1::/48 (RFC 8215): every RFC 6052 position it may use.
        [0x64, 0xff9b, 1, ..] => vec![
            at([6, 7, 9, 10]),
            at([7, 9, 10, 11]),
            at([9, 10, 11, 12]),
            last32,
        ],
        // 6to4 2002:a.b.c.d::/48.
        [0x2002, ..] => vec![at([2, 3, 4, 5])],
        // Teredo 2001:0::/32: the server, and the client (stored inverted).
        [0x2001, 0, ..] => vec![at([4, 5, 6, 7]), Ipv4Addr::from(!u32::from(last32))],
        _ => Vec::new(),
    }
}

/// Every class an address falls in: its own, and that of each IPv4 address it embeds.
fn classes(ip: IpAddr) -> Vec<AddressClass> {
    match ip {
        IpAddr::V4(v4) => vec![classify_v4(v4)],
        IpAddr::V6(v6) if v6.is_loopback() || v6.is_unspecified() => vec![classify_v6(v6)],
        IpAddr::V6(v6) => std::iter::once(classify_v6(v6))
            .chain(embedded_v4(v6).into_iter().map(classify_v4))
            .collect(),
    }
}

/// Turns a host name into addresses. The system resolver in production; tests script
/// one to play a DNS server that changes its answers (rebinding).
pub trait NameLookup: Send + Sync + 'static {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>>;
}

/// `getaddrinfo`, through tokio.
struct SystemLookup;

impl NameLookup for SystemLookup {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let host = host.to_owned();
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
    }
}

/// The IP address a URL names as its host, if it names one.
pub fn literal_host(url: &url::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        url::Host::Domain(_) => None,
    }
}

/// A dial refused by the policy: the address a name resolved to, or a literal, is one the
/// service does not reach.
#[derive(Debug, thiserror::Error)]
#[error("'{host}' {} {what}, which this service does not allow", verb(*.literal))]
pub struct AddressRefused {
    pub host: String,
    what: &'static str,
    /// The host is the address itself (an IP literal, or the peer of a connection).
    literal: bool,
}

#[derive(Clone)]
pub struct UrlPolicy {
    allow_loopback: bool,
    allow_private: bool,
    allowed_hosts: HashSet<String>,
    /// Addresses the names in `allowed_hosts` resolved to: a connection to one of them is
    /// a connection to a host the operator allowed, whatever class the address is.
    approved: Arc<std::sync::Mutex<HashSet<IpAddr>>>,
    lookup: Arc<dyn NameLookup>,
}

fn verb(literal: bool) -> &'static str {
    if literal { "is" } else { "resolves to" }
}

/// Bounds `approved` (names the operator listed resolve to few addresses).
const MAX_APPROVED: usize = 4096;

impl std::fmt::Debug for UrlPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlPolicy")
            .field("allow_loopback", &self.allow_loopback)
            .field("allow_private", &self.allow_private)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish_non_exhaustive()
    }
}

/// A host as the policy compares it: lower case, no trailing dot, no IPv6 brackets, an IP
/// address in its one canonical spelling.
fn normalize_host(host: &str) -> String {
    let host = host
        .trim()
        .trim_matches(['[', ']'])
        .trim_end_matches('.')
        .to_ascii_lowercase();
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host,
    }
}

impl UrlPolicy {
    pub fn from_settings(settings: &SecuritySettings) -> Self {
        Self {
            allow_loopback: settings.allow_loopback_urls,
            allow_private: settings.allow_private_urls,
            allowed_hosts: settings
                .allowed_url_hosts
                .iter()
                .map(|h| normalize_host(h))
                .collect(),
            approved: Arc::default(),
            lookup: Arc::new(SystemLookup),
        }
    }

    /// The same policy asking `lookup` for a name's addresses instead of the system's
    /// resolver: how a test plays a DNS server that changes its answers.
    pub fn with_lookup(self, lookup: Arc<dyn NameLookup>) -> Self {
        Self { lookup, ..self }
    }

    fn permits(&self, class: AddressClass) -> bool {
        match class {
            AddressClass::Public => true,
            AddressClass::Loopback => self.allow_loopback,
            AddressClass::Private => self.allow_private,
            AddressClass::Metadata | AddressClass::Reserved => false,
        }
    }

    /// The first class of `ip` (its own or an embedded IPv4's) the policy refuses.
    fn refused_class(&self, ip: IpAddr) -> Option<AddressClass> {
        classes(ip).into_iter().find(|class| !self.permits(*class))
    }

    /// Names that are what they say whatever DNS answers.
    fn fixed_class(host: &str) -> Option<AddressClass> {
        if host == "localhost" || host.ends_with(".localhost") {
            Some(AddressClass::Loopback)
        } else if host == "metadata.google.internal" {
            Some(AddressClass::Metadata)
        } else {
            None
        }
    }

    /// The addresses a connection to `host` may use: every address it resolves to right
    /// now, each passed through the policy. This is what every outbound socket of the
    /// service dials (see [`GuardedResolver`]), so a name that changes its answer after the
    /// URL was saved (DNS rebinding, a late-registered name) still cannot reach a refused
    /// address. Any refused address refuses the whole name.
    pub async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        let host = normalize_host(host);
        let literal = host.parse::<IpAddr>().ok();
        let refused = |class: AddressClass| {
            ResolveError::Refused(AddressRefused {
                host: host.clone(),
                what: class.describe(),
                literal: literal.is_some(),
            })
        };
        let listed = self.allowed_hosts.contains(&host);
        if let Some(ip) = literal {
            return match self.refused_class(ip) {
                Some(class) if !listed => Err(refused(class)),
                _ => Ok(vec![ip]),
            };
        }
        if let Some(class) = Self::fixed_class(&host)
            && !listed
            && !self.permits(class)
        {
            return Err(refused(class));
        }
        let addresses = tokio::time::timeout(DNS_TIMEOUT, self.lookup.lookup(&host))
            .await
            .map_err(|_| {
                ResolveError::Lookup(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("resolving '{host}' took over {}s", DNS_TIMEOUT.as_secs()),
                ))
            })?
            .map_err(ResolveError::Lookup)?;
        if listed {
            let mut approved = self.approved.lock().expect("approved addresses lock");
            if approved.len() + addresses.len() > MAX_APPROVED {
                approved.clear();
            }
            approved.extend(addresses.iter().copied());
        } else {
            for ip in &addresses {
                if let Some(class) = self.refused_class(*ip) {
                    return Err(refused(class));
                }
            }
        }
        Ok(addresses)
    }

    /// Whether a URL whose host is the IP literal `ip` may be dialled: an address the
    /// policy allows, or one listed as such in `allowed_url_hosts`. What every entry point
    /// judges a literal by before it dials (saved URLs, OAuth requests, redirect hops).
    pub fn admits(&self, ip: IpAddr) -> Result<(), AddressRefused> {
        let Some(class) = self.refused_class(ip) else {
            return Ok(());
        };
        let host = ip.to_string();
        if self.allowed_hosts.contains(&host) {
            return Ok(());
        }
        Err(AddressRefused {
            host,
            what: class.describe(),
            literal: true,
        })
    }

    /// Whether a connection the dialer opened to `ip` may be used: what [`Self::admits`]
    /// allows, or an address a name listed in `allowed_url_hosts` resolved to (the
    /// connection was made for that name; its address alone cannot say so). The backstop
    /// [`super::Dialer`] applies to every connection; a literal never gets this far unless
    /// its entry point judged it first.
    pub(crate) fn admits_connected(&self, ip: IpAddr) -> Result<(), AddressRefused> {
        self.admits(ip).or_else(|refused| {
            let approved = self.approved.lock().expect("approved addresses lock");
            if approved.contains(&ip) {
                Ok(())
            } else {
                Err(refused)
            }
        })
    }

    /// Parses a user-supplied URL and applies the policy; the error says what was refused.
    pub async fn check(&self, raw: &str) -> Result<Url, InvalidInput> {
        self.check_field(raw, "baseUrl", &["http", "https"]).await
    }

    /// [`Self::check`] for another field and other schemes (e.g. a WebSocket endpoint).
    /// A name that does not resolve now is accepted: every dial resolves it again.
    pub async fn check_field(
        &self,
        raw: &str,
        field: &str,
        schemes: &[&str],
    ) -> Result<Url, InvalidInput> {
        let url = Url::parse(raw.trim())
            .map_err(|e| InvalidInput::value(format!("{field} is not a valid URL: {e}")))?;
        if !schemes.contains(&url.scheme()) {
            return Err(InvalidInput::value(format!(
                "{field} must use {}",
                schemes.join(" or ")
            )));
        }
        let host = match url.host() {
            Some(Host::Domain(d)) => d.to_owned(),
            Some(Host::Ipv4(ip)) => ip.to_string(),
            Some(Host::Ipv6(ip)) => ip.to_string(),
            None => return Err(InvalidInput::value(format!("{field} must have a host"))),
        };
        match self.resolve(&host).await {
            Ok(_) | Err(ResolveError::Lookup(_)) => Ok(url),
            Err(ResolveError::Refused(refused)) => Err(InvalidInput::UrlNotAllowed(format!(
                "{field} host {refused}"
            ))),
        }
    }
}

impl UrlPolicy {
    /// A URL the service hands a person to open (an authorization URL, a URL-mode
    /// elicitation): `https`, or `http` on a loopback host where the policy allows
    /// loopback (or lists that host). Never `javascript:`, `data:` or any other scheme a browser would run or
    /// render instead of visit, and never plain `http` across a network.
    pub fn check_for_person(&self, raw: &str, field: &str) -> Result<Url, InvalidInput> {
        let url = Url::parse(raw.trim())
            .map_err(|e| InvalidInput::UrlNotAllowed(format!("{field} is not a valid URL: {e}")))?;
        if !url.username().is_empty() || url.password().is_some() {
            // `https://trusted.example@evil.example/` reads as the first host to a person.
            return Err(InvalidInput::UrlNotAllowed(format!(
                "{field} must not carry a user name or password"
            )));
        }
        let loopback = match url.host() {
            Some(Host::Domain(d)) => {
                Self::fixed_class(&normalize_host(d)) == Some(AddressClass::Loopback)
            }
            Some(Host::Ipv4(ip)) => ip.is_loopback(),
            Some(Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        match url.scheme() {
            "https" if url.host().is_some() => Ok(url),
            "http"
                if loopback
                    && (self.allow_loopback
                        || self
                            .allowed_hosts
                            .contains(&normalize_host(url.host_str().unwrap_or_default()))) =>
            {
                Ok(url)
            }
            "http" => Err(InvalidInput::UrlNotAllowed(format!(
                "{field} must use https (plain http only on loopback, where loopback is allowed)"
            ))),
            scheme => Err(InvalidInput::UrlNotAllowed(format!(
                "{field} must be an https URL, not {scheme}:"
            ))),
        }
    }

    /// A TCP connection to `url`'s host and port through [`Self::resolve`]: for clients
    /// that dial themselves (the Xiaozhi WebSocket), so they obey the policy as the HTTP
    /// clients do. Tries each allowed address in turn.
    pub async fn dial(&self, url: &Url) -> Result<tokio::net::TcpStream, ResolveError> {
        let host = url.host_str().unwrap_or_default();
        let port = url.port_or_known_default().unwrap_or(443);
        let mut last = std::io::Error::other(format!("'{host}' has no address"));
        for ip in self.resolve(host).await? {
            match tokio::net::TcpStream::connect(SocketAddr::new(ip, port)).await {
                Ok(stream) => {
                    stream.set_nodelay(true).ok();
                    return Ok(stream);
                }
                Err(error) => last = error,
            }
        }
        Err(ResolveError::Lookup(last))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Refused(AddressRefused),
    /// The name did not resolve, or no allowed address answered.
    #[error("{0}")]
    Lookup(std::io::Error),
}

/// The resolver of every HTTP client that dials a user-chosen URL ([`super::Dialer`]):
/// reqwest asks it for each new connection, and it answers only with addresses the policy
/// allows. IP-literal URLs never reach a resolver; the dialer checks the address of every
/// connection it opens for them.
pub struct GuardedResolver(pub Arc<UrlPolicy>);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses = policy.resolve(&host).await.map_err(|e| match e {
                ResolveError::Refused(refused) => Box::new(refused) as BoxError,
                ResolveError::Lookup(io) => Box::new(io),
            })?;
            Ok(
                Box::new(addresses.into_iter().map(|ip| SocketAddr::new(ip, 0)))
                    as reqwest::dns::Addrs,
            )
        })
    }
}

#[cfg(test)]
mod tests;
