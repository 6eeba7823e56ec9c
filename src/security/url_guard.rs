//! Which remote MCP server URLs a user may register (server-side request forgery guard).
//!
//! Loopback, private, link-local and CGNAT ranges are refused unless the admin allows them;
//! cloud metadata addresses and reserved ranges are refused unless the host is listed in
//! `security.allowed_url_hosts`. Host names are resolved and every address is checked.
//! A name that does not resolve now is accepted: the pool checks again at connect time,
//! which is also what defeats DNS rebinding.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use url::{Host, Url};

use crate::config::SecuritySettings;
use crate::error::Error;

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
    if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
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

fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return classify_v4(v4);
            }
            let first = v6.segments()[0];
            if v6 == "fd00:ec2::254".parse::<Ipv6Addr>().expect("literal") {
                AddressClass::Metadata
            } else if v6.is_loopback() || v6.is_unspecified() {
                AddressClass::Loopback
            } else if (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80 {
                AddressClass::Private
            } else if v6.is_multicast() {
                AddressClass::Reserved
            } else {
                AddressClass::Public
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct UrlPolicy {
    allow_loopback: bool,
    allow_private: bool,
    allowed_hosts: HashSet<String>,
}

impl UrlPolicy {
    pub fn from_settings(settings: &SecuritySettings) -> Self {
        Self {
            allow_loopback: settings.allow_loopback_urls,
            allow_private: settings.allow_private_urls,
            allowed_hosts: settings
                .allowed_url_hosts
                .iter()
                .map(|h| h.trim().trim_matches(['[', ']']).to_ascii_lowercase())
                .collect(),
        }
    }

    fn permits(&self, class: AddressClass) -> bool {
        match class {
            AddressClass::Public => true,
            AddressClass::Loopback => self.allow_loopback,
            AddressClass::Private => self.allow_private,
            AddressClass::Metadata | AddressClass::Reserved => false,
        }
    }

    /// Parses a user-supplied URL and applies the policy; the error says what was refused.
    pub async fn check(&self, raw: &str) -> Result<Url, Error> {
        self.check_field(raw, "baseUrl", &["http", "https"]).await
    }

    /// [`Self::check`] for another field and other schemes (e.g. a WebSocket endpoint).
    pub async fn check_field(
        &self,
        raw: &str,
        field: &str,
        schemes: &[&str],
    ) -> Result<Url, Error> {
        let url = Url::parse(raw.trim())
            .map_err(|e| Error::validation(format!("{field} is not a valid URL: {e}")))?;
        if !schemes.contains(&url.scheme()) {
            return Err(Error::validation(format!(
                "{field} must use {}",
                schemes.join(" or ")
            )));
        }
        let host = url
            .host()
            .ok_or_else(|| Error::validation(format!("{field} must have a host")))?;
        let host_text = match &host {
            Host::Domain(d) => d.trim_end_matches('.').to_ascii_lowercase(),
            Host::Ipv4(ip) => ip.to_string(),
            Host::Ipv6(ip) => ip.to_string(),
        };
        if self.allowed_hosts.contains(&host_text) {
            return Ok(url);
        }
        let refuse = |class: AddressClass| {
            Err(Error::UrlNotAllowed(format!(
                "{field} host '{host_text}' is {}, which this service does not allow",
                class.describe()
            )))
        };
        let addresses: Vec<IpAddr> = match host {
            Host::Ipv4(ip) => vec![IpAddr::V4(ip)],
            Host::Ipv6(ip) => vec![IpAddr::V6(ip)],
            Host::Domain(_) if host_text == "localhost" || host_text.ends_with(".localhost") => {
                return if self.allow_loopback {
                    Ok(url)
                } else {
                    refuse(AddressClass::Loopback)
                };
            }
            Host::Domain(_) if host_text == "metadata.google.internal" => {
                return refuse(AddressClass::Metadata);
            }
            Host::Domain(_) => {
                let port = url.port_or_known_default().unwrap_or(443);
                match tokio::time::timeout(
                    DNS_TIMEOUT,
                    tokio::net::lookup_host((host_text.as_str(), port)),
                )
                .await
                {
                    Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
                    // Unresolvable now: the connect-time check decides.
                    _ => Vec::new(),
                }
            }
        };
        for ip in addresses {
            let class = classify(ip);
            if !self.permits(class) {
                return refuse(class);
            }
        }
        Ok(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(loopback: bool, private: bool, hosts: &[&str]) -> UrlPolicy {
        let mut settings = crate::config::Settings::defaults().security;
        settings.allow_loopback_urls = loopback;
        settings.allow_private_urls = private;
        settings.allowed_url_hosts = hosts.iter().map(|h| h.to_string()).collect();
        UrlPolicy::from_settings(&settings)
    }

    #[test]
    fn classifies_the_ranges_that_matter() {
        let cases = [
            ("8.8.8.8", AddressClass::Public),
            ("127.0.0.1", AddressClass::Loopback),
            ("0.0.0.0", AddressClass::Loopback),
            ("10.1.2.3", AddressClass::Private),
            ("172.20.0.1", AddressClass::Private),
            ("192.168.1.1", AddressClass::Private),
            ("100.64.0.1", AddressClass::Private),
            ("169.254.1.1", AddressClass::Private),
            ("169.254.169.254", AddressClass::Metadata),
            ("224.0.0.1", AddressClass::Reserved),
            ("::1", AddressClass::Loopback),
            ("::", AddressClass::Loopback),
            ("fe80::1", AddressClass::Private),
            ("fd12::1", AddressClass::Private),
            ("fd00:ec2::254", AddressClass::Metadata),
            ("::ffff:127.0.0.1", AddressClass::Loopback),
            ("2606:4700::1111", AddressClass::Public),
        ];
        for (ip, class) in cases {
            assert_eq!(classify(ip.parse().unwrap()), class, "{ip}");
        }
    }

    #[tokio::test]
    async fn refuses_internal_targets_by_default() {
        let strict = policy(false, false, &[]);
        for url in [
            "http://127.0.0.1:8080/mcp",
            "http://localhost/sse",
            "http://[::1]/mcp",
            "http://10.0.0.5/mcp",
            "http://169.254.169.254/latest/meta-data",
            "http://metadata.google.internal/",
            "http://[::ffff:7f00:1]/mcp",
        ] {
            let err = strict.check(url).await.unwrap_err();
            assert_eq!(err.code(), "URL_NOT_ALLOWED", "{url}");
        }
        assert_eq!(
            strict.check("ftp://example.com/").await.unwrap_err().code(),
            "VALIDATION_ERROR"
        );
        assert_eq!(
            strict.check("not a url").await.unwrap_err().code(),
            "VALIDATION_ERROR"
        );
        assert!(strict.check("https://93.184.216.34/mcp").await.is_ok());
    }

    #[tokio::test]
    async fn switches_and_allow_list_open_exactly_what_they_say() {
        let loopback = policy(true, false, &[]);
        assert!(loopback.check("http://127.0.0.1:1/mcp").await.is_ok());
        assert!(loopback.check("http://localhost:1/mcp").await.is_ok());
        assert!(loopback.check("http://192.168.0.1/mcp").await.is_err());
        assert!(loopback.check("http://169.254.169.254/").await.is_err());
        let listed = policy(false, false, &["169.254.169.254", "internal.example"]);
        assert!(listed.check("http://169.254.169.254/").await.is_ok());
        assert!(listed.check("http://INTERNAL.example/mcp").await.is_ok());
    }
}
