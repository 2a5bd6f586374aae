//! The credential the coordinator stores for a user, and its text form.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};

use super::crypto::{decode_key, hmac_sha256, salted_password, sha256};
use super::messages::{check_iterations, prepare};
use super::{ScramError, DEFAULT_ITERATIONS, KEY_LEN, MECHANISM, SALT_LEN};

/// What the coordinator stores for a user: enough to check a proof and sign its answer,
/// not enough to log in. Written as PostgreSQL writes it:
/// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64 each).
#[derive(Clone, PartialEq, Eq)]
pub struct StoredCredential {
    pub(super) iterations: u32,
    pub(super) salt: Vec<u8>,
    pub(super) stored_key: [u8; KEY_LEN],
    pub(super) server_key: [u8; KEY_LEN],
}

impl fmt::Debug for StoredCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl StoredCredential {
    /// A new credential for `password` with a random salt.
    pub fn generate(password: &str, iterations: u32) -> Result<Self, ScramError> {
        let mut salt = [0u8; SALT_LEN];
        SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| ScramError::Random)?;
        Self::derive(password, &salt, iterations)
    }

    /// The credential for `password` with this salt and iteration count.
    pub fn derive(password: &str, salt: &[u8], iterations: u32) -> Result<Self, ScramError> {
        check_iterations(iterations)?;
        let salted = salted_password(&prepare(password, "the password")?, salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        Ok(Self {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&client_key),
            server_key: hmac_sha256(&salted, b"Server Key"),
        })
    }

    /// The iteration count.
    pub fn iterations(&self) -> u32 {
        self.iterations
    }
}

impl fmt::Display for StoredCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{MECHANISM}${}:{}${}:{}",
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(self.stored_key),
            BASE64.encode(self.server_key)
        )
    }
}

impl FromStr for StoredCredential {
    type Err = ScramError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = ScramError::Malformed(
            "a stored credential is SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>",
        );
        let rest = s.strip_prefix(MECHANISM).and_then(|r| r.strip_prefix('$'));
        let Some((params, keys)) = rest.and_then(|r| r.split_once('$')) else {
            return Err(bad);
        };
        let (iterations, salt) = params.split_once(':').ok_or(bad.clone())?;
        let (stored, server) = keys.split_once(':').ok_or(bad.clone())?;
        let iterations: u32 = iterations.parse().map_err(|_| bad.clone())?;
        check_iterations(iterations)?;
        let salt = BASE64.decode(salt).map_err(|_| bad.clone())?;
        if salt.is_empty() {
            return Err(bad);
        }
        Ok(Self {
            iterations,
            salt,
            stored_key: decode_key(stored).ok_or(bad.clone())?,
            server_key: decode_key(server).ok_or(bad)?,
        })
    }
}

/// A credential no password matches, the same for a username every time.
pub(super) fn fake_credential(username: &str, secret: &[u8]) -> StoredCredential {
    let salt = hmac_sha256(secret, format!("salt:{username}").as_bytes());
    StoredCredential {
        iterations: DEFAULT_ITERATIONS,
        salt: salt[..SALT_LEN].to_vec(),
        stored_key: hmac_sha256(secret, format!("stored:{username}").as_bytes()),
        server_key: hmac_sha256(secret, format!("server:{username}").as_bytes()),
    }
}
