//! Security primitives: sealing secrets at rest, the outbound-URL policy and
//! the one dialer every outbound client is built by, API keys.
//!
//! Kept apart from services so the rules are in one place and unit-tested on their own.

pub mod api_key;
mod crypto;
mod dialer;
pub mod url_guard;

pub use api_key::{ApiKeyRole, GeneratedKey, bearer_token};
pub use crypto::{Cipher, CryptoError};
pub use dialer::{Dialer, Redirects};
pub use url_guard::{GuardedResolver, NameLookup, UrlPolicy, literal_host};
