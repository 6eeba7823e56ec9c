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
        ("fd00:ec2::23", AddressClass::Metadata),
        ("169.254.170.2", AddressClass::Metadata),
        ("168.63.129.16", AddressClass::Metadata),
        ("::ffff:127.0.0.1", AddressClass::Loopback),
        ("2606:4700::1111", AddressClass::Public),
    ];
    for (ip, class) in cases {
        assert_eq!(strictest(ip.parse().unwrap()), class, "{ip}");
    }
}

/// The class that decides: the first one that is not public.
fn strictest(ip: IpAddr) -> AddressClass {
    classes(ip)
        .into_iter()
        .find(|c| *c != AddressClass::Public)
        .unwrap_or(AddressClass::Public)
}

#[tokio::test]
async fn ipv6_forms_that_embed_ipv4_are_judged_by_that_ipv4() {
    let cases = [
        ("::127.0.0.1", AddressClass::Loopback),   // IPv4-compatible
        ("::ffff:a00:1", AddressClass::Private),   // mapped
        ("::ffff:0:a00:1", AddressClass::Private), // translated
        ("64:ff9b::a9fe:a9fe", AddressClass::Metadata), // NAT64 of 169.254.169.254
        ("64:ff9b::a00:1", AddressClass::Private), // NAT64 of 10.0.0.1
        ("64:ff9b::808:808", AddressClass::Public), // NAT64 of 8.8.8.8
        ("64:ff9b:1:7f00:1::", AddressClass::Private), // local-use NAT64
        ("2002:a9fe:a9fe::", AddressClass::Metadata), // 6to4
        ("2002:808:808::1", AddressClass::Public), // 6to4 of 8.8.8.8
        ("2001:0:808:808:0:0:80ff:fffe", AddressClass::Loopback), // Teredo, client 127.0.0.1
        ("2001:db8::1", AddressClass::Reserved),   // documentation
    ];
    for (ip, class) in cases {
        assert_eq!(strictest(ip.parse().unwrap()), class, "{ip}");
    }
    let strict = policy(false, false, &[]);
    for url in [
        "http://[::127.0.0.1]/mcp",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[64:ff9b::a00:1]/",
        "http://[::ffff:0:a00:1]/",
        "http://[2002:a9fe:a9fe::]/",
    ] {
        let err = strict.check(url).await.unwrap_err();
        assert!(
            matches!(err, InvalidInput::UrlNotAllowed(_)),
            "{url}: {err}"
        );
    }
    assert!(strict.check("http://[64:ff9b::808:808]/mcp").await.is_ok());
}

/// A DNS server whose answer for a name changes after the first question.
struct Rebinding;
impl NameLookup for Rebinding {
    fn lookup(&self, host: &str) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let answer = match host {
            "public.test" => Ok(vec!["93.184.216.34".parse().unwrap()]),
            "mixed.test" => Ok(vec![
                "93.184.216.34".parse().unwrap(),
                "169.254.169.254".parse().unwrap(),
            ]),
            "inside.test" => Ok(vec!["127.0.0.1".parse().unwrap()]),
            _ => Err(std::io::Error::other("NXDOMAIN")),
        };
        Box::pin(async move { answer })
    }
}

#[tokio::test]
async fn every_dialled_address_goes_through_the_policy() {
    let mut settings = crate::config::Settings::defaults().security;
    settings.allowed_url_hosts = vec!["inside.test".into()];
    let policy = UrlPolicy::from_settings(&settings).with_lookup(Arc::new(Rebinding));
    assert!(policy.resolve("public.test").await.is_ok());
    // One bad answer among good ones refuses the name.
    assert!(matches!(
        policy.resolve("mixed.test").await,
        Err(ResolveError::Refused(_))
    ));
    // Listed by the admin: whatever it resolves to.
    assert!(policy.resolve("inside.test").await.is_ok());
    settings.allowed_url_hosts.clear();
    let policy = UrlPolicy::from_settings(&settings).with_lookup(Arc::new(Rebinding));
    let refused = policy.resolve("Inside.Test.").await.unwrap_err();
    assert!(refused.to_string().contains("loopback"), "{refused}");
    // Unknown today: saved, and judged again when dialled.
    assert!(policy.check("http://later.test/mcp").await.is_ok());
    assert!(matches!(
        policy.resolve("later.test").await,
        Err(ResolveError::Lookup(_))
    ));
    assert!(policy.resolve("localhost").await.is_err());
    assert!(policy.resolve("[::ffff:127.0.0.1]").await.is_err());
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
        assert!(
            matches!(err, InvalidInput::UrlNotAllowed(_)),
            "{url}: {err}"
        );
    }
    assert!(matches!(
        strict.check("ftp://example.com/").await.unwrap_err(),
        InvalidInput::Value(_)
    ));
    assert!(matches!(
        strict.check("not a url").await.unwrap_err(),
        InvalidInput::Value(_)
    ));
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

mod spellings {
    //! Every spelling of a forbidden address a URL can carry, against what the dialer
    //! applies to each request and redirect hop (`literal_host` + `admits`) and what a
    //! saved URL passes (`check`).
    use super::*;
    use proptest::prelude::*;

    /// A forbidden IPv4 address: loopback, private, link-local, CGNAT, "this network",
    /// cloud metadata.
    fn forbidden_v4() -> impl Strategy<Value = Ipv4Addr> {
        prop_oneof![
            any::<[u8; 3]>().prop_map(|[b, c, d]| Ipv4Addr::new(127, b, c, d)),
            any::<[u8; 3]>().prop_map(|[b, c, d]| Ipv4Addr::new(10, b, c, d)),
            (16u8..32, any::<[u8; 2]>()).prop_map(|(b, [c, d])| Ipv4Addr::new(172, b, c, d)),
            any::<[u8; 2]>().prop_map(|[c, d]| Ipv4Addr::new(192, 168, c, d)),
            any::<[u8; 2]>().prop_map(|[c, d]| Ipv4Addr::new(169, 254, c, d)),
            (64u8..128, any::<[u8; 2]>()).prop_map(|(b, [c, d])| Ipv4Addr::new(100, b, c, d)),
            any::<[u8; 3]>().prop_map(|[b, c, d]| Ipv4Addr::new(0, b, c, d)),
        ]
    }

    /// The host part of a URL naming `ip`, in spelling number `form`.
    fn spell(ip: Ipv4Addr, form: u8) -> String {
        let [a, b, c, d] = ip.octets();
        let n = u32::from(ip);
        match form % 10 {
            0 => ip.to_string(),
            1 => n.to_string(),
            2 => format!("0x{n:x}"),
            3 => format!("0{a:o}.0{b:o}.0{c:o}.0{d:o}"),
            4 => format!("{a}.{}", n & 0x00ff_ffff),
            5 => format!("{ip}."),
            6 => format!("[::ffff:{ip}]"),
            7 => format!("[::ffff:{:x}:{:x}]", n >> 16, n & 0xffff),
            8 => format!("[64:ff9b::{ip}]"),
            _ => format!("[2002:{:x}:{:x}::1]", n >> 16, n & 0xffff),
        }
    }

    fn strict() -> UrlPolicy {
        policy(false, false, &[])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn no_spelling_of_a_forbidden_address_is_dialled(
            ip in forbidden_v4(),
            form in any::<u8>(),
            userinfo in prop::option::of("[a-z]{1,8}(:[a-z]{1,8})?@"),
            port in prop::option::of(1u16..),
            path in "(/[a-z0-9]{0,8}){0,3}",
            scheme in prop::sample::select(vec!["http", "https"]),
        ) {
            let raw = format!(
                "{scheme}://{}{}{}{path}",
                userinfo.unwrap_or_default(),
                spell(ip, form),
                port.map(|p| format!(":{p}")).unwrap_or_default(),
            );
            let Ok(url) = Url::parse(&raw) else {
                // Nothing is dialled for a URL that does not parse.
                return Ok(());
            };
            let literal = literal_host(&url);
            prop_assert!(literal.is_some(), "{raw} parsed as a name: {url}");
            let literal = literal.unwrap();
            prop_assert!(strict().admits(literal).is_err(), "{raw} -> {literal} admitted");
            let saved = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(strict().check(&raw));
            prop_assert!(saved.is_err(), "{raw} saved");
        }

        #[test]
        fn internationalized_spellings_of_loopback_names_are_refused(
            label in "[a-z]{1,10}",
            fullwidth in any::<bool>(),
            upper in any::<bool>(),
        ) {
            let mut host = format!("{label}.localhost");
            if upper {
                host = host.to_uppercase();
            }
            if fullwidth {
                // U+FF41.. : IDNA maps fullwidth letters to ASCII.
                host = host
                    .chars()
                    .map(|c| match c {
                        'a'..='z' => char::from_u32(c as u32 - 'a' as u32 + 0xff41).unwrap(),
                        'A'..='Z' => char::from_u32(c as u32 - 'A' as u32 + 0xff21).unwrap(),
                        other => other,
                    })
                    .collect();
            }
            let raw = format!("http://{host}/mcp");
            let saved = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(strict().check(&raw));
            prop_assert!(saved.is_err(), "{raw} saved");
        }

        #[test]
        fn allowed_public_addresses_are_admitted(a in 1u8..=9, b: u8, c: u8, d: u8) {
            // 1.0.0.0 - 9.255.255.255: public unicast.
            let ip = IpAddr::V4(Ipv4Addr::new(a, b, c, d));
            prop_assert!(strict().admits(ip).is_ok(), "{ip}");
        }
    }
}
