//! Randomised schedules checked against the core's invariants.
//!
//! Members are modelled as clients behind a network with random delays, delay spikes,
//! cuts (traffic silently dropped both ways) and crashes. Each client keeps its lease
//! the way the client crate does: from the send time of its last acknowledged
//! heartbeat, plus the session timeout, less a safety margin. Two properties are checked
//! after every step of many seeded runs:
//!
//! - no partition is ever owned by two members at once;
//! - a partition taken from a member that did not release it is granted to another
//!   member only after that member's lease has run out (it stood down first).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use rollcall_protocol::{HeartbeatRequest, Push, Request, Response};

use super::{flatten, TestContext, M};

const SESSION: Duration = Duration::from_millis(1000);
const INTERVAL: Duration = Duration::from_millis(250);
const MARGIN: Duration = Duration::from_millis(50);
const TICK: Duration = Duration::from_millis(5);

struct Client {
    m: M,
    alive: bool,
    cut_until: Instant,
    next_beat: Instant,
    /// The lease as the client computes it.
    lease_until: Option<Instant>,
    /// Partitions this member released by acknowledging them.
    released: BTreeSet<(String, u32)>,
    gone: bool,
}

struct InFlight {
    arrive: Instant,
    client: usize,
    sent: Instant,
    request: Option<Request>,
    ok: bool,
}

fn run(seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut t = TestContext::new();
    let mut clients: Vec<Client> = Vec::new();
    let mut requests: Vec<InFlight> = Vec::new();
    let mut responses: Vec<InFlight> = Vec::new();
    // Who the coordinator last granted each partition to, by member index.
    let mut owner: BTreeMap<(String, u32), usize> = BTreeMap::new();
    let mut seen_pushes = 0;
    let partitions = rng.gen_range(4..16);

    let join = |t: &mut TestContext, clients: &mut Vec<Client>, conn: u64| {
        let mut req = t.join_request("g", &[("orders", partitions)]);
        req.session_timeout_ms = SESSION.as_millis() as u32;
        req.progress_timeout_ms = 10_000;
        req.rebalance_timeout_ms = 2_000;
        let m = t.join_with(conn, req).expect("join");
        clients.push(Client {
            m,
            alive: true,
            cut_until: t.now,
            next_beat: t.now,
            lease_until: None,
            released: BTreeSet::new(),
            gone: false,
        });
    };
    for i in 0..rng.gen_range(2..6) {
        join(&mut t, &mut clients, i);
    }

    for _ in 0..4_000 {
        let now = t.now;
        // Faults and churn.
        if rng.gen_bool(0.002) {
            let i = rng.gen_range(0..clients.len());
            clients[i].cut_until = now + Duration::from_millis(rng.gen_range(100..3_000));
        }
        if rng.gen_bool(0.0005) {
            let i = rng.gen_range(0..clients.len());
            clients[i].alive = false;
        }
        if rng.gen_bool(0.001) && clients.len() < 12 {
            let conn = clients.len() as u64;
            join(&mut t, &mut clients, conn);
        }
        // Clients beat on schedule, acknowledging revocations now and then.
        for (i, c) in clients.iter_mut().enumerate() {
            if !c.alive || c.gone || now < c.next_beat {
                continue;
            }
            c.next_beat = now + INTERVAL;
            let acks = if rng.gen_bool(0.5) {
                t.revoking(&c.m)
            } else {
                Vec::new()
            };
            c.m.seq += 1;
            c.m.progress += 1;
            let request = Request::Heartbeat(HeartbeatRequest {
                group: "g".into(),
                member_id: c.m.id.clone(),
                generation: t.generation_of(&c.m),
                sequence: c.m.seq,
                progress: c.m.progress,
                acked_revocations: acks,
            });
            if now < c.cut_until {
                continue; // dropped on the way
            }
            let spike = rng.gen_bool(0.02);
            let delay = if spike {
                rng.gen_range(100..600)
            } else {
                rng.gen_range(0..40)
            };
            requests.push(InFlight {
                arrive: now + Duration::from_millis(delay),
                client: i,
                sent: now,
                request: Some(request),
                ok: false,
            });
        }
        // Deliveries to the coordinator.
        let (due, later): (Vec<_>, Vec<_>) = requests.drain(..).partition(|r| r.arrive <= now);
        requests = later;
        for mut r in due {
            if let Some(Request::Heartbeat(hb)) = &r.request {
                for tps in &hb.acked_revocations {
                    for p in &tps.partitions {
                        clients[r.client].released.insert((tps.topic.clone(), *p));
                    }
                }
            }
            let conn = clients[r.client].m.conn;
            let resp = t.request(conn, r.request.take().expect("request"));
            r.ok = matches!(resp, Response::Heartbeat(_));
            if matches!(resp, Response::Error(_)) {
                clients[r.client].gone = true;
            }
            if clients[r.client].cut_until > now {
                continue; // the response is lost
            }
            r.arrive = now + Duration::from_millis(rng.gen_range(0..40));
            responses.push(r);
        }
        // Responses back to clients: an acknowledged beat renews the lease from its send time.
        let (due, later): (Vec<_>, Vec<_>) = responses.drain(..).partition(|r| r.arrive <= now);
        responses = later;
        for r in due {
            let c = &mut clients[r.client];
            if r.ok && c.alive {
                let lease = r.sent + SESSION - MARGIN;
                c.lease_until = Some(c.lease_until.map_or(lease, |l| l.max(lease)));
            }
        }

        t.advance(TICK);
        t.assert_exclusive("g");

        // Every grant must come after the previous owner stood down or released it.
        for (at, _, push) in &t.pushes[seen_pushes..] {
            let Push::Assignment(a) = push else { continue };
            let Some(to) = clients.iter().position(|c| c.m.id == a.member_id) else {
                continue;
            };
            for tp in flatten(&a.partitions) {
                match owner.get(&tp) {
                    Some(&from) if from != to => {
                        let prev = &clients[from];
                        if !prev.released.contains(&tp) {
                            let lease = prev.lease_until.unwrap_or(t.start);
                            assert!(
                                lease <= *at,
                                "seed {seed}: {tp:?} granted to {} at {:?} while {}'s lease runs to {:?}",
                                a.member_id,
                                *at - t.start,
                                prev.m.id,
                                lease - t.start
                            );
                        }
                    }
                    _ => {}
                }
                owner.insert(tp, to);
            }
        }
        seen_pushes = t.pushes.len();
    }
}

#[test]
fn ownership_is_exclusive_and_grants_wait_for_leases_under_random_faults() {
    for seed in 0..40 {
        run(seed);
    }
}
