//! Durability against real crashes: a `rollcall serve` process is killed with SIGKILL at
//! random moments while writers commit continuously, then restarted on the same data
//! directory. Every commit the coordinator acknowledged must be there after every
//! restart.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rollcall_protocol::{
    Body, CommitOffsetsRequest, ErrorCode, FetchOffsetsRequest, Frame, OffsetCommit, Request,
    Response,
};
use rollcall_tests::{bounded, serve_process, RawClient, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_rollcall-e2e");
const WRITERS: usize = 6;
const PARTITIONS: u32 = 4;
const ROUNDS: usize = 8;

/// Highest acknowledged and highest sent offset per (writer, partition).
#[derive(Debug, Default)]
struct Ledger {
    acked: BTreeMap<(usize, u32), i64>,
    sent: BTreeMap<(usize, u32), i64>,
    acks: u64,
}

impl Ledger {
    fn snapshot(&self) -> Self {
        Self {
            acked: self.acked.clone(),
            sent: self.sent.clone(),
            acks: self.acks,
        }
    }
}

fn group(writer: usize) -> String {
    format!("durable-{writer}")
}

/// Commits offsets 1, 2, 3, ... round-robin over the writer's partitions, one request at
/// a time, recording each acknowledgement, until the connection dies.
async fn writer(addr: SocketAddr, writer: usize, start: i64, ledger: Arc<Mutex<Ledger>>) {
    let connect = rollcall_client::raw::connect(addr, "durability-test", Duration::from_secs(5));
    let Ok((mut framed, _)) = connect.await else {
        return;
    };
    let mut offset = start;
    for id in 1u32.. {
        let partition = id % PARTITIONS;
        offset += 1;
        ledger.lock().sent.insert((writer, partition), offset);
        let commit = Request::CommitOffsets(CommitOffsetsRequest {
            group: group(writer),
            member_id: None,
            generation: 0,
            offsets: vec![OffsetCommit {
                topic: "t".into(),
                partition,
                offset,
                metadata: String::new(),
            }],
        });
        if framed.send(Frame::request(id, commit)).await.is_err() {
            return;
        }
        loop {
            let Some(Ok(frame)) = framed.next().await else {
                return;
            };
            if frame.correlation_id != id {
                continue;
            }
            if let Body::Response(Response::CommitOffsets(c)) = frame.body {
                if c.results.iter().all(|r| r.error == ErrorCode::None) {
                    let mut l = ledger.lock();
                    l.acked.insert((writer, partition), offset);
                    l.acks += 1;
                }
            }
            break;
        }
    }
}

/// Fetches every writer's offsets and checks each acknowledged commit is there.
async fn verify(addr: SocketAddr, ledger: &Ledger, round: usize) {
    let mut c = RawClient::connected(addr).await;
    for w in 0..WRITERS {
        let resp = c
            .request(Request::FetchOffsets(FetchOffsetsRequest {
                group: group(w),
                topics: vec![],
                page: None,
            }))
            .await;
        let Response::FetchOffsets(f) = resp else {
            panic!("fetch refused: {resp:?}");
        };
        let stored: BTreeMap<u32, i64> =
            f.offsets.iter().map(|o| (o.partition, o.offset)).collect();
        for p in 0..PARTITIONS {
            let Some(&acked) = ledger.acked.get(&(w, p)) else {
                continue;
            };
            let got = stored.get(&p).copied();
            assert!(
                got.is_some_and(|g| g >= acked),
                "round {round}: writer {w} partition {p}: acknowledged {acked}, stored {got:?}"
            );
            let sent = ledger.sent[&(w, p)];
            assert!(
                got.is_some_and(|g| g <= sent),
                "round {round}: stored {got:?} was never sent (last sent {sent})"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_commit_survives_kill_9() {
    let dir = TempDir::new("kill9");
    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut acks_per_round = Vec::new();
    for round in 0..ROUNDS {
        let (mut child, addr) = serve_process(BIN, dir.path()).await;
        let snapshot = ledger.lock().snapshot();
        verify(addr, &snapshot, round).await;
        let before = ledger.lock().acks;
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let start = ledger
                    .lock()
                    .sent
                    .iter()
                    .filter(|((writer, _), _)| *writer == w)
                    .map(|(_, o)| *o)
                    .max()
                    .unwrap_or(0);
                tokio::spawn(writer(addr, w, start, ledger.clone()))
            })
            .collect();
        // Let commits flow, then kill the coordinator mid-stream.
        tokio::time::sleep(Duration::from_millis(rng.gen_range(150..600))).await;
        child.start_kill().expect("SIGKILL");
        bounded("killed coordinator exits", child.wait())
            .await
            .expect("wait");
        for t in tasks {
            let _ = bounded("writer notices the crash", t).await;
        }
        acks_per_round.push(ledger.lock().acks - before);
    }
    let (mut child, addr) = serve_process(BIN, dir.path()).await;
    let final_ledger = ledger.lock().snapshot();
    verify(addr, &final_ledger, ROUNDS).await;
    child.start_kill().expect("SIGKILL");
    let _ = child.wait().await;
    println!("acknowledged commits per round: {acks_per_round:?}");
    assert!(
        acks_per_round.iter().filter(|&&n| n > 0).count() >= ROUNDS / 2,
        "too few rounds committed anything: {acks_per_round:?}"
    );
}
