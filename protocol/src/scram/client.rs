//! The client's side of the exchange.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};

use super::crypto::{constant_time_eq, hmac_sha256, salted_password, sha256};
use super::messages::{check_iterations, escape, field, prepare, valid_nonce};
use super::{ScramError, KEY_LEN, NONCE_LEN};

/// A client's exchange before the server's first message.
pub struct ScramClient {
    password: String,
    nonce: String,
    first_bare: String,
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient")
            .field("first_bare", &self.first_bare)
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    /// Starts an exchange for `username` with a fresh random nonce.
    pub fn new(username: &str, password: &str) -> Result<Self, ScramError> {
        let mut raw = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut raw)
            .map_err(|_| ScramError::Random)?;
        Self::with_nonce(username, password, &BASE64.encode(raw))
    }

    /// Starts an exchange with a given nonce (tests and worked examples).
    pub fn with_nonce(username: &str, password: &str, nonce: &str) -> Result<Self, ScramError> {
        let username = prepare(username, "the username")?;
        if username.is_empty() {
            return Err(ScramError::Malformed("the username is empty"));
        }
        if !valid_nonce(nonce) {
            return Err(ScramError::Malformed(
                "a nonce is printable ASCII without ','",
            ));
        }
        Ok(Self {
            password: prepare(password, "the password")?,
            nonce: nonce.to_owned(),
            first_bare: format!("n={},r={nonce}", escape(&username)),
        })
    }

    /// The `client-first-message`.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.first_bare)
    }

    /// Takes the `server-first-message`; returns what checks the server's final message
    /// and the `client-final-message` to send.
    pub fn handle_server_first(
        self,
        server_first: &str,
    ) -> Result<(ScramClientFinal, String), ScramError> {
        let mut fields = server_first.split(',');
        let nonce = field(fields.next(), 'r')?;
        let salt = field(fields.next(), 's')?;
        let iterations = field(fields.next(), 'i')?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Nonce);
        }
        if !valid_nonce(nonce) {
            return Err(ScramError::Malformed(
                "a nonce is printable ASCII without ','",
            ));
        }
        let salt = BASE64
            .decode(salt)
            .map_err(|_| ScramError::Malformed("the salt is not base64"))?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| ScramError::Malformed("the iteration count is not a number"))?;
        check_iterations(iterations)?;

        let salted = salted_password(&self.password, &salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        let stored_key = sha256(&client_key);
        let server_key = hmac_sha256(&salted, b"Server Key");
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.first_bare);
        let signature = hmac_sha256(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let expected = hmac_sha256(&server_key, auth_message.as_bytes());
        let client_final = format!("{without_proof},p={}", BASE64.encode(proof));
        Ok((ScramClientFinal { expected }, client_final))
    }
}

/// A client's exchange waiting for the `server-final-message`.
pub struct ScramClientFinal {
    expected: [u8; KEY_LEN],
}

impl fmt::Debug for ScramClientFinal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClientFinal").finish_non_exhaustive()
    }
}

impl ScramClientFinal {
    /// Checks the server's signature: only a holder of the user's credential makes it.
    pub fn verify(&self, server_final: &str) -> Result<(), ScramError> {
        let first = server_final.split(',').next().unwrap_or_default();
        if let Some(error) = first.strip_prefix("e=") {
            return Err(ScramError::Refused(error.to_owned()));
        }
        let signature = field(Some(first), 'v')?;
        let signature = BASE64
            .decode(signature)
            .map_err(|_| ScramError::Malformed("the server signature is not base64"))?;
        if !constant_time_eq(&signature, &self.expected) {
            return Err(ScramError::ServerSignature);
        }
        Ok(())
    }
}
