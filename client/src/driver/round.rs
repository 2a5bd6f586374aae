//! Heartbeat rounds: one Heartbeats frame for the memberships of a connection.
//!
//! Each membership schedules its own heartbeats and produces lone Heartbeat requests.
//! When the coordinator supports the Heartbeats request, the connection task sends the
//! heartbeats due in one pass together, and brings along those of the other memberships
//! that would be due within half their interval (a beat sent early is harmless; none is
//! ever sent later than its schedule). Each result of the answer goes back to its
//! membership as the answer its lone Heartbeat would have had, so the memberships'
//! handling of answers (leases from the send instant, acknowledgements, errors) is the
//! same either way.

use std::time::Instant;

use rollcall_protocol::{
    ApiKey, ClientAction, HeartbeatRequest, HeartbeatResult, HeartbeatsRequest, Request, Response,
};

use crate::membership::{Membership, RequestId};

/// One membership's heartbeat, as its `poll_transmit` produced it.
#[derive(Debug, Clone)]
pub(super) struct Beat {
    /// The membership's slot.
    pub(super) key: u64,
    /// The membership's id for the request.
    pub(super) id: RequestId,
    pub(super) beat: HeartbeatRequest,
}

/// What the memberships send in one pass of the connection task.
#[derive(Debug, Default)]
pub(super) struct Pass {
    /// Requests to send as they are (slot, request id, request).
    pub(super) requests: Vec<(u64, RequestId, Request)>,
    /// Heartbeats to send as a round (empty unless batching).
    pub(super) beats: Vec<Beat>,
}

impl Pass {
    fn take(&mut self, key: u64, m: &mut Membership, now: Instant, batching: bool) {
        while let Some((id, request)) = m.poll_transmit(now) {
            match request {
                Request::Heartbeat(beat) if batching => self.beats.push(Beat { key, id, beat }),
                request => self.requests.push((key, id, request)),
            }
        }
    }
}

/// Everything the memberships have to send at `now`. With `batching`, heartbeats are
/// set apart, and as soon as one is due, every other membership whose heartbeat would be
/// due within half its interval sends it now too.
pub(super) fn gather<'a>(
    members: impl IntoIterator<Item = (u64, &'a mut Membership)>,
    now: Instant,
    batching: bool,
) -> Pass {
    let mut members: Vec<(u64, &mut Membership)> = members.into_iter().collect();
    let mut pass = Pass::default();
    for (key, m) in &mut members {
        pass.take(*key, m, now, batching);
    }
    if batching && !pass.beats.is_empty() {
        for (key, m) in &mut members {
            if m.pull_beat(now) {
                pass.take(*key, m, now, batching);
            }
        }
    }
    pass
}

/// How a round's heartbeats go out.
#[derive(Debug)]
pub(super) enum Outgoing {
    /// A Heartbeat request on its own: alone in its round (or too large to share).
    Lone(Beat),
    /// One Heartbeats request carrying these, in this order.
    Batch(Vec<Beat>),
}

/// Splits a round into frames: as few Heartbeats requests as fit `max_frame_size` and
/// [`MAX_BEATS`], in order; a frame that would carry one beat is a lone Heartbeat.
pub(super) fn frames(beats: Vec<Beat>, max_frame_size: usize) -> Vec<Outgoing> {
    let sizes = HeartbeatsRequest::batch_sizes(beats.iter().map(|b| &b.beat), max_frame_size);
    let mut beats = beats.into_iter();
    sizes
        .into_iter()
        .map(|n| {
            let mut batch: Vec<Beat> = beats.by_ref().take(n).collect();
            match batch.len() {
                1 => Outgoing::Lone(batch.remove(0)),
                _ => Outgoing::Batch(batch),
            }
        })
        .collect()
}

/// The Heartbeats request for `beats`.
pub(super) fn request(beats: &[Beat]) -> Request {
    Request::Heartbeats(HeartbeatsRequest {
        beats: beats.iter().map(|b| b.beat.clone()).collect(),
    })
}

/// The answer to each of `count` beats, in order, each as a lone Heartbeat would have
/// been answered: a success as a Heartbeat response, an error as an error response. A
/// transient error of the whole request is every beat's answer. Anything else (an
/// answer of another kind or length, a refusal) cannot be dispatched: the reason is
/// returned, and the beats are to be sent alone.
pub(super) fn answers(count: usize, response: Response) -> Result<Vec<Response>, String> {
    match response {
        Response::Heartbeats(r) if r.results.len() == count => Ok(r
            .results
            .into_iter()
            .map(HeartbeatResult::into_response)
            .collect()),
        Response::Heartbeats(r) => Err(format!("{} results for {count} beats", r.results.len())),
        Response::Error(e) if e.code.action() == ClientAction::Retry => Ok(vec![
            Response::error(
                ApiKey::Heartbeat as u16,
                e.code,
                e.message
            );
            count
        ]),
        Response::Error(e) => Err(format!("{}: {}", e.code, e.message)),
        other => Err(format!("an answer with api key {}", other.api_key())),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::BytesMut;
    use rollcall_protocol::{
        Frame, HeartbeatsResponse, JoinResponse, Push, RevokePush, TopicPartitions,
    };

    use super::*;
    use crate::config::MemberConfig;
    use crate::membership::{BackoffConfig, Features};
    use crate::types::TopicPartition;
    use rollcall_protocol::{ErrorCode, HeartbeatResponse, HEADER_SIZE, MAX_BEATS};

    const INTERVAL: Duration = Duration::from_millis(200);
    const LEASE: Duration = Duration::from_millis(600);
    const MARGIN: Duration = Duration::from_millis(50);
    const MS: Duration = Duration::from_millis(1);

    /// A membership of `group` that joined as `member` at `at` (its first heartbeat is
    /// then due 0.8 to 1 interval later).
    fn joined(group: &str, member: &str, at: Instant, seed: u64) -> Membership {
        let config = MemberConfig::new(group, [("t", 4)])
            .with_session_timeout(Duration::from_secs(1))
            .with_heartbeat_interval(INTERVAL)
            .with_lease_timeout(LEASE)
            .with_lease_margin(MARGIN);
        let backoff = BackoffConfig { base: MS, max: MS };
        let mut m = Membership::new(config.resolve().unwrap(), backoff, seed, at);
        m.handle_connected(at, Features::ALL);
        let Some((id, Request::Join(_))) = m.poll_transmit(at) else {
            panic!("a join goes out first");
        };
        let answer = Response::Join(JoinResponse {
            member_id: member.into(),
            generation: 1,
            heartbeat_interval_ms: 0,
        });
        m.handle_response(id, answer, at);
        assert!(m.poll_transmit(at).is_none());
        m
    }

    fn keys(beats: &[Beat]) -> Vec<u64> {
        beats.iter().map(|b| b.key).collect()
    }

    fn beat(member: &str, acks: Vec<TopicPartitions>) -> Beat {
        Beat {
            key: 0,
            id: 1,
            beat: HeartbeatRequest {
                loads: Vec::new(),
                group: "g".into(),
                member_id: member.into(),
                generation: 1,
                sequence: 1,
                progress: 0,
                acked_revocations: acks,
            },
        }
    }

    /// A joined at 0, B at 40 ms and C at 150 ms: A's beat is due first (160 to 200
    /// ms), B's within 80 ms after it (200 to 240 ms), C's over 100 ms after it (310 to
    /// 350 ms).
    fn three(t0: Instant) -> [Membership; 3] {
        [
            joined("g", "a", t0, 1),
            joined("h", "b", t0 + 40 * MS, 2),
            joined("g", "c", t0 + 150 * MS, 3),
        ]
    }

    #[test]
    fn a_due_beat_brings_along_those_due_within_half_their_interval() {
        let t0 = Instant::now();
        let [mut a, mut b, mut c] = three(t0);
        let due = a.poll_timeout().unwrap();
        let c_due = c.poll_timeout().unwrap();

        // Nothing is due before A's beat.
        let before = gather([(1, &mut a), (2, &mut b), (3, &mut c)], due - MS, true);
        assert!(before.beats.is_empty() && before.requests.is_empty());

        let pass = gather([(1, &mut a), (2, &mut b), (3, &mut c)], due, true);
        assert!(pass.requests.is_empty(), "{:?}", pass.requests);
        assert_eq!(keys(&pass.beats), [1, 2]);
        assert_eq!(pass.beats[0].beat.member_id, "a");
        assert_eq!(pass.beats[1].beat.member_id, "b");
        assert_eq!(pass.beats[1].beat.group, "h");
        // B's schedule restarts from the beat sent; C's is untouched.
        assert!(b.poll_timeout().unwrap() >= due + INTERVAL * 8 / 10);
        assert_eq!(c.poll_timeout(), Some(c_due));
    }

    #[test]
    fn without_batching_each_beat_goes_alone_on_its_own_schedule() {
        let t0 = Instant::now();
        let [mut a, mut b, mut c] = three(t0);
        let due = a.poll_timeout().unwrap();
        let b_due = b.poll_timeout().unwrap();
        let pass = gather([(1, &mut a), (2, &mut b), (3, &mut c)], due, false);
        assert!(pass.beats.is_empty());
        assert_eq!(pass.requests.len(), 1);
        assert!(matches!(&pass.requests[0], (1, _, Request::Heartbeat(h)) if h.member_id == "a"));
        assert_eq!(b.poll_timeout(), Some(b_due));
    }

    #[test]
    fn nothing_is_pulled_forward_unless_a_beat_is_due() {
        let t0 = Instant::now();
        let [mut a, mut b, mut c] = three(t0);
        // 1 ms before A's beat, every other beat is within half an interval of it.
        let now = a.poll_timeout().unwrap() - MS;
        let pass = gather([(1, &mut a), (2, &mut b), (3, &mut c)], now, true);
        assert!(pass.beats.is_empty());
        assert_eq!(a.poll_timeout(), Some(now + MS));
    }

    #[test]
    fn an_acknowledgement_goes_out_at_once_and_takes_others_along() {
        let t0 = Instant::now();
        let [mut a, mut b, mut c] = three(t0);
        // Well before any scheduled beat, A is asked to release partition 1 and does.
        let now = t0 + 150 * MS;
        let partitions = vec![TopicPartitions {
            topic: "t".into(),
            partitions: vec![1],
        }];
        for push in [
            Push::Assignment(rollcall_protocol::AssignmentPush {
                group: "g".into(),
                member_id: "a".into(),
                generation: 2,
                partitions: vec![TopicPartitions {
                    topic: "t".into(),
                    partitions: vec![0, 1],
                }],
            }),
            Push::Revoke(RevokePush {
                group: "g".into(),
                member_id: "a".into(),
                generation: 2,
                partitions: partitions.clone(),
            }),
        ] {
            a.handle_push(push, now);
        }
        // The application was given the Revoke of generation 2.
        a.ack([(TopicPartition::new("t", 1), 2)], now);
        let pass = gather([(1, &mut a), (2, &mut b), (3, &mut c)], now, true);
        assert!(pass.requests.is_empty());
        // A's beat goes out now, carrying the acknowledgement, and B's (due 200 to 240
        // ms, within half an interval of 150 ms) with it; C's is not due before 310 ms.
        assert_eq!(keys(&pass.beats), [1, 2]);
        assert_eq!(pass.beats[0].beat.acked_revocations, partitions);
        assert!(pass.beats[1].beat.acked_revocations.is_empty());
    }

    #[test]
    fn each_result_is_its_member_s_answer_and_the_lease_runs_from_the_send() {
        let t0 = Instant::now();
        let [mut a, mut b, mut c] = three(t0);
        let sent = a.poll_timeout().unwrap();
        let pass = gather([(1, &mut a), (2, &mut b), (3, &mut c)], sent, true);
        assert_eq!(keys(&pass.beats), [1, 2]);
        let results = vec![
            HeartbeatResult {
                code: ErrorCode::None,
                generation: 1,
                session_timeout_ms: 1000,
                message: String::new(),
            },
            HeartbeatResult {
                code: ErrorCode::UnknownMember,
                generation: 0,
                session_timeout_ms: 0,
                message: "member \"b\" is not in the group".into(),
            },
        ];
        let answered = sent + 30 * MS;
        let answers = answers(2, Response::Heartbeats(HeartbeatsResponse { results })).unwrap();
        for (beat, answer) in pass.beats.iter().zip(answers) {
            let m = if beat.key == 1 { &mut a } else { &mut b };
            m.handle_response(beat.id, answer, answered);
        }
        assert_eq!(a.lease_deadline(), Some(sent + LEASE - MARGIN));
        assert_eq!(a.member_id(), Some("a"));
        // B was told it is unknown, as a lone Heartbeat would have been: it rejoins.
        assert_eq!(b.member_id(), None);
        assert!(matches!(
            b.poll_transmit(answered),
            Some((_, Request::Join(_)))
        ));
    }

    #[test]
    fn answers_map_results_to_lone_answers_or_say_why_not() {
        let ok = HeartbeatResult {
            code: ErrorCode::None,
            generation: 7,
            session_timeout_ms: 900,
            message: String::new(),
        };
        let gone = HeartbeatResult {
            code: ErrorCode::MemberExpelled,
            generation: 0,
            session_timeout_ms: 0,
            message: "expelled".into(),
        };
        let response = Response::Heartbeats(HeartbeatsResponse {
            results: vec![ok.clone(), gone],
        });
        assert_eq!(
            answers(2, response.clone()).unwrap(),
            [
                Response::Heartbeat(HeartbeatResponse {
                    generation: 7,
                    session_timeout_ms: 900,
                }),
                Response::error(
                    ApiKey::Heartbeat as u16,
                    ErrorCode::MemberExpelled,
                    "expelled"
                ),
            ]
        );
        assert!(answers(3, response).is_err(), "one result per beat");
        // A transient refusal of the whole request is every beat's answer.
        let busy = Response::error(ApiKey::Heartbeats as u16, ErrorCode::StorageFailure, "x");
        assert_eq!(
            answers(2, busy).unwrap(),
            vec![Response::error(ApiKey::Heartbeat as u16, ErrorCode::StorageFailure, "x"); 2]
        );
        // A coordinator that does not take the request, or answers something else.
        for response in [
            Response::error(ApiKey::Heartbeats as u16, ErrorCode::UnknownApi, "no"),
            Response::error(ApiKey::Heartbeats as u16, ErrorCode::InvalidRequest, "no"),
            Response::ListGroups(Default::default()),
        ] {
            assert!(answers(2, response).is_err());
        }
    }

    #[test]
    fn frames_fit_the_frame_size_and_the_beat_limit_and_a_lone_beat_goes_alone() {
        let one = beat("m-1", Vec::new());
        let mut encoded = BytesMut::new();
        Frame::request(1, Request::Heartbeat(one.beat.clone()))
            .encode(&mut encoded, usize::MAX)
            .unwrap();
        let len = one.beat.encoded_len();
        assert_eq!(
            encoded.len(),
            4 + HEADER_SIZE + len,
            "encoded_len is the encoded size"
        );
        let acking = beat(
            "m-2",
            vec![TopicPartitions {
                topic: "orders".into(),
                partitions: vec![1, 2, 3],
            }],
        );
        let mut encoded = BytesMut::new();
        Frame::request(1, Request::Heartbeat(acking.beat.clone()))
            .encode(&mut encoded, usize::MAX)
            .unwrap();
        assert_eq!(encoded.len(), 4 + HEADER_SIZE + acking.beat.encoded_len());

        assert!(matches!(
            &frames(vec![one.clone()], usize::MAX)[..],
            [Outgoing::Lone(_)]
        ));

        // Room for exactly three beats per frame: 7 beats make 3 + 3 + 1.
        let max = HEADER_SIZE + 4 + 3 * len;
        let out = frames(vec![one.clone(); 7], max);
        let sizes: Vec<usize> = out
            .iter()
            .map(|o| match o {
                Outgoing::Lone(_) => 1,
                Outgoing::Batch(b) => b.len(),
            })
            .collect();
        assert_eq!(sizes, [3, 3, 1]);
        for o in &out {
            if let Outgoing::Batch(b) = o {
                let mut buf = BytesMut::new();
                Frame::request(1, request(b)).encode(&mut buf, max).unwrap();
            }
        }

        // No more than MAX_BEATS in one request, however large the frames.
        let out = frames(vec![one; MAX_BEATS + 2], usize::MAX);
        assert!(matches!(&out[..], [Outgoing::Batch(a), Outgoing::Batch(b)]
            if a.len() == MAX_BEATS && b.len() == 2));
    }
}
