//! Primitive encoders and a bounds-checked reader.
//!
//! Every read checks the remaining length first, so decoding arbitrary bytes can
//! fail but never panics, and array lengths are checked against the bytes that
//! remain before anything is allocated.

use bytes::{BufMut, Bytes, BytesMut};
use bytestring::ByteString;

use crate::{DecodeError, EncodeError};

/// A cursor over one frame's body.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    /// What `buf` is a part of, when the frame is held in shared memory: strings read
    /// with [`Reader::shared_string`] then point into it instead of being copied.
    shared: Option<&'a Bytes>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, shared: None }
    }

    /// A reader over `frame`, whose strings can be shared with it.
    pub(crate) fn shared(frame: &'a Bytes) -> Self {
        Self {
            buf: frame,
            shared: Some(frame),
        }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated { what });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        Ok(self.u64(what)? as i64)
    }

    pub(crate) fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Invalid {
                what,
                reason: "boolean must be 0 or 1",
            }),
        }
    }

    pub(crate) fn string(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let len = self.u16(what)? as usize;
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(DecodeError::Invalid {
                what,
                reason: "string is not valid UTF-8",
            }),
        }
    }

    /// A string that points into the frame when the frame is shared (no allocation:
    /// the ids of every beat of a Heartbeats frame are read this way), else a copy.
    pub(crate) fn shared_string(&mut self, what: &'static str) -> Result<ByteString, DecodeError> {
        let invalid = DecodeError::Invalid {
            what,
            reason: "string is not valid UTF-8",
        };
        let len = self.u16(what)? as usize;
        let bytes = self.take(len, what)?;
        match self.shared {
            Some(frame) => ByteString::try_from(frame.slice_ref(bytes)).map_err(|_| invalid),
            None => match std::str::from_utf8(bytes) {
                Ok(s) => Ok(ByteString::from(s)),
                Err(_) => Err(invalid),
            },
        }
    }

    pub(crate) fn opt_string(&mut self, what: &'static str) -> Result<Option<String>, DecodeError> {
        if self.bool(what)? {
            Ok(Some(self.string(what)?))
        } else {
            Ok(None)
        }
    }

    /// Reads an array count and checks that `count * min_element_size` bytes remain,
    /// so a hostile count can never make the decoder allocate more than the frame holds.
    pub(crate) fn count(
        &mut self,
        what: &'static str,
        min_element_size: usize,
    ) -> Result<usize, DecodeError> {
        let count = self.u32(what)? as usize;
        let needed = count.saturating_mul(min_element_size.max(1));
        if needed > self.remaining() {
            return Err(DecodeError::Truncated { what });
        }
        Ok(count)
    }

    pub(crate) fn array<T>(
        &mut self,
        what: &'static str,
        min_element_size: usize,
        mut element: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let count = self.count(what, min_element_size)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(element(self)?);
        }
        Ok(out)
    }

    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                count: self.buf.len(),
            })
        }
    }
}

pub(crate) fn put_bool(buf: &mut BytesMut, v: bool) {
    buf.put_u8(u8::from(v));
}

/// Writes a string as a `u16` length and its UTF-8 bytes.
pub(crate) fn put_string(buf: &mut BytesMut, s: &str) -> Result<(), EncodeError> {
    let len = u16::try_from(s.len()).map_err(|_| EncodeError::StringTooLong { len: s.len() })?;
    buf.put_u16(len);
    buf.put_slice(s.as_bytes());
    Ok(())
}

pub(crate) fn put_opt_string(buf: &mut BytesMut, s: Option<&str>) -> Result<(), EncodeError> {
    match s {
        Some(s) => {
            put_bool(buf, true);
            put_string(buf, s)
        }
        None => {
            put_bool(buf, false);
            Ok(())
        }
    }
}

pub(crate) fn put_count(buf: &mut BytesMut, n: usize) -> Result<(), EncodeError> {
    let n = u32::try_from(n).map_err(|_| EncodeError::ArrayTooLong { len: n })?;
    buf.put_u32(n);
    Ok(())
}
