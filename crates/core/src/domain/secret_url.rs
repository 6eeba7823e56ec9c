//! A server URL whose credentials are secrets.
//!
//! Many MCP servers take their key in the URL: `https://user:secret@host/mcp` or
//! `https://host/mcp?api_key=…`. The user name, the password and every query value are
//! treated like a header value: shown only as [`MASK`], sealed at rest, and sent back as
//! [`MASK`] in an update to keep what is stored. The user name is masked too, since some
//! servers take the key there (`https://TOKEN@host/`). Scheme, host, port, path, parameter
//! names and the fragment stay visible.

use std::collections::HashMap;
use std::fmt;

use url::Url;

use super::MASK;
use crate::invalid::InvalidInput;

/// An upstream's URL. `Display` and `Debug` print [`SecretUrl::masked`], so a stray `{}`
/// cannot leak a credential; only [`SecretUrl::expose`] gives the URL to dial.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(Url);

/// One `&`-separated part of a query: `name=value`, or a bare value (`?TOKEN`), which is
/// as likely to be a key as a flag, so it counts as a value. Both stay percent-encoded.
#[derive(Clone, Copy)]
struct Param<'a> {
    name: Option<&'a str>,
    value: &'a str,
}

impl<'a> Param<'a> {
    fn parse(part: &'a str) -> Self {
        match part.split_once('=') {
            Some((name, value)) => Param {
                name: Some(name),
                value,
            },
            None => Param {
                name: None,
                value: part,
            },
        }
    }

    fn render(self, value: &str) -> String {
        match self.name {
            Some(name) => format!("{name}={value}"),
            None => value.to_owned(),
        }
    }

    fn describe(self) -> String {
        match self.name {
            Some(name) => format!("query parameter '{name}'"),
            None => "a query value".to_owned(),
        }
    }
}

fn params(query: &str) -> impl Iterator<Item = Param<'_>> {
    query.split('&').map(Param::parse)
}

impl SecretUrl {
    pub fn new(url: Url) -> Self {
        Self(url)
    }

    /// The URL in clear: only for dialling the server and for the store (to seal it).
    pub fn expose(&self) -> &Url {
        &self.0
    }

    /// Whether any part is secret (a user name, a password, a non-empty query value).
    pub fn has_secrets(&self) -> bool {
        !self.0.username().is_empty()
            || self.0.password().is_some()
            || self
                .0
                .query()
                .is_some_and(|query| params(query).any(|p| !p.value.is_empty()))
    }

    /// The URL with the user name, the password and every non-empty query value replaced by
    /// [`MASK`]: `http://********:********@host/mcp?api_key=********`.
    pub fn masked(&self) -> String {
        let mut url = self.0.clone();
        if !url.username().is_empty() {
            // Only fails for URLs without a host, which have no user name.
            let _ = url.set_username(MASK);
        }
        if url.password().is_some() {
            let _ = url.set_password(Some(MASK));
        }
        if let Some(query) = self.0.query() {
            let masked: Vec<String> = params(query)
                .map(|p| {
                    let value = if p.value.is_empty() { "" } else { MASK };
                    p.render(value)
                })
                .collect();
            url.set_query(Some(&masked.join("&")));
        }
        url.into()
    }

    /// Applies an update: a part sent as [`MASK`] keeps the stored value of that part (the
    /// user name, the password, or the query value of the same name and occurrence); every
    /// other part is taken as sent. Masked parts are only kept for the same scheme, host and
    /// port, so a stored credential never follows the URL to another server.
    pub fn merge_update(
        update: Url,
        current: Option<&SecretUrl>,
    ) -> Result<SecretUrl, InvalidInput> {
        let current = current.map(SecretUrl::expose);
        let missing = |what: &str| {
            InvalidInput::value(format!(
                "baseUrl holds the mask placeholder for {what} but no value is stored; send the real value"
            ))
        };
        let mut url = update;
        let mut kept = false;
        if url.username() == MASK {
            let stored = current
                .map(Url::username)
                .filter(|name| !name.is_empty())
                .ok_or_else(|| missing("the user name"))?;
            let _ = url.set_username(stored);
            kept = true;
        }
        if url.password() == Some(MASK) {
            let stored = current
                .and_then(Url::password)
                .ok_or_else(|| missing("the password"))?;
            let _ = url.set_password(Some(stored));
            kept = true;
        }
        if let Some(query) = url.query().map(str::to_owned)
            && params(&query).any(|p| p.value == MASK)
        {
            let stored: Vec<Param> = current
                .and_then(Url::query)
                .map(|q| params(q).collect())
                .unwrap_or_default();
            let mut seen: HashMap<Option<&str>, usize> = HashMap::new();
            let mut merged = Vec::new();
            for param in params(&query) {
                let occurrence = seen.entry(param.name).or_default();
                let nth = *occurrence;
                *occurrence += 1;
                let value = if param.value == MASK {
                    kept = true;
                    stored
                        .iter()
                        .filter(|s| s.name == param.name)
                        .nth(nth)
                        .map(|s| s.value)
                        .filter(|value| !value.is_empty())
                        .ok_or_else(|| missing(&param.describe()))?
                } else {
                    param.value
                };
                merged.push(param.render(value));
            }
            url.set_query(Some(&merged.join("&")));
        }
        if kept && current.is_some_and(|current| current.origin() != url.origin()) {
            return Err(InvalidInput::value(
                "baseUrl keeps masked credentials only for the same scheme, host and port; send them in clear for another address",
            ));
        }
        Ok(SecretUrl(url))
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked())
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SecretUrl").field(&self.masked()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(raw: &str) -> SecretUrl {
        SecretUrl::new(Url::parse(raw).unwrap())
    }

    fn merge(update: &str, current: &str) -> Result<String, InvalidInput> {
        SecretUrl::merge_update(Url::parse(update).unwrap(), Some(&secret(current)))
            .map(|url| url.expose().to_string())
    }

    #[test]
    fn masks_the_userinfo_and_every_query_value() {
        let cases = [
            (
                "https://user:hunter2@x.example/mcp?api_key=k1&region=eu#top",
                "https://********:********@x.example/mcp?api_key=********&region=********#top",
            ),
            ("https://TOKEN@x.example/", "https://********@x.example/"),
            (
                "https://x.example/sse?TOKEN&empty=&flag",
                "https://x.example/sse?********&empty=&********",
            ),
            (
                "https://x.example/mcp?a=1&a=2",
                "https://x.example/mcp?a=********&a=********",
            ),
            ("https://x.example/mcp", "https://x.example/mcp"),
        ];
        for (clear, masked) in cases {
            assert_eq!(secret(clear).masked(), masked, "{clear}");
        }
    }

    #[test]
    fn display_and_debug_never_print_secrets() {
        let url = secret("https://alice:hunter2@x.example/mcp?api_key=k-9f3");
        for printed in [format!("{url}"), format!("{url:?}"), format!("{url:#?}")] {
            for secret in ["alice", "hunter2", "k-9f3"] {
                assert!(!printed.contains(secret), "{printed}");
            }
            assert!(printed.contains("x.example/mcp?api_key="), "{printed}");
        }
    }

    #[test]
    fn knows_whether_it_holds_secrets() {
        for (raw, expected) in [
            ("https://x.example/mcp", false),
            ("https://x.example/mcp?", false),
            ("https://x.example/mcp?empty=", false),
            ("https://x.example/mcp?k=v", true),
            ("https://u@x.example/mcp", true),
            ("https://:p@x.example/mcp", true),
        ] {
            assert_eq!(secret(raw).has_secrets(), expected, "{raw}");
        }
    }

    #[test]
    fn the_masked_form_sent_back_restores_the_stored_url() {
        for raw in [
            "https://user:hunter2@x.example/mcp?api_key=k1&region=eu",
            "https://p%40ss%3Aword@x.example/mcp?k=a%26b%3Dc&k=second&TOKEN",
            "https://x.example/mcp",
        ] {
            assert_eq!(merge(&secret(raw).masked(), raw).unwrap(), raw);
        }
    }

    #[test]
    fn masked_parts_keep_their_values_and_clear_parts_replace() {
        let current = "https://user:old-pass@x.example/mcp?api_key=k1&region=eu&a=1&a=2";
        assert_eq!(
            merge(
                "https://********:new-pass@x.example/v2/mcp?a=********&a=3&region=us&api_key=********",
                current
            )
            .unwrap(),
            "https://user:new-pass@x.example/v2/mcp?a=1&a=3&region=us&api_key=k1"
        );
        // Without a mask the update is a new URL, wherever it points.
        assert_eq!(
            merge("https://other.example/mcp?api_key=k2", current).unwrap(),
            "https://other.example/mcp?api_key=k2"
        );
    }

    #[test]
    fn a_mask_without_a_stored_value_is_refused() {
        let current = "https://x.example/mcp?api_key=k1";
        for update in [
            "https://********@x.example/mcp",
            "https://u:********@x.example/mcp",
            "https://x.example/mcp?token=********",
            "https://x.example/mcp?api_key=k1&api_key=********",
        ] {
            let err = merge(update, current).unwrap_err().to_string();
            assert!(err.contains("mask placeholder"), "{update}: {err}");
        }
        let created = SecretUrl::merge_update(
            Url::parse("https://x.example/mcp?api_key=********").unwrap(),
            None,
        );
        assert!(created.is_err());
    }

    #[test]
    fn masked_credentials_never_move_to_another_address() {
        let current = "https://user:pw@x.example/mcp?api_key=k1";
        for update in [
            "https://********:********@evil.example/mcp",
            "http://x.example/mcp?api_key=********",
            "https://x.example:8443/mcp?api_key=********",
        ] {
            let err = merge(update, current).unwrap_err().to_string();
            assert!(
                err.contains("same scheme, host and port"),
                "{update}: {err}"
            );
            assert!(!err.contains("k1") && !err.contains("pw"), "{err}");
        }
    }
}
