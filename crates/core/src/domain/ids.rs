//! Identifiers that arrive from callers: parsed once, valid afterwards.

use std::fmt;

use crate::invalid::InvalidInput;

const MAX_ID_LEN: usize = 128;
const TEAM_PREFIX: &str = "*team:";
const MAX_SERVER_NAME_CHARS: usize = 64;

/// Characters an external id may use: enough for UUIDs, e-mails and `auth0|123` style ids,
/// nothing that needs escaping in a URL path, a log line or a header.
fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@' | '|' | '+' | '=')
}

fn parse_external_id(kind: &str, raw: &str) -> Result<String, InvalidInput> {
    if raw.is_empty() || raw.len() > MAX_ID_LEN {
        return Err(InvalidInput::value(format!(
            "{kind} must be 1 to {MAX_ID_LEN} characters"
        )));
    }
    if let Some(bad) = raw.chars().find(|c| !is_id_char(*c)) {
        return Err(InvalidInput::value(format!(
            "{kind} contains {bad:?}; allowed are letters, digits and - _ . : @ | + ="
        )));
    }
    Ok(raw.to_owned())
}

/// The SaaS backend's id for one of its users (`X-User-Id`); opaque to us.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserId(String);

impl UserId {
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        parse_external_id("user id", raw).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The owner of admin-defined global servers: `*` is not allowed in user ids, so no
    /// request can name it.
    pub fn global() -> Self {
        Self("*global".into())
    }

    /// The owner of group `group`'s team servers (`*` again keeps it out of requests).
    pub fn of_team(group: &str) -> Self {
        Self(format!("{TEAM_PREFIX}{group}"))
    }

    /// A stored server's owner: a user, or a team's owner.
    pub fn parse_owner(raw: &str) -> Result<Self, InvalidInput> {
        match raw.strip_prefix(TEAM_PREFIX) {
            Some(group) if !group.is_empty() => Ok(Self::of_team(group)),
            _ => Self::parse(raw),
        }
    }

    /// The group whose team servers this owner holds.
    pub fn team_group(&self) -> Option<&str> {
        self.0.strip_prefix(TEAM_PREFIX)
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The SaaS backend's id for an assistant; bindings are scoped by (user, assistant).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AssistantId(String);

impl AssistantId {
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        parse_external_id("assistant id", raw).map(Self)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A server's display name, unique per user. It later becomes part of model-facing tool
/// names, so control characters and surrounding blanks are refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerName(String);

impl ServerName {
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        let name = raw.trim();
        let chars = name.chars().count();
        if chars == 0 || chars > MAX_SERVER_NAME_CHARS {
            return Err(InvalidInput::value(format!(
                "name must be 1 to {MAX_SERVER_NAME_CHARS} characters"
            )));
        }
        if name.chars().any(char::is_control) {
            return Err(InvalidInput::value(
                "name must not contain control characters",
            ));
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids_accept_common_external_forms() {
        for ok in [
            "42",
            "auth0|abc123",
            "alice@example.com",
            "6f1c-77ab",
            "u_1.a:b+c=",
        ] {
            assert_eq!(UserId::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn user_ids_refuse_empty_long_and_odd_characters() {
        assert!(UserId::parse("").is_err());
        assert!(UserId::parse(&"a".repeat(129)).is_err());
        for bad in ["a b", "a/b", "a\nb", "ä", "a%2f"] {
            assert!(UserId::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn server_names_are_trimmed_and_bounded() {
        assert_eq!(
            ServerName::parse("  My Files ").unwrap().as_str(),
            "My Files"
        );
        assert_eq!(ServerName::parse("文件").unwrap().as_str(), "文件");
        assert!(ServerName::parse("   ").is_err());
        assert!(ServerName::parse(&"x".repeat(65)).is_err());
        assert!(ServerName::parse("a\u{0}b").is_err());
    }
}

/// One running process of the service; a new id at every start (UUIDv7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct InstanceId(pub uuid::Uuid);

impl InstanceId {
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7())
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
