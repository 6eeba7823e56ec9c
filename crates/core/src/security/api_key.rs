//! API keys: 190 bits from the OS RNG, shown once, stored only as a SHA-256 digest.

use rand::Rng;
use rand::distributions::Alphanumeric;
use sha2::{Digest, Sha256};

use crate::invalid::InvalidInput;

const KEY_PREFIX: &str = "mcpp_";
const RANDOM_CHARS: usize = 32;
/// How much of a key is stored in clear so people can tell their keys apart.
const SHOWN_PREFIX_LEN: usize = 12;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiKeyRole {
    /// Acts for the user named in `X-User-Id` on `/api/*`.
    Service,
    /// Reaches `/admin/*` (and may act for a user like a service key).
    Admin,
}

impl ApiKeyRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ApiKeyRole::Service => "service",
            ApiKeyRole::Admin => "admin",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        match raw {
            "service" => Ok(ApiKeyRole::Service),
            "admin" => Ok(ApiKeyRole::Admin),
            other => Err(InvalidInput::value(format!(
                "role '{other}' is not one of service, admin"
            ))),
        }
    }
}

/// A freshly made key: the secret itself exists only in this value.
pub struct GeneratedKey {
    pub secret: String,
    pub hash: String,
    pub prefix: String,
}

impl GeneratedKey {
    pub fn new() -> Self {
        let random: String = rand::rngs::OsRng
            .sample_iter(&Alphanumeric)
            .take(RANDOM_CHARS)
            .map(char::from)
            .collect();
        Self::from_secret(format!("{KEY_PREFIX}{random}"))
    }

    /// Wraps a key chosen by the operator (`MCP_POOL_ADMIN_KEY`).
    pub fn from_secret(secret: String) -> Self {
        let hash = hash_key(&secret);
        let prefix = secret.chars().take(SHOWN_PREFIX_LEN).collect();
        Self {
            secret,
            hash,
            prefix,
        }
    }
}

impl Default for GeneratedKey {
    fn default() -> Self {
        Self::new()
    }
}

pub fn hash_key(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The token of an `Authorization: Bearer <token>` value (HTTP header or gRPC metadata).
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    Some(token.trim()).filter(|token| scheme.eq_ignore_ascii_case("bearer") && !token.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_prefixed_and_hash_stably() {
        let a = GeneratedKey::new();
        let b = GeneratedKey::new();
        assert_ne!(a.secret, b.secret);
        assert!(a.secret.starts_with("mcpp_") && a.secret.len() == 37);
        assert_eq!(a.hash, hash_key(&a.secret));
        assert_eq!(a.hash.len(), 64);
        assert!(a.secret.starts_with(&a.prefix));
    }
}
