//! AES-256-GCM sealing of secret values (server headers and env) before they are stored.
//!
//! Sealed form: `v1:` + base64(12-byte nonce || ciphertext+tag). The key comes from
//! `security.encryption_key`, else from `<data_dir>/encryption.key`, created on first run
//! with mode 0600. Losing the key makes stored secrets unreadable, by design.

use std::io::Write;
use std::path::Path;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use secrecy::ExposeSecret;

use crate::config::SecuritySettings;

const PREFIX: &str = "v1:";
const KEY_FILE: &str = "encryption.key";
const NONCE_LEN: usize = 12;

#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("security.encryption_key must be base64 of exactly 32 bytes")]
    BadKey,
    #[error("cannot read or create the encryption key file {path}: {source}")]
    KeyFile {
        path: String,
        source: std::io::Error,
    },
    #[error("a stored secret could not be decrypted (was the encryption key changed?)")]
    Decrypt,
}

/// Seals and opens secret strings. Cheap to clone behind an `Arc`.
pub struct Cipher {
    aead: Aes256Gcm,
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cipher(..)")
    }
}

impl Cipher {
    pub fn from_key(key: &[u8]) -> Result<Self, CryptoError> {
        let aead = Aes256Gcm::new_from_slice(key).map_err(|_| CryptoError::BadKey)?;
        Ok(Self { aead })
    }

    /// The configured key, or the one in the data directory (generated when absent).
    pub fn load(settings: &SecuritySettings, data_dir: &Path) -> Result<Self, CryptoError> {
        let configured = settings.encryption_key.expose_secret().trim();
        if !configured.is_empty() {
            let key = B64.decode(configured).map_err(|_| CryptoError::BadKey)?;
            return Self::from_key(&key);
        }
        let path = data_dir.join(KEY_FILE);
        let key_file_error = |source| CryptoError::KeyFile {
            path: path.display().to_string(),
            source,
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let key = B64.decode(text.trim()).map_err(|_| CryptoError::BadKey)?;
                Self::from_key(&key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(data_dir).map_err(key_file_error)?;
                let key = Aes256Gcm::generate_key(OsRng);
                write_private_file(&path, B64.encode(key).as_bytes()).map_err(key_file_error)?;
                tracing::info!(path = %path.display(), "generated a new encryption key for secrets at rest");
                Self::from_key(&key)
            }
            Err(e) => Err(key_file_error(e)),
        }
    }

    pub fn seal(&self, plaintext: &str) -> String {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let ciphertext = self
            .aead
            .encrypt(&nonce, plaintext.as_bytes())
            .expect("AES-GCM encryption of an in-memory buffer cannot fail");
        let mut sealed = Vec::with_capacity(NONCE_LEN + ciphertext.len());
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ciphertext);
        format!("{PREFIX}{}", B64.encode(sealed))
    }

    pub fn open(&self, sealed: &str) -> Result<String, CryptoError> {
        let raw = sealed
            .strip_prefix(PREFIX)
            .and_then(|b64| B64.decode(b64).ok())
            .filter(|raw| raw.len() > NONCE_LEN)
            .ok_or(CryptoError::Decrypt)?;
        let (nonce, ciphertext) = raw.split_at(NONCE_LEN);
        let plaintext = self
            .aead
            .decrypt(Nonce::from_slice(nonce), ciphertext)
            .map_err(|_| CryptoError::Decrypt)?;
        String::from_utf8(plaintext).map_err(|_| CryptoError::Decrypt)
    }
}

fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_then_open_round_trips_and_nonces_differ() {
        let cipher = Cipher::from_key(&[7u8; 32]).unwrap();
        let a = cipher.seal("Bearer hunter2");
        let b = cipher.seal("Bearer hunter2");
        assert_ne!(a, b);
        assert!(!a.contains("hunter2"));
        assert_eq!(cipher.open(&a).unwrap(), "Bearer hunter2");
    }

    #[test]
    fn wrong_key_or_tampering_fails_cleanly() {
        let sealed = Cipher::from_key(&[1u8; 32]).unwrap().seal("x");
        assert!(Cipher::from_key(&[2u8; 32]).unwrap().open(&sealed).is_err());
        let cipher = Cipher::from_key(&[1u8; 32]).unwrap();
        assert!(cipher.open("v1:AAAA").is_err());
        assert!(cipher.open("plain").is_err());
    }

    #[test]
    fn key_file_is_created_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let settings = crate::config::Settings::defaults().security;
        let sealed = Cipher::load(&settings, dir.path()).unwrap().seal("s");
        let again = Cipher::load(&settings, dir.path()).unwrap();
        assert_eq!(again.open(&sealed).unwrap(), "s");
    }
}
