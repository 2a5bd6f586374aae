//! SCRAM-SHA-256 (RFC 5802 with RFC 7677's hash), the mechanism of the Authenticate
//! API: both ends, and the credential the coordinator stores.
//!
//! The coordinator stores a [`StoredCredential`] per user: a salt, an iteration count
//! and two keys derived from the password (`StoredKey`, `ServerKey`), never the password
//! nor anything that lets its holder log in (RFC 5802 §3). A client proves it knows the
//! password without sending it; the coordinator proves it holds the user's credential,
//! so a client also knows it reached the real coordinator.
//!
//! Channel binding and authorisation identities are not supported: the gs2 header must be
//! `n,,` or `y,,`. Usernames and passwords are prepared with SASLprep (RFC 4013).
//!
//! ```
//! use rollcall_protocol::scram::{self, ScramClient, StoredCredential};
//!
//! let stored = StoredCredential::derive("pencil", b"0123456789abcdef", 4096).unwrap();
//! let client = ScramClient::new("user", "pencil").unwrap();
//! let (server, server_first) =
//!     scram::server_first(&client.client_first(), |_| Some(stored.clone()), b"secret").unwrap();
//! let (client, client_final) = client.handle_server_first(&server_first).unwrap();
//! let (user, server_final) = server.finish(&client_final).unwrap();
//! assert_eq!(user, "user");
//! client.verify(&server_final).unwrap();
//! ```

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use ring::{digest, hmac, pbkdf2};
use thiserror::Error;

/// The mechanism's name in an Authenticate request.
pub const MECHANISM: &str = "SCRAM-SHA-256";

/// Iterations of a new credential: RFC 7677's minimum.
pub const DEFAULT_ITERATIONS: u32 = 4096;

/// The fewest iterations either end accepts.
pub const MIN_ITERATIONS: u32 = 4096;

/// The most iterations a client accepts from a server (a forged server could otherwise
/// make it spin): 10 million is seconds of CPU.
pub const MAX_ITERATIONS: u32 = 10_000_000;

const KEY_LEN: usize = 32;
const SALT_LEN: usize = 16;
const NONCE_LEN: usize = 18;
/// Longest nonce (from either end) accepted.
const MAX_NONCE: usize = 256;

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScramError {
    /// A message does not follow the grammar.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// The client asked for channel binding.
    #[error("channel binding is not supported")]
    ChannelBinding,
    /// The client named an authorisation identity.
    #[error("authorisation identities are not supported")]
    AuthorizationIdentity,
    /// A username or password SASLprep refuses (prohibited or unassigned characters).
    #[error("{0} contains characters SASLprep prohibits")]
    Prepare(&'static str),
    /// The server's nonce does not extend the client's, or the final message's nonce is
    /// not the exchange's.
    #[error("the nonce does not match the exchange's")]
    Nonce,
    /// The client's proof is wrong: unknown user or wrong password.
    #[error("unknown user or wrong password")]
    InvalidProof,
    /// The server's signature is wrong: it does not hold this user's credential.
    #[error("the coordinator's signature does not match: it does not hold this user's credential")]
    ServerSignature,
    /// The server answered with an error (`e=`).
    #[error("the coordinator refused: {0}")]
    Refused(String),
    /// An iteration count outside the accepted range.
    #[error("iteration count {0} is outside {MIN_ITERATIONS}..={MAX_ITERATIONS}")]
    Iterations(u32),
    /// Randomness was not available.
    #[error("no randomness available")]
    Random,
}

/// What the coordinator stores for a user: enough to check a proof and sign its answer,
/// not enough to log in. Written as PostgreSQL writes it:
/// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64 each).
#[derive(Clone, PartialEq, Eq)]
pub struct StoredCredential {
    iterations: u32,
    salt: Vec<u8>,
    stored_key: [u8; KEY_LEN],
    server_key: [u8; KEY_LEN],
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

/// Splits the gs2 header (`n,,` or `y,,`) from the bare message.
fn split_gs2(message: &str) -> Result<(&str, &str), ScramError> {
    let bare = if let Some(rest) = message.strip_prefix("n,") {
        rest
    } else if let Some(rest) = message.strip_prefix("y,") {
        rest
    } else if message.starts_with("p=") {
        return Err(ScramError::ChannelBinding);
    } else {
        return Err(ScramError::Malformed(
            "the message starts with a gs2 header",
        ));
    };
    let bare = match bare.strip_prefix(',') {
        Some(bare) => bare,
        None if bare.starts_with("a=") => return Err(ScramError::AuthorizationIdentity),
        None => return Err(ScramError::Malformed("the gs2 header ends with ','")),
    };
    Ok((&message[..message.len() - bare.len()], bare))
}

/// The value of `<name>=<value>`.
fn field(item: Option<&str>, name: char) -> Result<&str, ScramError> {
    let item = item.ok_or(ScramError::Malformed("a field is missing"))?;
    let mut chars = item.chars();
    if chars.next() != Some(name) || chars.next() != Some('=') {
        return Err(ScramError::Malformed("a field is missing or out of order"));
    }
    Ok(&item[2..])
}

fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce.len() <= MAX_NONCE
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

fn check_iterations(iterations: u32) -> Result<(), ScramError> {
    if (MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        Ok(())
    } else {
        Err(ScramError::Iterations(iterations))
    }
}

fn prepare(s: &str, what: &'static str) -> Result<String, ScramError> {
    stringprep::saslprep(s)
        .map(|p| p.into_owned())
        .map_err(|_| ScramError::Prepare(what))
}

/// `saslname` escaping: `,` as `=2C`, `=` as `=3D`.
fn escape(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn unescape(name: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 3);
        match code {
            Some("2C") => out.push(','),
            Some("3D") => out.push('='),
            _ => {
                return Err(ScramError::Malformed(
                    "a username escapes only '=2C' and '=3D'",
                ))
            }
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

fn decode_key(s: &str) -> Option<[u8; KEY_LEN]> {
    BASE64.decode(s).ok()?.try_into().ok()
}

/// A credential no password matches, the same for a username every time.
fn fake_credential(username: &str, secret: &[u8]) -> StoredCredential {
    let salt = hmac_sha256(secret, format!("salt:{username}").as_bytes());
    StoredCredential {
        iterations: DEFAULT_ITERATIONS,
        salt: salt[..SALT_LEN].to_vec(),
        stored_key: hmac_sha256(secret, format!("stored:{username}").as_bytes()),
        server_key: hmac_sha256(secret, format!("server:{username}").as_bytes()),
    }
}

fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; KEY_LEN] {
    let mut out = [0u8; KEY_LEN];
    let iterations = NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN);
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        password.as_bytes(),
        &mut out,
    );
    out
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; KEY_LEN] {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), message);
    let mut out = [0u8; KEY_LEN];
    out.copy_from_slice(tag.as_ref());
    out
}

fn sha256(data: &[u8]) -> [u8; KEY_LEN] {
    let d = digest::digest(&digest::SHA256, data);
    let mut out = [0u8; KEY_LEN];
    out.copy_from_slice(d.as_ref());
    out
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 §3's example exchange, byte for byte.
    #[test]
    fn the_rfc_7677_example() {
        let client = ScramClient::with_nonce("user", "pencil", "rOprNGfwEbeRWgbNEkqO").unwrap();
        assert_eq!(client.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                            s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let (client, client_final) = client.handle_server_first(server_first).unwrap();
        assert_eq!(
            client_final,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        client
            .verify("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert_eq!(
            client.verify("v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Err(ScramError::ServerSignature)
        );
    }

    fn exchange(
        stored: &StoredCredential,
        user: &str,
        password: &str,
    ) -> Result<String, ScramError> {
        let client = ScramClient::new(user, password)?;
        let known = stored.clone();
        let (server, server_first) = server_first(
            &client.client_first(),
            |name| (name == "alice").then_some(known),
            b"secret",
        )?;
        let (client, client_final) = client.handle_server_first(&server_first)?;
        let (name, server_final) = server.finish(&client_final)?;
        client.verify(&server_final)?;
        Ok(name)
    }

    #[test]
    fn the_right_password_authenticates_and_a_wrong_one_or_an_unknown_user_does_not() {
        let stored = StoredCredential::generate("s3cret", DEFAULT_ITERATIONS).unwrap();
        assert_eq!(exchange(&stored, "alice", "s3cret").unwrap(), "alice");
        assert_eq!(
            exchange(&stored, "alice", "wrong"),
            Err(ScramError::InvalidProof)
        );
        assert_eq!(
            exchange(&stored, "bob", "s3cret"),
            Err(ScramError::InvalidProof)
        );
    }

    #[test]
    fn an_unknown_user_gets_the_same_salt_every_time() {
        let first = |nonce| {
            let c = ScramClient::with_nonce("nobody", "x", nonce).unwrap();
            let (_, m) = server_first(&c.client_first(), |_| None, b"k").unwrap();
            m.split(',').nth(1).unwrap().to_owned()
        };
        assert_eq!(first("abc"), first("def"));
    }

    #[test]
    fn a_stored_credential_round_trips_its_text_and_refuses_junk() {
        let stored = StoredCredential::derive("pw", b"salt-salt-salt!!", 4096).unwrap();
        let text = stored.to_string();
        assert!(text.starts_with("SCRAM-SHA-256$4096:"), "{text}");
        assert_eq!(text.parse::<StoredCredential>().unwrap(), stored);
        for junk in [
            "",
            "pw",
            "SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA",
            "SCRAM-SHA-256$12:c2FsdA==$",
            "SCRAM-SHA-1$4096:c2FsdA==$x:y",
        ] {
            assert!(junk.parse::<StoredCredential>().is_err(), "{junk:?}");
        }
        assert!(!format!("{stored:?}").contains(&BASE64.encode(stored.stored_key)));
    }

    #[test]
    fn malformed_and_unsupported_first_messages_are_refused() {
        let lookup = |_: &str| None;
        for (message, error) in [
            ("p=tls-unique,,n=a,r=x", ScramError::ChannelBinding),
            ("n,a=other,n=a,r=x", ScramError::AuthorizationIdentity),
            (
                "x,,n=a,r=x",
                ScramError::Malformed("the message starts with a gs2 header"),
            ),
            ("n,,n=,r=x", ScramError::Malformed("the username is empty")),
            (
                "n,,n=a=41,r=x",
                ScramError::Malformed("a username escapes only '=2C' and '=3D'"),
            ),
            ("n,,n=a", ScramError::Malformed("a field is missing")),
            (
                "n,,m=ext,n=a,r=x",
                ScramError::Malformed("mandatory extensions are not supported"),
            ),
            (
                "n,,n=a,r=x y",
                ScramError::Malformed("a nonce is printable ASCII without ','"),
            ),
        ] {
            let got = server_first(message, lookup, b"k").map(|_| ());
            assert_eq!(got, Err(error), "{message}");
        }
    }

    #[test]
    fn a_final_message_for_another_exchange_is_refused() {
        let stored = StoredCredential::generate("pw", DEFAULT_ITERATIONS).unwrap();
        let client = ScramClient::new("alice", "pw").unwrap();
        let (server, _) =
            server_first(&client.client_first(), |_| Some(stored.clone()), b"k").unwrap();
        let other = ScramClient::new("alice", "pw").unwrap();
        let (_, other_first) =
            server_first(&other.client_first(), |_| Some(stored.clone()), b"k").unwrap();
        let (_, replayed) = other.handle_server_first(&other_first).unwrap();
        assert_eq!(server.finish(&replayed), Err(ScramError::Nonce));
    }

    #[test]
    fn a_client_refuses_a_server_that_does_not_extend_its_nonce_or_asks_too_many_iterations() {
        let nonce = |n| ScramClient::with_nonce("a", "pw", n).unwrap();
        assert_eq!(
            nonce("abc")
                .handle_server_first("r=xyz1,s=c2FsdA==,i=4096")
                .err(),
            Some(ScramError::Nonce)
        );
        assert_eq!(
            nonce("abc")
                .handle_server_first("r=abc,s=c2FsdA==,i=4096")
                .err(),
            Some(ScramError::Nonce)
        );
        assert_eq!(
            nonce("abc")
                .handle_server_first("r=abcd,s=c2FsdA==,i=4000000000")
                .err(),
            Some(ScramError::Iterations(4_000_000_000))
        );
    }

    #[test]
    fn usernames_with_commas_and_equals_are_escaped() {
        let stored = StoredCredential::generate("pw", DEFAULT_ITERATIONS).unwrap();
        let client = ScramClient::new("a,b=c", "pw").unwrap();
        assert!(client.client_first().contains("n=a=2Cb=3Dc,"));
        let (server, _) =
            server_first(&client.client_first(), |_| Some(stored.clone()), b"k").unwrap();
        assert_eq!(server.username(), "a,b=c");
    }
}
