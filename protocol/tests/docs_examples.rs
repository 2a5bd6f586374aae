//! The worked examples in `docs/PROTOCOL.md` are the real encoder's output.
//!
//! Each example in the document is a fenced block whose info string is `hex` and whose
//! first line is `# example: NAME`. Every line holds hex byte pairs, optionally followed
//! by `#` and a comment. This test encodes the frame each name stands for and compares
//! the bytes, and checks that the bytes decode back to the same frame, so the document
//! cannot drift from the code.

use std::collections::BTreeMap;

use bytes::BytesMut;
use rollcall_protocol::{
    supported_versions, ApiKey, ApiVersionsRequest, ApiVersionsResponse, AssignmentPush, ErrorCode,
    Frame, HeartbeatRequest, HeartbeatResponse, JoinRequest, JoinResponse, LeaveMode, LeaveRequest,
    Push, Request, Response, TopicPartitions, TopicSubscription, DEFAULT_MAX_FRAME_SIZE,
    LENGTH_PREFIX_SIZE,
};

const DOC: &str = include_str!("../../docs/PROTOCOL.md");

const GROUP: &str = "orders";
const MEMBER: &str = "m-1a2b-7";

/// Every example the document shows, by name.
fn examples() -> Vec<(&'static str, Frame)> {
    vec![
        (
            "api-versions-request",
            Frame::request(
                1,
                Request::ApiVersions(ApiVersionsRequest {
                    client_software: "example/1.0".into(),
                    versions: supported_versions(),
                }),
            ),
        ),
        (
            "leave-request-v1",
            Frame::request(
                4,
                Request::Leave(LeaveRequest {
                    group: GROUP.into(),
                    member_id: MEMBER.into(),
                    mode: LeaveMode::Unconfirmed,
                }),
            ),
        ),
        (
            "api-versions-response",
            Frame::response(
                1,
                Response::ApiVersions(ApiVersionsResponse {
                    versions: supported_versions(),
                    max_frame_size: DEFAULT_MAX_FRAME_SIZE as u32,
                }),
            ),
        ),
        (
            "join-request",
            Frame::request(
                2,
                Request::Join(JoinRequest {
                    group: GROUP.into(),
                    member_id: None,
                    instance_id: Some("worker-a".into()),
                    client_id: "billing".into(),
                    join_token: 0x0123_4567_89ab_cdef,
                    subscription: vec![TopicSubscription {
                        topic: "payments".into(),
                        partitions: 12,
                    }],
                    session_timeout_ms: 10_000,
                    progress_timeout_ms: 300_000,
                    rebalance_timeout_ms: 60_000,
                }),
            ),
        ),
        (
            "join-response",
            Frame::response(
                2,
                Response::Join(JoinResponse {
                    member_id: MEMBER.into(),
                    generation: 4,
                    heartbeat_interval_ms: 3_333,
                }),
            ),
        ),
        (
            "assignment-push",
            Frame::push(Push::Assignment(AssignmentPush {
                group: GROUP.into(),
                member_id: MEMBER.into(),
                generation: 5,
                partitions: vec![TopicPartitions {
                    topic: "payments".into(),
                    partitions: vec![0, 1, 2],
                }],
            })),
        ),
        (
            "heartbeat-request",
            Frame::request(
                3,
                Request::Heartbeat(HeartbeatRequest {
                    group: GROUP.into(),
                    member_id: MEMBER.into(),
                    generation: 5,
                    sequence: 1,
                    progress: 1_500,
                    acked_revocations: Vec::new(),
                }),
            ),
        ),
        (
            "heartbeat-response",
            Frame::response(
                3,
                Response::Heartbeat(HeartbeatResponse {
                    generation: 5,
                    session_timeout_ms: 10_000,
                }),
            ),
        ),
        (
            "handshake-required-response",
            Frame::response(
                2,
                Response::error(
                    ApiKey::Join as u16,
                    ErrorCode::HandshakeRequired,
                    "send ApiVersions first",
                ),
            ),
        ),
    ]
}

/// The document's example blocks, by name.
fn doc_blocks() -> BTreeMap<String, Vec<u8>> {
    let mut blocks = BTreeMap::new();
    let mut lines = DOC.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```hex" {
            continue;
        }
        let first = lines.next().expect("a hex block has a first line");
        let name = first
            .trim()
            .strip_prefix("# example:")
            .unwrap_or_else(|| panic!("hex block starts with {first:?}, not `# example: NAME`"))
            .trim()
            .to_owned();
        let mut bytes = Vec::new();
        for line in lines.by_ref() {
            if line.trim() == "```" {
                break;
            }
            let data = line.split('#').next().unwrap_or("");
            for pair in data.split_whitespace() {
                let byte = u8::from_str_radix(pair, 16)
                    .unwrap_or_else(|_| panic!("example {name}: {pair:?} is not a hex byte"));
                assert_eq!(pair.len(), 2, "example {name}: {pair:?} is not two digits");
                bytes.push(byte);
            }
        }
        assert!(
            blocks.insert(name.clone(), bytes).is_none(),
            "example {name} appears twice"
        );
    }
    blocks
}

fn encode(frame: &Frame) -> Vec<u8> {
    let mut buf = BytesMut::new();
    frame
        .encode(&mut buf, DEFAULT_MAX_FRAME_SIZE)
        .expect("encodes");
    buf.to_vec()
}

/// Prints the examples as hex, one line of 16 bytes at a time, when
/// `PRINT_EXAMPLES` is set: a starting point for a new example block.
#[test]
fn print_examples_on_request() {
    if std::env::var_os("PRINT_EXAMPLES").is_none() {
        return;
    }
    for (name, frame) in examples() {
        println!("# example: {name}");
        for chunk in encode(&frame).chunks(16) {
            let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
            println!("{}", hex.join(" "));
        }
        println!();
    }
}

#[test]
fn the_document_shows_exactly_these_examples() {
    let blocks = doc_blocks();
    let shown: Vec<&str> = blocks.keys().map(String::as_str).collect();
    let mut expected: Vec<&str> = examples().iter().map(|(name, _)| *name).collect();
    expected.sort_unstable();
    assert_eq!(shown, expected);
}

#[test]
fn every_example_is_the_encoders_output() {
    let blocks = doc_blocks();
    for (name, frame) in examples() {
        let Some(shown) = blocks.get(name) else {
            continue; // reported by the_document_shows_exactly_these_examples
        };
        let actual = encode(&frame);
        assert_eq!(
            shown, &actual,
            "example {name} in docs/PROTOCOL.md differs from the encoder's output"
        );
        let decoded = Frame::decode(&shown[LENGTH_PREFIX_SIZE..]).expect("example decodes");
        assert_eq!(decoded, frame, "example {name} decodes to something else");
    }
}
