//! Feeds arbitrary bytes to the frame decoder, both as a stream (through the codec) and
//! as one frame's bytes (through `Frame::decode`). Decoding must never panic, must never
//! grow the buffer past one maximum-size frame, and every frame it yields must re-encode
//! to bytes that decode to the same frame.
//!
//! The stream is read twice: all at once, and arriving in small pieces, as it does from a
//! socket. Both readings must yield the same frames and end the same way, so the codec's
//! handling of a frame split across reads (its partial-frame buffer) is checked too.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use rollcall_protocol::{
    Body, Codec, Frame, FrameError, HeartbeatsRequest, Request, HEADER_SIZE, LENGTH_PREFIX_SIZE,
};
use tokio_util::codec::Decoder;

/// Small, so the fuzzer reaches both sides of the limit with short inputs.
const MAX_FRAME_SIZE: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let whole = read_stream(data, data.len().max(1));
    // Piece sizes of 1 to 13 bytes, chosen by the input's length.
    let pieces = read_stream(data, 1 + data.len() % 13);
    assert_eq!(
        whole.frames, pieces.frames,
        "split reads yield the same frames"
    );
    assert!(
        same_end(&whole.end, &pieces.end),
        "split reads end the same way: {:?} then {:?}",
        whole.end,
        pieces.end
    );
    for frame in &whole.frames {
        check_reencodes(frame);
    }

    if let Ok(frame) = Frame::decode(data) {
        check_reencodes(&frame);
    }
});

/// What reading a stream gave: its frames, then an error or `None` (more bytes needed).
struct Stream {
    frames: Vec<Frame>,
    end: Option<FrameError>,
}

/// Decodes `data` as a stream arriving `piece` bytes at a time.
fn read_stream(data: &[u8], piece: usize) -> Stream {
    let mut codec = Codec::new(MAX_FRAME_SIZE);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for chunk in data.chunks(piece) {
        buf.extend_from_slice(chunk);
        loop {
            let capacity = buf.capacity();
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => {
                    assert!(
                        buf.capacity() <= capacity.max(LENGTH_PREFIX_SIZE + MAX_FRAME_SIZE),
                        "the codec grew the buffer past one frame"
                    );
                    break;
                }
                Err(e) => {
                    return Stream {
                        frames,
                        end: Some(e),
                    }
                }
            }
        }
    }
    Stream { frames, end: None }
}

fn same_end(a: &Option<FrameError>, b: &Option<FrameError>) -> bool {
    use FrameError::*;
    match (a, b) {
        (None, None) => true,
        (
            Some(TooLarge {
                declared: a,
                max: m,
            }),
            Some(TooLarge {
                declared: b,
                max: n,
            }),
        ) => a == b && m == n,
        (
            Some(TooShort {
                declared: a,
                min: m,
            }),
            Some(TooShort {
                declared: b,
                min: n,
            }),
        ) => a == b && m == n,
        (
            Some(Malformed {
                header: h,
                source: s,
            }),
            Some(Malformed {
                header: i,
                source: t,
            }),
        ) => h == i && s == t,
        _ => false,
    }
}

fn check_reencodes(frame: &Frame) {
    let mut bytes = BytesMut::new();
    frame
        .encode(&mut bytes, usize::MAX)
        .expect("a decoded frame re-encodes");
    let again = Frame::decode(&bytes[LENGTH_PREFIX_SIZE..]).expect("a re-encoded frame decodes");
    assert_eq!(&again, frame);

    // The codec agrees with Frame::decode on the re-encoded bytes.
    let mut stream = bytes.clone();
    let mut codec = Codec::new(usize::MAX);
    let decoded = codec.decode(&mut stream).expect("decodes").expect("whole");
    assert_eq!(&decoded, frame);
    assert!(stream.is_empty());

    // The encoder's limit is exact, and a refused frame leaves the buffer as it was.
    let len = bytes.len() - LENGTH_PREFIX_SIZE;
    let mut exact = BytesMut::new();
    frame.encode(&mut exact, len).expect("fits its own size");
    assert_eq!(exact, bytes);
    let mut short = BytesMut::from(&b"kept"[..]);
    assert!(frame.encode(&mut short, len - 1).is_err());
    assert_eq!(&short[..], b"kept");

    if let Body::Request(Request::Heartbeats(request)) = &frame.body {
        check_heartbeats(request);
    }
}

/// A Heartbeats request's beats: `encoded_len` is each beat's encoded size, and
/// `batch_sizes` splits them into frames that fit.
fn check_heartbeats(request: &HeartbeatsRequest) {
    for beat in &request.beats {
        let mut bytes = BytesMut::new();
        Frame::request(0, Request::Heartbeat(beat.clone()))
            .encode(&mut bytes, usize::MAX)
            .expect("a beat encodes");
        assert_eq!(
            bytes.len(),
            LENGTH_PREFIX_SIZE + HEADER_SIZE + beat.encoded_len()
        );
    }
    // A limit the beats decoded from a frame of at most MAX_FRAME_SIZE bytes can exceed.
    let max = MAX_FRAME_SIZE / 4;
    let sizes = HeartbeatsRequest::batch_sizes(&request.beats, max);
    assert_eq!(sizes.iter().sum::<usize>(), request.beats.len());
    let mut rest = &request.beats[..];
    for size in sizes {
        assert!(size > 0);
        let (batch, tail) = rest.split_at(size);
        rest = tail;
        let frame = Frame::request(
            0,
            Request::Heartbeats(HeartbeatsRequest {
                beats: batch.to_vec(),
            }),
        );
        let fits = frame.encode(&mut BytesMut::new(), max).is_ok();
        assert!(
            fits || size == 1,
            "a batch of {size} beats exceeds {max} bytes"
        );
    }
    assert!(rest.is_empty());
}
