use bytes::BytesMut;
use rollcall_protocol::{
    Body, Codec, Frame, HeartbeatResult, Request, Response, DEFAULT_MAX_FRAME_SIZE,
    LENGTH_PREFIX_SIZE,
};
use tokio_util::codec::Decoder;

use super::generator::{advance, expected, frame_bytes, heartbeat, request};
use super::server::{canned_answer, canned_batch_answer, put_answer, CANNED};

#[test]
fn the_canned_answer_is_a_heartbeat_response_with_the_request_id() {
    let answer = canned_answer().unwrap();
    let mut out = BytesMut::new();
    put_answer(&mut out, &answer, 7);
    put_answer(&mut out, &answer, 0xdead_beef);
    let mut codec = Codec::default();
    for id in [7, 0xdead_beef] {
        let frame = codec.decode(&mut out).unwrap().unwrap();
        assert_eq!(frame, Frame::response(id, Response::Heartbeat(CANNED)));
    }
    assert!(out.is_empty());
}

#[test]
fn the_batch_answer_has_an_ok_result_per_beat_and_the_request_id() {
    let answer = canned_batch_answer(100).unwrap();
    let mut out = BytesMut::new();
    put_answer(&mut out, &answer, 9);
    let frame = Codec::default().decode(&mut out).unwrap().unwrap();
    assert_eq!(frame.correlation_id, 9);
    let Body::Response(response) = &frame.body else {
        panic!("not a response: {frame:?}");
    };
    assert!(expected(response, 100, true), "{response:?}");
    assert!(!expected(response, 99, true));
    assert!(!expected(response, 100, false));
    let Response::Heartbeats(r) = response else {
        unreachable!()
    };
    assert_eq!(
        r.results[0],
        HeartbeatResult::from_response(Response::Heartbeat(CANNED))
    );
    // Header, error code, count, and per result a code, a generation, a timeout
    // and an empty message.
    assert_eq!(answer.len(), LENGTH_PREFIX_SIZE + 9 + 2 + 4 + 100 * 12);
}

#[test]
fn a_batched_request_renews_a_connections_members_as_steady_lays_them_out() {
    let single = request(3, 1, 10, 0);
    assert!(matches!(single, Request::Heartbeat(_)));
    let mut batch = request(3, 100, 100, 0x19a_0000_0000);
    let Request::Heartbeats(r) = &batch else {
        panic!("not a Heartbeats request: {batch:?}");
    };
    assert_eq!(r.beats.len(), 100);
    assert_eq!(&*r.beats[0].member_id, "m300-19a000000005eed-0");
    assert_eq!(&*r.beats[0].group, "g0");
    assert_eq!(&*r.beats[99].group, "g99");
    let bytes = frame_bytes(&batch);
    let mut encoded = BytesMut::new();
    Frame::request(1, batch.clone())
        .encode(&mut encoded, DEFAULT_MAX_FRAME_SIZE)
        .unwrap();
    assert_eq!(bytes, encoded.len());
    advance(&mut batch);
    let Request::Heartbeats(r) = &batch else {
        unreachable!()
    };
    assert!(r.beats.iter().all(|b| b.sequence == 1 && b.progress == 1));
}

#[test]
fn heartbeats_are_as_long_as_steady_ones() {
    let beat = heartbeat(999, 10, 0x19a_0000_0000);
    assert_eq!(&*beat.group, "g9");
    assert_eq!(beat.member_id.len(), "m999-19a000000005eed-1".len());
    assert!((20..=24).contains(&beat.member_id.len()));
}
