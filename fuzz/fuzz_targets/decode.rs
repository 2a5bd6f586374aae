//! Feeds arbitrary bytes to the frame decoder, both as a stream (through the codec) and
//! as one frame's bytes (through `Frame::decode`). Decoding must never panic, must never
//! grow the buffer past one maximum-size frame, and every frame it yields must re-encode
//! to bytes that decode to the same frame.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use rollcall_protocol::{Codec, Frame, LENGTH_PREFIX_SIZE};
use tokio_util::codec::Decoder;

/// Small, so the fuzzer reaches both sides of the limit with short inputs.
const MAX_FRAME_SIZE: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let mut codec = Codec::new(MAX_FRAME_SIZE);
    let mut buf = BytesMut::from(data);
    loop {
        let capacity = buf.capacity();
        match codec.decode(&mut buf) {
            Ok(Some(frame)) => check_reencodes(&frame),
            Ok(None) => {
                assert!(buf.capacity() <= capacity.max(LENGTH_PREFIX_SIZE + MAX_FRAME_SIZE));
                break;
            }
            Err(_) => break,
        }
    }

    if let Ok(frame) = Frame::decode(data) {
        check_reencodes(&frame);
    }
});

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
}
