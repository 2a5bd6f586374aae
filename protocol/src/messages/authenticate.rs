//! Authenticate (API key 11): one step of a SASL-style exchange that gives the
//! connection a principal. The only mechanism is SCRAM-SHA-256 ([`crate::scram`]): two
//! steps, the client's first message then its final one.

use bytes::BytesMut;

use crate::wire::{put_bool, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// One client message of an authentication exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticateRequest {
    /// The mechanism, the same in every step: `SCRAM-SHA-256`.
    pub mechanism: String,
    /// The mechanism's client message (for SCRAM, `client-first-message`, then
    /// `client-final-message`, as RFC 5802 spells them).
    pub payload: String,
}

impl AuthenticateRequest {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.mechanism)?;
        put_string(buf, &self.payload)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            mechanism: r.string("mechanism")?,
            payload: r.string("payload")?,
        })
    }
}

/// The coordinator's message for one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticateResponse {
    /// The mechanism's server message (for SCRAM, `server-first-message`, then
    /// `server-final-message`).
    pub payload: String,
    /// True when the exchange is over and the connection is authenticated.
    pub complete: bool,
    /// The connection's principal once `complete`; empty before.
    pub principal: String,
}

impl AuthenticateResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.payload)?;
        put_bool(buf, self.complete);
        put_string(buf, &self.principal)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            payload: r.string("payload")?,
            complete: r.bool("complete")?,
            principal: r.string("principal")?,
        })
    }
}
