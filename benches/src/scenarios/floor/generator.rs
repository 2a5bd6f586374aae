//! The generator of `floor`: real heartbeat frames, one outstanding per connection at
//! most, counted and timed in the load generator's [`Shared`] as the driver's
//! heartbeats are, so that `floor` and `steady` figures come from the same counters.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rollcall_protocol::{
    Body, Codec, ErrorCode, Frame, HeartbeatRequest, HeartbeatsRequest, Request, Response,
    DEFAULT_MAX_FRAME_SIZE, LENGTH_PREFIX_SIZE,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Decoder;

use super::READ_ROOM;
use crate::common::group_name;
use crate::driver::Shared;
use crate::scenarios::connections::{open_each, Opened};

/// Connections being opened at once.
const CONNECT_CONCURRENCY: usize = 256;

/// Time one connection is given to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A heartbeat sent more than this after its intended time counts as late (as in
/// `steady`).
const LATE: Duration = Duration::from_millis(2);

/// Latency samples a connection buffers before adding them to the shared histograms.
const LOCAL_SAMPLES: usize = 128;

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// How a connection paces its heartbeats.
#[derive(Debug, Clone, Copy)]
pub(super) enum Pace {
    /// On the global timeline: the first at `first`, then one every `period`.
    Periodic {
        first: Instant,
        period: Duration,
    },
    ClosedLoop,
}

/// The Heartbeat of member `i`: its group and member id as long as rollcall's
/// (`g{i % groups}`, as `steady` names them, and the coordinator's
/// `m<n>-<start ms, hex><nonce, hex>-<shard>`).
pub(super) fn heartbeat(i: usize, groups: usize, start_ms: u128) -> HeartbeatRequest {
    HeartbeatRequest {
        loads: Vec::new(),
        group: group_name(i % groups).into(),
        member_id: format!("m{i}-{start_ms:x}{:04x}-{}", 0x5eed, i % 2).into(),
        generation: 1,
        sequence: 0,
        progress: 0,
        acked_revocations: Vec::new(),
    }
}

/// What connection `conn` sends each round: with one beat per frame the Heartbeat of
/// member `conn`, as steady with one member per connection; with more, a Heartbeats
/// request of the beats of members `conn * beats .. (conn + 1) * beats`, as steady's
/// connections hold their members.
pub(super) fn request(conn: usize, beats: usize, groups: usize, start_ms: u128) -> Request {
    if beats == 1 {
        return Request::Heartbeat(heartbeat(conn, groups, start_ms));
    }
    Request::Heartbeats(HeartbeatsRequest {
        beats: (conn * beats..(conn + 1) * beats)
            .map(|i| heartbeat(i, groups, start_ms))
            .collect(),
    })
}

/// Bytes of `request`'s frame, length prefix included.
pub(super) fn frame_bytes(request: &Request) -> usize {
    let body = match request {
        Request::Heartbeat(beat) => beat.encoded_len(),
        Request::Heartbeats(r) => {
            4 + r
                .beats
                .iter()
                .map(HeartbeatRequest::encoded_len)
                .sum::<usize>()
        }
        _ => 0,
    };
    LENGTH_PREFIX_SIZE + rollcall_protocol::HEADER_SIZE + body
}

/// The next beat of each member `request` renews: sequence and progress advance.
pub(super) fn advance(request: &mut Request) {
    let next = |beat: &mut HeartbeatRequest| {
        beat.sequence += 1;
        beat.progress += 1;
    };
    match request {
        Request::Heartbeat(beat) => next(beat),
        Request::Heartbeats(r) => r.beats.iter_mut().for_each(next),
        _ => {}
    }
}

/// Whether `response` is the answer expected to a request of `beats` beats: a
/// Heartbeat response to a Heartbeat, a Heartbeats response of as many OK results to a
/// Heartbeats request.
pub(super) fn expected(response: &Response, beats: usize, batched: bool) -> bool {
    match response {
        Response::Heartbeat(_) => !batched,
        Response::Heartbeats(r) => {
            batched
                && r.results.len() == beats
                && r.results.iter().all(|r| r.code == ErrorCode::None)
        }
        _ => false,
    }
}

/// Reads until `codec` yields a frame.
async fn next_frame(
    stream: &mut TcpStream,
    codec: &mut Codec,
    read: &mut BytesMut,
) -> Result<Frame, String> {
    // Bounded by the peer: every turn reads at least a byte, or ends.
    loop {
        if let Some(frame) = codec.decode(read).map_err(|e| e.to_string())? {
            return Ok(frame);
        }
        read.reserve(READ_ROOM);
        match stream.read_buf(read).await {
            Ok(0) => return Err("closed".to_owned()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// One connection's heartbeats, until the stop: counted in `shared`'s counters and
/// measured when intended within its window, as the driver's are.
pub(super) async fn drive(
    mut stream: TcpStream,
    key: usize,
    request: Request,
    pace: Pace,
    shared: Arc<Shared>,
) {
    let c = &shared.counters;
    let mut codec = Codec::default();
    let mut read = BytesMut::new();
    let mut write = BytesMut::new();
    let (beats, batched) = match &request {
        Request::Heartbeats(r) => (r.beats.len(), true),
        _ => (1, false),
    };
    let n = beats as u64;
    let mut frame = Frame::request(0, request);
    let mut from_intended = Vec::with_capacity(LOCAL_SAMPLES);
    let mut from_sent = Vec::with_capacity(LOCAL_SAMPLES);
    let mut next = match pace {
        Pace::Periodic { first, .. } => first,
        Pace::ClosedLoop => Instant::now(),
    };
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    // Bounded by the stop, which ends the run's window.
    loop {
        if let Pace::Periodic { .. } = pace {
            tokio::select! {
                () = shared.stop.cancelled() => break,
                () = tokio::time::sleep_until(tokio::time::Instant::from_std(next)) => {}
            }
        } else if shared.stop.is_cancelled() {
            break;
        }
        frame.correlation_id = frame.correlation_id.wrapping_add(1);
        if let Body::Request(request) = &mut frame.body {
            advance(request);
        }
        write.clear();
        if frame.encode(&mut write, DEFAULT_MAX_FRAME_SIZE).is_err() {
            add(&c.hb_err, 1);
            break;
        }
        let sent = Instant::now();
        let intended = match pace {
            Pace::Periodic { .. } => next,
            Pace::ClosedLoop => sent,
        };
        let measured = shared.in_window(intended);
        add(&c.hb_sent, n);
        add(&c.hb_frames_sent, 1);
        if measured {
            add(&c.hb_window_sent, n);
            add(&c.hb_window_frames, 1);
            if sent.saturating_duration_since(intended) > LATE {
                add(&c.hb_window_late, n);
            }
        }
        if stream.write_all(&write).await.is_err() {
            add(&c.conns_lost, 1);
            break;
        }
        let answer = tokio::select! {
            () = shared.stop.cancelled() => break,
            answer = next_frame(&mut stream, &mut codec, &mut read) => answer,
        };
        match answer {
            // Latency is recorded once per frame: every beat of it has the same.
            Ok(Frame {
                correlation_id,
                body: Body::Response(response),
            }) if correlation_id == frame.correlation_id && expected(&response, beats, batched) => {
                let now = Instant::now();
                add(&c.hb_ok, n);
                if measured {
                    add(&c.hb_window_answered, n);
                    from_sent.push(micros(now - sent));
                    if let Pace::Periodic { .. } = pace {
                        from_intended.push(micros(now.saturating_duration_since(intended)));
                    }
                    if from_sent.len() >= LOCAL_SAMPLES {
                        shared.hb_service.record_micros(key, &from_sent);
                        shared.hb_intended.record_micros(key, &from_intended);
                        from_sent.clear();
                        from_intended.clear();
                    }
                }
            }
            Ok(_) => {
                add(&c.hb_err, 1);
                break;
            }
            Err(_) => {
                add(&c.conns_lost, 1);
                break;
            }
        }
        if let Pace::Periodic { period, .. } = pace {
            next += period;
        }
    }
    shared.hb_service.record_micros(key, &from_sent);
    shared.hb_intended.record_micros(key, &from_intended);
}

/// Opens `n` plain connections to `addr`, [`CONNECT_CONCURRENCY`] at once, until
/// `deadline`, counting each one opened in `shared`.
pub(super) async fn open(addr: SocketAddr, n: usize, deadline: Instant, shared: &Shared) -> Opened {
    let connect = || async move {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        add(&shared.counters.conns_ready, 1);
        Ok(stream)
    };
    open_each(n, CONNECT_CONCURRENCY, deadline, connect, |_, _| {}).await
}
