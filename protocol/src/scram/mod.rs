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
//!
//! The credential is in `credential.rs`, the client's side in `client.rs`, the
//! coordinator's in `server.rs`, the messages' fields in `messages.rs` and the
//! hashing in `crypto.rs`.

mod client;
mod credential;
mod crypto;
mod messages;
mod server;
#[cfg(test)]
mod tests;

use thiserror::Error;

pub use client::{ScramClient, ScramClientFinal};
pub use credential::StoredCredential;
pub use server::{server_first, ScramServerFinal};

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
