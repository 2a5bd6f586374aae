//! ApiVersions (API key 0): the handshake that must open every connection.

use bytes::{BufMut, BytesMut};

use crate::wire::{put_count, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// The range of versions one side supports for one API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersionRange {
    /// The API (request key or push key).
    pub api_key: u16,
    /// Lowest supported version.
    pub min_version: u16,
    /// Highest supported version.
    pub max_version: u16,
}

/// The first request on every connection: the client's supported API versions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiVersionsRequest {
    /// Free-form client software name and version, for logs.
    pub client_software: String,
    /// What the client supports.
    pub versions: Vec<ApiVersionRange>,
}

impl ApiVersionsRequest {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.client_software)?;
        encode_versions(buf, &self.versions)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            client_software: r.string("client software")?,
            versions: decode_versions(r)?,
        })
    }
}

/// The answer to the version handshake.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiVersionsResponse {
    /// What the coordinator supports (requests and pushes).
    pub versions: Vec<ApiVersionRange>,
    /// The largest frame the coordinator accepts, in bytes (length prefix excluded).
    pub max_frame_size: u32,
}

impl ApiVersionsResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        encode_versions(buf, &self.versions)?;
        buf.put_u32(self.max_frame_size);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            versions: decode_versions(r)?,
            max_frame_size: r.u32("max frame size")?,
        })
    }
}

pub(crate) fn encode_versions(
    buf: &mut BytesMut,
    v: &[ApiVersionRange],
) -> Result<(), EncodeError> {
    put_count(buf, v.len())?;
    for r in v {
        buf.put_u16(r.api_key);
        buf.put_u16(r.min_version);
        buf.put_u16(r.max_version);
    }
    Ok(())
}

pub(crate) fn decode_versions(r: &mut Reader<'_>) -> Result<Vec<ApiVersionRange>, DecodeError> {
    r.array("api versions", 6, |r| {
        Ok(ApiVersionRange {
            api_key: r.u16("api key")?,
            min_version: r.u16("min version")?,
            max_version: r.u16("max version")?,
        })
    })
}
