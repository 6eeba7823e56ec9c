//! A remote entry's URL template filled with a user's values. A value is data in its part
//! of the URL (a host label, a path segment, a query value): it is percent-encoded, so no
//! `/`, `?`, `#`, `@` or `:` in it can end the part it is in, and the host the filled URL
//! names must be the template's own with the values in place.

use std::collections::BTreeMap;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use url::Url;

/// Everything but RFC 3986's unreserved characters.
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `template` with each `{name}` replaced by its value, encoded; unknown names stay as
/// written (the format's rule). The error says what is wrong with the result.
pub(super) fn fill(template: &str, values: &BTreeMap<&str, String>) -> Result<Url, String> {
    let encoded: BTreeMap<&str, String> = values
        .iter()
        .map(|(name, value)| (*name, utf8_percent_encode(value, ENCODED).to_string()))
        .collect();
    let url = Url::parse(&replace(template, &encoded)).map_err(|e| e.to_string())?;
    if let Some(expected) = expected_host(template, &encoded)
        && url.host_str().map(str::to_ascii_lowercase) != Some(expected.clone())
    {
        return Err(format!(
            "the host would be {} where the entry names {expected}",
            url.host_str().unwrap_or("none")
        ));
    }
    Ok(url)
}

fn replace(template: &str, values: &BTreeMap<&str, String>) -> String {
    let mut out = template.to_owned();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

/// The template's host with the values in place: the template parsed with a plain token
/// for each value, then each token replaced. `None` when the template does not parse
/// that way (a variable in the port): the encoding alone holds then.
fn expected_host(template: &str, encoded: &BTreeMap<&str, String>) -> Option<String> {
    let tokens: BTreeMap<&str, String> = encoded
        .keys()
        .enumerate()
        .map(|(i, name)| (*name, format!("mcppoolvariable{i}x")))
        .collect();
    let host = Url::parse(&replace(template, &tokens))
        .ok()?
        .host_str()?
        .to_owned();
    let mut expected = host;
    for (name, token) in &tokens {
        expected = expected.replace(token, &encoded[name]);
    }
    Some(expected.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(template: &str, pairs: &[(&str, &str)]) -> Result<Url, String> {
        let values = pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        fill(template, &values)
    }

    #[test]
    fn a_value_cannot_leave_its_part_of_the_url() {
        let template = "https://{tenant}.example.com/mcp?team={team}";
        for tenant in [
            "attacker.example.net/x?",
            "attacker.example.net#",
            "u@attacker.example.net/",
            "attacker.example.net:443/",
        ] {
            assert!(
                filled(template, &[("tenant", tenant), ("team", "t")]).is_err(),
                "{tenant}"
            );
        }
        let url = filled(template, &[("tenant", "Acme"), ("team", "a&b=c d")]).unwrap();
        assert_eq!(url.host_str(), Some("acme.example.com"));
        assert_eq!(url.query(), Some("team=a%26b%3Dc%20d"));
        let path = filled("https://x.example.com/{path}/mcp", &[("path", "../admin")]).unwrap();
        assert_eq!(path.path(), "/..%2Fadmin/mcp");
    }

    #[test]
    fn a_variable_in_the_port_is_filled_too() {
        let url = filled("http://127.0.0.1:{port}/mcp", &[("port", "8080")]).unwrap();
        assert_eq!(url.port(), Some(8080));
    }
}
