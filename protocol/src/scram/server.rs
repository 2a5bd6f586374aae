//! The coordinator's side of the exchange.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};

use super::credential::fake_credential;
use super::credential::StoredCredential;
use super::crypto::{constant_time_eq, hmac_sha256, sha256};
use super::messages::{field, split_gs2, unescape, valid_nonce};
use super::{ScramError, KEY_LEN, NONCE_LEN};

/// The coordinator's side, after the `client-first-message`: answers it.
///
/// `lookup` finds the user's stored credential. An unknown user is not told apart from
/// a wrong password: the exchange goes on with a salt derived from `secret` and the
/// username (the same each time, as a real one would be) and fails at the proof.
pub fn server_first<F>(
    client_first: &str,
    lookup: F,
    secret: &[u8],
) -> Result<(ScramServerFinal, String), ScramError>
where
    F: FnOnce(&str) -> Option<StoredCredential>,
{
    let (gs2, bare) = split_gs2(client_first)?;
    let mut fields = bare.split(',');
    let first = fields.next().ok_or(ScramError::Malformed("no username"))?;
    if first.starts_with("m=") {
        return Err(ScramError::Malformed(
            "mandatory extensions are not supported",
        ));
    }
    let username = unescape(field(Some(first), 'n')?)?;
    if username.is_empty() {
        return Err(ScramError::Malformed("the username is empty"));
    }
    let client_nonce = field(fields.next(), 'r')?;
    if !valid_nonce(client_nonce) {
        return Err(ScramError::Malformed(
            "a nonce is printable ASCII without ','",
        ));
    }
    let (credential, known) = match lookup(&username) {
        Some(c) => (c, true),
        None => (fake_credential(&username, secret), false),
    };
    let mut raw = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut raw)
        .map_err(|_| ScramError::Random)?;
    let nonce = format!("{client_nonce}{}", BASE64.encode(raw));
    let server_first = format!(
        "r={nonce},s={},i={}",
        BASE64.encode(&credential.salt),
        credential.iterations
    );
    let state = ScramServerFinal {
        username,
        credential,
        known,
        gs2_header: BASE64.encode(gs2),
        nonce,
        first_bare: bare.to_owned(),
        server_first: server_first.clone(),
    };
    Ok((state, server_first))
}

/// The coordinator's exchange waiting for the `client-final-message`.
pub struct ScramServerFinal {
    username: String,
    credential: StoredCredential,
    known: bool,
    gs2_header: String,
    nonce: String,
    first_bare: String,
    server_first: String,
}

impl fmt::Debug for ScramServerFinal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramServerFinal")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl ScramServerFinal {
    /// The user the exchange is for.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// Checks the client's proof; returns the authenticated username and the
    /// `server-final-message`.
    pub fn finish(self, client_final: &str) -> Result<(String, String), ScramError> {
        let (without_proof, proof) = client_final
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut fields = without_proof.split(',');
        let binding = field(fields.next(), 'c')?;
        if binding != self.gs2_header {
            return Err(ScramError::ChannelBinding);
        }
        if field(fields.next(), 'r')? != self.nonce {
            return Err(ScramError::Nonce);
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("the proof is not base64"))?;
        if proof.len() != KEY_LEN {
            return Err(ScramError::InvalidProof);
        }
        let auth_message = format!("{},{},{without_proof}", self.first_bare, self.server_first);
        let signature = hmac_sha256(&self.credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(signature).map(|(p, s)| p ^ s).collect();
        let matches = constant_time_eq(&sha256(&client_key), &self.credential.stored_key);
        if !(matches && self.known) {
            return Err(ScramError::InvalidProof);
        }
        let server_signature = hmac_sha256(&self.credential.server_key, auth_message.as_bytes());
        Ok((
            self.username,
            format!("v={}", BASE64.encode(server_signature)),
        ))
    }
}
