//! A `tokio_util::codec` Encoder/Decoder pair for [`Frame`]s.

use bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::{Frame, FrameError, HEADER_SIZE, LENGTH_PREFIX_SIZE};

/// The default maximum frame size: 1 MiB, length prefix excluded.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 1 << 20;

/// Length-prefixed frame codec with a maximum frame size.
///
/// A declared length above the maximum is rejected as soon as the four length bytes
/// arrive, before any buffer is reserved for the body.
#[derive(Debug, Clone, Copy)]
pub struct Codec {
    max_frame_size: usize,
}

impl Codec {
    /// A codec accepting frames up to `max_frame_size` bytes (length prefix excluded).
    pub fn new(max_frame_size: usize) -> Self {
        Self { max_frame_size }
    }

    /// The maximum frame size.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }
}

impl Default for Codec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_SIZE)
    }
}

impl Decoder for Codec {
    type Item = Frame;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if src.len() < LENGTH_PREFIX_SIZE {
            return Ok(None);
        }
        let declared = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
        if declared > self.max_frame_size {
            return Err(FrameError::TooLarge {
                declared,
                max: self.max_frame_size,
            });
        }
        if declared < HEADER_SIZE {
            return Err(FrameError::TooShort {
                declared,
                min: HEADER_SIZE,
            });
        }
        let total = LENGTH_PREFIX_SIZE + declared;
        if src.len() < total {
            // Make room for the rest of the frame, bounded by the check above. Growing
            // with `reserve` would let the buffer's amortized doubling allocate up to
            // twice the frame, so a buffer too small is replaced by one of exactly the
            // frame's size.
            if src.capacity() < total {
                let mut grown = BytesMut::with_capacity(total);
                grown.extend_from_slice(src);
                *src = grown;
            }
            return Ok(None);
        }
        // The frame's bytes are split off rather than copied, so a heartbeat's ids can
        // point into them; the buffer reclaims the space once they are dropped.
        let mut frame = src.split_to(total);
        frame.advance(LENGTH_PREFIX_SIZE);
        Frame::decode_shared(&frame.freeze()).map(Some)
    }
}

impl Encoder<Frame> for Codec {
    type Error = FrameError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), FrameError> {
        frame.encode(dst, self.max_frame_size)?;
        Ok(())
    }
}

impl Encoder<&Frame> for Codec {
    type Error = FrameError;

    fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), FrameError> {
        frame.encode(dst, self.max_frame_size)?;
        Ok(())
    }
}
