//! The codec's edge cases, one by one: length prefixes out of bounds, frames this build
//! does not speak, and bodies that do not match their message.

use bytes::{BufMut, BytesMut};
use rollcall_protocol::{
    ApiKey, Body, Codec, DecodeError, EncodeError, ErrorCode, Frame, FrameError, FrameKind, Header,
    HeartbeatRequest, LeaveMode, LeaveRequest, Push, Request, Response, ShutdownPush,
    DEFAULT_MAX_FRAME_SIZE, HEADER_SIZE, LENGTH_PREFIX_SIZE,
};
use tokio_util::codec::{Decoder, Encoder};

fn heartbeat() -> Frame {
    Frame::request(
        7,
        Request::Heartbeat(HeartbeatRequest {
            loads: Vec::new(),
            group: "orders".into(),
            member_id: "m-1".into(),
            generation: 3,
            sequence: 42,
            progress: 1000,
            acked_revocations: Vec::new(),
        }),
    )
}

fn encoded(frame: &Frame) -> BytesMut {
    let mut buf = BytesMut::new();
    frame
        .encode(&mut buf, DEFAULT_MAX_FRAME_SIZE)
        .expect("encodes");
    buf
}

/// A raw frame: length prefix, header, then `body` as given.
fn raw(kind: u8, api_key: u16, api_version: u16, correlation_id: u32, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.put_u32((HEADER_SIZE + body.len()) as u32);
    v.put_u8(kind);
    v.put_u16(api_key);
    v.put_u16(api_version);
    v.put_u32(correlation_id);
    v.put_slice(body);
    v
}

fn decode_one(bytes: &[u8]) -> (Result<Option<Frame>, FrameError>, BytesMut) {
    let mut buf = BytesMut::from(bytes);
    let result = Codec::default().decode(&mut buf);
    (result, buf)
}

fn malformed(result: Result<Option<Frame>, FrameError>) -> (Option<Header>, DecodeError) {
    match result {
        Err(FrameError::Malformed { header, source }) => (header, source),
        other => panic!("expected a malformed frame, got {other:?}"),
    }
}

#[test]
fn oversized_length_is_refused_as_soon_as_the_prefix_arrives() {
    let declared = (DEFAULT_MAX_FRAME_SIZE + 1) as u32;
    let prefix = declared.to_be_bytes();
    let mut codec = Codec::default();
    let mut buf = BytesMut::new();
    for byte in &prefix[..3] {
        buf.put_u8(*byte);
        assert!(matches!(codec.decode(&mut buf), Ok(None)));
    }
    buf.put_u8(prefix[3]);
    let capacity = buf.capacity();
    match codec.decode(&mut buf) {
        Err(FrameError::TooLarge { declared: d, max }) => {
            assert_eq!(d, declared as usize);
            assert_eq!(max, DEFAULT_MAX_FRAME_SIZE);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(buf.capacity(), capacity, "nothing reserved for the body");

    let (result, _) = decode_one(&u32::MAX.to_be_bytes());
    assert!(matches!(result, Err(FrameError::TooLarge { .. })));
}

#[test]
fn the_largest_allowed_length_reserves_one_frame_and_no_more() {
    let mut buf = BytesMut::new();
    buf.put_u32(DEFAULT_MAX_FRAME_SIZE as u32);
    buf.put_u8(0);
    assert!(matches!(Codec::default().decode(&mut buf), Ok(None)));
    assert!(buf.capacity() >= LENGTH_PREFIX_SIZE + DEFAULT_MAX_FRAME_SIZE);
    assert!(buf.capacity() <= LENGTH_PREFIX_SIZE + DEFAULT_MAX_FRAME_SIZE);
    assert_eq!(&buf[..], &[0, 0x10, 0, 0, 0]);
}

#[test]
fn a_length_shorter_than_the_header_is_refused() {
    for declared in 0..HEADER_SIZE as u32 {
        let (result, _) = decode_one(&declared.to_be_bytes());
        match result {
            Err(FrameError::TooShort { declared: d, min }) => {
                assert_eq!(d, declared as usize);
                assert_eq!(min, HEADER_SIZE);
            }
            other => panic!("length {declared}: expected TooShort, got {other:?}"),
        }
    }
}

#[test]
fn unknown_keys_and_versions_are_skipped_and_the_next_frame_decodes() {
    let next = heartbeat();
    let cases = [
        // An unknown request key with a body this build cannot read.
        raw(0, 999, 0, 11, &[0xde, 0xad, 0xbe, 0xef]),
        // A known request key at a version this build does not speak.
        raw(0, ApiKey::Heartbeat as u16, 2, 12, &[1, 2, 3]),
        // A push key this build does not know.
        raw(2, 90, 0, 0, &[0xff; 10]),
        // A push key used as a request key, and a request key as a push key.
        raw(0, 64, 0, 13, &[]),
        raw(2, ApiKey::Join as u16, 0, 0, &[]),
        // A response to an unknown API whose body is not an error.
        raw(1, 999, 0, 14, &[0, 0, 1, 2]),
    ];
    for case in cases {
        let mut buf = BytesMut::from(&case[..]);
        buf.extend_from_slice(&encoded(&next));
        let mut codec = Codec::default();
        let frame = codec.decode(&mut buf).expect("decodes").expect("whole");
        let Body::Unsupported(header) = frame.body else {
            panic!("expected Unsupported, got {frame:?}");
        };
        assert_eq!(header.kind.to_u8(), case[4]);
        assert_eq!(header.api_key, u16::from_be_bytes([case[5], case[6]]));
        assert_eq!(header.api_version, u16::from_be_bytes([case[7], case[8]]));
        assert_eq!(frame.correlation_id, header.correlation_id);
        assert_eq!(codec.decode(&mut buf).expect("decodes"), Some(next.clone()));
        assert!(buf.is_empty());
    }
}

#[test]
fn an_error_answer_to_an_unknown_api_is_readable() {
    let answer = Frame::response(
        21,
        Response::error(999, ErrorCode::UnknownApi, "no such api"),
    );
    let bytes = encoded(&answer);
    assert_eq!(&bytes[5..7], &999u16.to_be_bytes());
    let (result, rest) = decode_one(&bytes);
    assert_eq!(result.expect("decodes"), Some(answer));
    assert!(rest.is_empty());

    // Likewise at a version this build does not speak.
    let mut body = Vec::new();
    body.put_u16(ErrorCode::UnsupportedVersion.to_u16());
    body.put_u16(2);
    body.put_slice(b"v0");
    body.put_u32(0);
    let (result, _) = decode_one(&raw(1, ApiKey::Join as u16, 5, 22, &body));
    match result.expect("decodes").expect("whole").body {
        Body::Response(Response::Error(e)) => {
            assert_eq!(e.api_key, ApiKey::Join as u16);
            assert_eq!(e.code, ErrorCode::UnsupportedVersion);
            assert_eq!(e.message, "v0");
        }
        other => panic!("expected an error response, got {other:?}"),
    }
}

#[test]
fn trailing_bytes_are_an_error() {
    let mut bytes = encoded(&heartbeat()).to_vec();
    bytes.push(0);
    let len = (bytes.len() - LENGTH_PREFIX_SIZE) as u32;
    bytes[..4].copy_from_slice(&len.to_be_bytes());
    let (result, rest) = decode_one(&bytes);
    let (header, source) = malformed(result);
    let header = header.expect("header was readable");
    assert_eq!(header.kind, FrameKind::Request);
    assert_eq!(header.api_key, ApiKey::Heartbeat as u16);
    assert_eq!(header.correlation_id, 7);
    assert_eq!(source, DecodeError::TrailingBytes { count: 1 });
    assert!(rest.is_empty(), "the bad frame was consumed");

    // ListGroups has an empty body: any byte is trailing.
    let (result, _) = decode_one(&raw(0, ApiKey::ListGroups as u16, 0, 1, &[0]));
    assert_eq!(malformed(result).1, DecodeError::TrailingBytes { count: 1 });
}

#[test]
fn a_truncated_body_is_an_error() {
    let bytes = encoded(&heartbeat());
    let mut short = bytes[..bytes.len() - 1].to_vec();
    let len = (short.len() - LENGTH_PREFIX_SIZE) as u32;
    short[..4].copy_from_slice(&len.to_be_bytes());
    let (result, _) = decode_one(&short);
    let (header, source) = malformed(result);
    assert!(header.is_some());
    assert!(matches!(source, DecodeError::Truncated { .. }));
}

#[test]
fn invalid_utf8_is_an_error() {
    let mut body = Vec::new();
    body.put_u16(2);
    body.put_slice(&[0xc3, 0x28]); // a broken two-byte sequence
    body.put_u16(1);
    body.put_slice(b"m");
    let (result, _) = decode_one(&raw(0, ApiKey::Leave as u16, 0, 5, &body));
    let (header, source) = malformed(result);
    assert_eq!(header.map(|h| h.correlation_id), Some(5));
    assert!(matches!(source, DecodeError::Invalid { what: "group", .. }));

    // The same bytes as valid UTF-8 decode.
    let valid = Frame::request(
        5,
        Request::Leave(LeaveRequest {
            group: "é".into(),
            member_id: "m".into(),
            mode: LeaveMode::Released,
        }),
    );
    let (result, _) = decode_one(&encoded(&valid));
    assert_eq!(result.expect("decodes"), Some(valid));
}

/// A heartbeat's ids are read in place: they point into the bytes the codec was given
/// (no copy per beat), and are still checked as UTF-8, in the member id as in the group.
#[test]
fn heartbeat_ids_point_into_the_frame_and_are_checked() {
    let mut codec = Codec::default();
    let mut buf = encoded(&heartbeat());
    let start = buf.as_ptr() as usize;
    let end = start + buf.len();
    let frame = codec.decode(&mut buf).expect("decodes").expect("a frame");
    assert_eq!(frame, heartbeat());
    let Body::Request(Request::Heartbeat(beat)) = &frame.body else {
        panic!("not a heartbeat: {frame:?}");
    };
    for id in [&beat.group, &beat.member_id] {
        let at = id.as_ptr() as usize;
        assert!((start..end).contains(&at), "{id} was copied");
    }
    // Frame::decode (a borrowed slice) copies, and agrees.
    let bytes = encoded(&heartbeat());
    assert_eq!(
        Frame::decode(&bytes[LENGTH_PREFIX_SIZE..]).expect("decodes"),
        heartbeat()
    );

    let mut body = Vec::new();
    body.put_u16(6);
    body.put_slice(b"orders");
    body.put_u16(2);
    body.put_slice(&[0xc3, 0x28]);
    body.put_slice(&[0; 4 + 8 + 8 + 4]);
    let (result, _) = decode_one(&raw(0, ApiKey::Heartbeat as u16, 0, 9, &body));
    let (header, source) = malformed(result);
    assert_eq!(header.map(|h| h.correlation_id), Some(9));
    assert!(matches!(
        source,
        DecodeError::Invalid {
            what: "member id",
            ..
        }
    ));
}

#[test]
fn invalid_enum_values_are_errors() {
    // Frame kind 3 does not exist: the header itself is unreadable.
    let (result, _) = decode_one(&raw(3, 0, 0, 9, &[]));
    assert_eq!(malformed(result).0, None);

    // An optional-string flag of 2.
    let mut body = Vec::new();
    body.put_u16(1);
    body.put_slice(b"g");
    body.put_u8(2);
    let (result, _) = decode_one(&raw(0, ApiKey::CommitOffsets as u16, 0, 1, &body));
    assert!(matches!(malformed(result).1, DecodeError::Invalid { .. }));

    // An error code this build does not know.
    let (result, _) = decode_one(&raw(1, ApiKey::Leave as u16, 0, 1, &[0xff, 0xff]));
    assert!(matches!(
        malformed(result).1,
        DecodeError::Invalid {
            what: "error code",
            ..
        }
    ));

    // An expel reason of 0.
    let mut body = Vec::new();
    body.put_u16(0);
    body.put_u16(0);
    body.put_u8(0);
    body.put_u16(0);
    let (result, _) = decode_one(&raw(2, 66, 0, 0, &body));
    assert!(matches!(malformed(result).1, DecodeError::Invalid { .. }));
}

#[test]
fn a_hostile_array_count_allocates_nothing() {
    let mut body = Vec::new();
    body.put_u16(1);
    body.put_slice(b"g");
    body.put_u32(u32::MAX);
    let (result, _) = decode_one(&raw(0, ApiKey::FetchOffsets as u16, 0, 1, &body));
    assert!(matches!(
        malformed(result).1,
        DecodeError::Truncated { what: "topics" }
    ));
}

#[test]
fn an_encode_over_the_limit_fails_and_leaves_the_buffer_unchanged() {
    let frame = Frame::push(Push::Shutdown(ShutdownPush {
        message: "x".repeat(100),
    }));
    let exact = encoded(&frame).len() - LENGTH_PREFIX_SIZE;

    let mut buf = BytesMut::from(&b"earlier frames"[..]);
    assert_eq!(
        frame.encode(&mut buf, exact - 1),
        Err(EncodeError::FrameTooLarge {
            len: exact,
            max: exact - 1
        })
    );
    assert_eq!(&buf[..], b"earlier frames");

    let mut codec = Codec::new(exact - 1);
    assert!(matches!(
        codec.encode(&frame, &mut buf),
        Err(FrameError::Encode(EncodeError::FrameTooLarge { .. }))
    ));
    assert_eq!(&buf[..], b"earlier frames");

    assert_eq!(frame.encode(&mut buf, exact), Ok(()));
    assert_eq!(
        buf.len(),
        b"earlier frames".len() + LENGTH_PREFIX_SIZE + exact
    );
}

#[test]
fn an_overlong_string_fails_and_leaves_the_buffer_unchanged() {
    let frame = Frame::request(
        1,
        Request::Leave(LeaveRequest {
            group: "g".into(),
            member_id: "m".repeat(65_536),
            mode: LeaveMode::Released,
        }),
    );
    let mut buf = BytesMut::from(&b"kept"[..]);
    assert_eq!(
        frame.encode(&mut buf, usize::MAX),
        Err(EncodeError::StringTooLong { len: 65_536 })
    );
    assert_eq!(&buf[..], b"kept");

    // 65,535 bytes is the longest string there is.
    let frame = Frame::request(
        1,
        Request::Leave(LeaveRequest {
            group: "g".into(),
            member_id: "m".repeat(65_535),
            mode: LeaveMode::Released,
        }),
    );
    let bytes = encoded(&frame);
    let (result, _) = decode_one(&bytes);
    assert_eq!(result.expect("decodes"), Some(frame));
}

#[test]
fn a_page_takes_its_first_entry_then_what_fits_its_limit_and_frame() {
    use rollcall_protocol::{PageFit, HEADER_SIZE};
    // Room for 100 bytes of entries after the header and a 10-byte base.
    let frame = HEADER_SIZE + 10 + 100;
    let mut fit = PageFit::new(0, frame, 10);
    assert!(fit.take(60));
    assert!(fit.take(40));
    assert!(!fit.take(1), "the frame is full");
    // The first entry is taken whatever its size, so every page makes progress.
    let mut fit = PageFit::new(0, frame, 10);
    assert!(fit.take(1000));
    assert!(!fit.take(1));
    // A limit stops the page before the frame does; 0 is no limit.
    let mut fit = PageFit::new(2, frame, 10);
    assert!(fit.take(1));
    assert!(fit.take(1));
    assert!(!fit.take(1));
}

/// A DescribeGroup answer at version 3: one member, a summary with one tail count.
fn described_v3() -> Frame {
    use rollcall_protocol::{
        DescribeGroupResponse, DetectionSummary, ExpelBasis, GroupDetection, GroupState, Liveness,
        MemberDescription, MemberDetection, TailCount,
    };
    Frame::response(
        7,
        Response::DescribeGroup(DescribeGroupResponse {
            operator: None,
            group: "g".into(),
            state: GroupState::Stable,
            generation: 1,
            assignor: "sticky".into(),
            members: vec![MemberDescription {
                operator: None,
                member_id: "m".into(),
                instance_id: None,
                client_id: "c".into(),
                liveness: Liveness::Alive,
                since_heartbeat_ms: 1,
                since_progress_ms: 1,
                owned: Vec::new(),
                pending_revoke: Vec::new(),
                pending_grant: Vec::new(),
                detection: Some(MemberDetection {
                    expel_basis: Some(ExpelBasis::Tail),
                    ..MemberDetection::default()
                }),
            }],
            detection: Some(Box::new(GroupDetection {
                detector: "adaptive".into(),
                shadow: None,
                summary: Some(DetectionSummary {
                    pooled_gaps: 5,
                    shape_milli: -250,
                    tail: vec![TailCount {
                        over_centi: 300,
                        gaps: 2,
                    }],
                    ..DetectionSummary::default()
                }),
            })),
            more: Some(false),
        }),
    )
}

#[test]
fn a_describe_group_v3_answer_round_trips_and_its_bad_bodies_are_errors() {
    let bytes = encoded(&described_v3());
    // The answer goes at version 3, and decodes to itself (a negative shape included).
    assert_eq!(u16::from_be_bytes([bytes[7], bytes[8]]), 3);
    let (result, _) = decode_one(&bytes);
    assert_eq!(result.unwrap(), Some(described_v3()));

    // An expel basis this build does not know: the byte before `more`.
    let mut bad = bytes.to_vec();
    let at = bad.len() - 2;
    bad[at] = 4;
    assert!(matches!(
        malformed(decode_one(&bad).0).1,
        DecodeError::Invalid {
            what: "expel basis",
            ..
        }
    ));

    // Cut short anywhere in the body: truncated, never a panic or a wrong value.
    for cut in LENGTH_PREFIX_SIZE + HEADER_SIZE..bytes.len() - 1 {
        let mut short = bytes[..cut].to_vec();
        let len = (cut - LENGTH_PREFIX_SIZE) as u32;
        short[..4].copy_from_slice(&len.to_be_bytes());
        assert!(
            decode_one(&short).0.is_err(),
            "a body cut at {cut} bytes decoded"
        );
    }

    // A hostile count of tail entries allocates nothing.
    let mut body = Vec::new();
    body.put_u16(0); // error code
    body.put_u16(1);
    body.put_slice(b"g");
    body.put_u8(2); // stable
    body.put_u32(1);
    body.put_u16(0); // assignor ""
    body.put_u16(0); // detector ""
    body.put_u8(0); // no shadow
    body.put_slice(&[0; 8 * 3 + 4 * 3 + 8 + 4 + 8 + 4 + 4 + 8 * 2]);
    body.put_u32(u32::MAX);
    let (result, _) = decode_one(&raw(1, ApiKey::DescribeGroup as u16, 3, 7, &body));
    assert!(matches!(
        malformed(result).1,
        DecodeError::Truncated { what: "tail" }
    ));

    // A version 2 answer of the same value has no summary and no expel basis.
    let Body::Response(Response::DescribeGroup(mut v2)) = described_v3().body else {
        unreachable!()
    };
    if let Some(d) = v2.detection.as_mut() {
        d.summary = None;
    }
    let v2_bytes = encoded(&Frame::response(7, Response::DescribeGroup(v2.clone())));
    assert_eq!(u16::from_be_bytes([v2_bytes[7], v2_bytes[8]]), 2);
    // The summary (84 bytes and 12 a tail count) and the expel basis (1 byte).
    assert_eq!(v2_bytes.len() + 84 + 12 + 1, bytes.len());
    let (result, _) = decode_one(&v2_bytes);
    let Some(Frame {
        body: Body::Response(Response::DescribeGroup(decoded)),
        ..
    }) = result.unwrap()
    else {
        unreachable!()
    };
    assert_eq!(decoded.members[0].detection.unwrap().expel_basis, None);
}
