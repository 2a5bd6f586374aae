//! The error answer, the same layout for every API and version.

use bytes::{BufMut, BytesMut};

use super::api_versions::{decode_versions, encode_versions};
use super::ApiVersionRange;
use crate::wire::{put_string, Reader};
use crate::{DecodeError, EncodeError, ErrorCode};

/// An error answer to any request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorResponse {
    /// The API key of the request it answers (echoed from the request header).
    pub api_key: u16,
    /// What went wrong (never `ErrorCode::None`).
    pub code: ErrorCode,
    /// A human-readable explanation.
    pub message: String,
    /// For `UnsupportedVersion` and `UnknownApi`: what the coordinator supports.
    pub supported: Vec<ApiVersionRange>,
}

impl ErrorResponse {
    /// The whole body: the error code, then the rest.
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        buf.put_u16(self.code.to_u16());
        put_string(buf, &self.message)?;
        encode_versions(buf, &self.supported)
    }

    /// What follows the error code, `code` already read.
    pub(crate) fn decode_tail(
        api_key: u16,
        code: ErrorCode,
        r: &mut Reader<'_>,
    ) -> Result<Self, DecodeError> {
        Ok(Self {
            api_key,
            code,
            message: r.string("error message")?,
            supported: decode_versions(r)?,
        })
    }
}
