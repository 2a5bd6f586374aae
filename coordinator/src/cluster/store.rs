//! [`EtcdStore`]: the [`Store`] kept in etcd under each slot's prefix, every write
//! fenced by the writer's ownership of the slots it touches.
//!
//! # Layout (below `slots/<slot 5 digits>/`; names percent-encoded)
//!
//! | key                                   | value                                        |
//! |---------------------------------------|----------------------------------------------|
//! | `g/<group>`                           | format byte, JSON of the snapshot (`snapshot_json.rs`, as redb) |
//! | `i/<group>`                           | JSON [`Info`]: retention's mark, the generation floor, the snapshot's generation |
//! | `o/<group>/<topic>/<partition 10 digits>` | format byte, i64 LE offset, metadata (as redb) |
//!
//! `i/` holds what redb keeps in `group_meta` and `floors`, plus the generation of the
//! stored snapshot, so a write reads one small key per group it touches (retention asks
//! whether a group is marked and has a snapshot; a deletion raises the floor to the
//! snapshot's generation) without reading snapshots.
//!
//! # A write
//!
//! A batch's records are applied in order to the touched groups' `i/` keys, giving
//! each group's net effect. Those keys are read first (one round trip per 128 groups)
//! unless the store knows them already (`known.rs`: a slot loaded since adopted, and
//! what its own writes left). Then one transaction per *chunk*, each conditioned on
//! `create_revision(owners/<s>) == token_s` for every slot in it: a failed compare is
//! [`StoreError::Fenced`]. Chunks respect etcd's default limits (128 operations per
//! transaction, 1.5 MiB per request: chunks stay under `chunks::MAX_TXN_OPS` and
//! `chunks::MAX_TXN_BYTES`) and are sent together; small batches are one chunk.
//!
//! When a batch needs several chunks it is not all-or-nothing, and this is still
//! correct for the core: a group's snapshot, info and offset-range deletion always
//! share one chunk, so each group is either before or after the batch apart from its
//! individual offsets, which only a group with more offsets in one batch than one
//! chunk holds spreads over chunks of their own. Chunks touch distinct keys, so their
//! order does not matter. A failed write reveals nothing (no response or push of the
//! batch leaves before it is durable), so what landed is like a write whose
//! acknowledgement was lost: a client retries its commit, and a group whose offsets
//! landed without its snapshot is a group whose commits arrived before its membership
//! change, a state the core passes through. A chunk that fails transiently is retried
//! whole (its operations set absolute values, so twice is once) with backoff until the
//! acting deadline.
//!
//! # Writes under way
//!
//! The group committer keeps up to [`WRITES_IN_FLIGHT`] writes under way
//! ([`Store::write_then`]), so a commit waits for about one round trip through etcd
//! instead of the transaction under way and then its own. Each write is *prepared*
//! (infos, operations, chunks) on the committer's thread in submission order, from the
//! infos the earlier writes leave (`known.rs`), then *sent* on the runtime. What keeps
//! this as safe as one write at a time (`pipeline.rs`):
//!
//! - **Fencing** is unchanged: every transaction of every write carries the compares on
//!   its slots' owner keys, so a deposed coordinator's writes under way all fail.
//! - **No earlier write lands over a later one.** etcd may apply concurrent requests of
//!   one client in any order, so a write is sent only after every earlier write under
//!   way to one of its keys (or prefixes) has ended, and not at all if one failed. A
//!   group deletion, which reads the group's stored offsets, is prepared only once no
//!   write of the group is under way.
//! - **Failures spread forward, within a group.** A write prepared after a failed
//!   write of the same groups fails too, even if its own transactions landed (they
//!   are then like a write whose acknowledgement was lost, as above), and what the
//!   store knew of those groups is read again.
//! - **Answers in order.** The committer answers each batch only once it and every
//!   earlier batch have ended; the shard refuses every batch after a failed one of its
//!   own (`stage.rs`), as before.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use parking_lot::Mutex;
use tokio::runtime::Handle;

use super::chunks::{Chunk, Chunks, Op, MAX_TXN_OPS};
use super::codec::{decode_info, decode_offset, decode_snapshot, prefix_end, Info};
use super::etcd::{timed, LeaseState};
use super::group_write::{GroupWrite, Marks};
use super::keys::{parse_key, Keys, SlotKey};
use super::known::Known;
use super::pipeline::{Footprint, Pipeline, Ticket};
use super::ClusterError;
use crate::core::{OffsetRecord, Record, RestoredState};
use crate::server::slot_of;
use crate::store::retention::{expired, Retention};
use crate::store::{system_clock, Clock, FencingToken, Store, StoreError, WriteDone};

/// Keys per page when reading a range.
const PAGE: i64 = 1000;

/// A failed request is not tried again when less than twice this is left before the
/// acting deadline.
const MIN_RETRY_PAUSE: Duration = Duration::from_millis(5);

/// The store over one etcd connection. Knows the tokens of the slots it may write
/// ([`Self::adopt`], [`Self::forget`]); a write touching any other slot is refused
/// with [`StoreError::Fenced`]. The token argument of [`Store::write_fenced`] is not
/// consulted: a batch spans slots, each with its own token. [`Store::load`] reads
/// every slot; [`Store::expired_groups`] looks only at the adopted slots' groups (the
/// others are their owners' business).
///
/// Its calls block: make them from a thread that is not a tokio worker (the group
/// committer's thread), or from a multi-threaded runtime's worker, which hands the
/// wait to a thread of its own.
pub struct EtcdStore {
    client: Client,
    keys: Keys,
    slots: u32,
    lease: Arc<LeaseState>,
    tokens: Mutex<HashMap<u32, FencingToken>>,
    known: Mutex<Known>,
    clock: Mutex<Clock>,
    runtime: Handle,
    /// Writes are prepared one at a time, in the order they are submitted.
    preparing: tokio::sync::Mutex<()>,
    pipeline: Arc<Pipeline>,
}

/// A prepared write ([`EtcdStore::prepare`]), ready to send.
struct Prepared {
    tokens: HashMap<u32, FencingToken>,
    chunks: Vec<Chunk>,
    order: Vec<(u32, String)>,
    ticket: Ticket,
}

/// Writes the group committer may have under way at once.
pub(crate) const WRITES_IN_FLIGHT: usize = 4;

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("keys", &self.keys)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// The store of a connection made on the current tokio runtime.
    pub(crate) fn new(client: Client, keys: Keys, slots: u32, lease: Arc<LeaseState>) -> Self {
        Self {
            client,
            keys,
            slots,
            lease,
            tokens: Mutex::new(HashMap::new()),
            known: Mutex::new(Known::default()),
            clock: Mutex::new(system_clock()),
            runtime: Handle::current(),
            preparing: tokio::sync::Mutex::new(()),
            pipeline: Arc::new(Pipeline::default()),
        }
    }

    /// This coordinator owns `slot` with `token`: writes to its groups are conditioned
    /// on it.
    pub fn adopt(&self, slot: u32, token: FencingToken) {
        self.tokens.lock().insert(slot, token);
        self.known.lock().drop_slot(slot, self.slots);
    }

    /// This coordinator no longer owns `slot`: writes to its groups are refused.
    pub fn forget(&self, slot: u32) {
        self.tokens.lock().remove(&slot);
        self.known.lock().drop_slot(slot, self.slots);
    }

    pub(super) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Reads `clock` to date when groups become empty (tests).
    pub fn set_clock(&self, clock: Clock) {
        *self.clock.lock() = clock;
    }

    /// Everything stored about `slot`'s groups. Loading an adopted slot (before its
    /// groups are served) also lets later writes to it skip reading their groups'
    /// infos.
    pub fn load_slot(&self, slot: u32) -> Result<RestoredState, StoreError> {
        let started = std::time::Instant::now();
        // A write to the slot begun before it was adopted again (with the same token,
        // after an abandon) lands before the slot is read, not after.
        let slots = self.slots;
        self.block(self.pipeline.quiet(|group| slot_of(group, slots) == slot));
        let (state, infos) = self.block(self.load_prefix(self.keys.slot(slot)))?;
        metrics::histogram!("rollcall_etcd_request_duration_seconds", "op" => "load")
            .record(started.elapsed().as_secs_f64());
        if self.tokens.lock().contains_key(&slot) {
            self.known.lock().loaded(slot, infos);
        }
        Ok(state)
    }

    /// When `group` became empty, as wall-clock ms since the UNIX epoch, if it is empty.
    pub fn empty_since(&self, group: &str) -> Result<Option<u64>, StoreError> {
        let slot = slot_of(group, self.slots);
        let infos = self.block(self.read_infos(&[(slot, group.to_owned())]))?;
        Ok(infos.into_iter().next().and_then(|info| info.since))
    }

    /// Runs `fut` to completion on the connection's runtime, from any thread.
    fn block<T: Send>(&self, fut: impl Future<Output = T> + Send) -> T {
        if Handle::try_current().is_ok() {
            std::thread::scope(|s| {
                s.spawn(|| self.runtime.block_on(fut))
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
        } else {
            self.runtime.block_on(fut)
        }
    }

    /// `op` retried with backoff while it fails transiently and the acting deadline
    /// has not passed. The pause before a retry is at most half the time left to the
    /// deadline, so a write keeps being tried until shortly before it (an etcd election
    /// takes a second or two) instead of giving up a whole backoff early and making the
    /// coordinator drop every slot while its lease is still good.
    pub(crate) async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ClusterError>>,
    {
        let mut backoff = Duration::from_millis(20);
        loop {
            match op().await {
                Ok(value) => return Ok(value),
                Err(ClusterError::Etcd(e)) => {
                    let left = self
                        .lease
                        .deadline()
                        .saturating_duration_since(Instant::now());
                    let pause = backoff.min(left / 2);
                    if pause < MIN_RETRY_PAUSE {
                        return Err(StoreError::Io(format!("etcd: {e}")));
                    }
                    tracing::debug!(error = %e, ?pause, "etcd request failed; retrying");
                    tokio::time::sleep(pause).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(StoreError::Io(format!("etcd: {e}"))),
            }
        }
    }

    fn corrupt(key: &str, reason: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt {
            path: format!("etcd key {key}"),
            reason: reason.to_string(),
        }
    }

    /// Every key below `prefix`, read at one revision, page by page.
    pub(super) async fn scan(
        &self,
        prefix: String,
        keys_only: bool,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let end = prefix_end(&prefix);
        let mut start = prefix.into_bytes();
        let mut revision = 0;
        let mut out = Vec::new();
        loop {
            let mut options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(PAGE)
                .with_revision(revision);
            if keys_only {
                options = options.with_keys_only();
            }
            let resp = self
                .retry(|| {
                    let mut kv = self.client.kv_client();
                    let (start, options) = (start.clone(), options.clone());
                    async move { timed(kv.get(start, Some(options))).await }
                })
                .await?;
            if revision == 0 {
                revision = resp.header().map_or(0, |h| h.revision());
            }
            for kv in resp.kvs() {
                let key = kv
                    .key_str()
                    .map_err(|_| Self::corrupt(&String::from_utf8_lossy(kv.key()), "not UTF-8"))?;
                out.push((key.to_owned(), kv.value().to_vec()));
            }
            match (resp.more(), resp.kvs().last()) {
                (true, Some(last)) => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => return Ok(out),
            }
        }
    }

    /// Decodes everything below `prefix` (one slot's or every slot's).
    async fn load_prefix(
        &self,
        prefix: String,
    ) -> Result<(RestoredState, Vec<(String, Info)>), StoreError> {
        let slots_prefix = self.keys.slots_prefix();
        let mut state = RestoredState::default();
        let mut infos = Vec::new();
        for (key, value) in self.scan(prefix, false).await? {
            let parsed = key.strip_prefix(&slots_prefix).and_then(parse_key);
            let Some((_, what)) = parsed else {
                return Err(Self::corrupt(&key, "not a key this store writes"));
            };
            match what {
                SlotKey::Snapshot(group) => {
                    state.groups.push(decode_snapshot(&key, &group, &value)?)
                }
                SlotKey::Info(group) => {
                    let info = decode_info(&key, &value)?;
                    if let Some(floor) = info.floor {
                        state.floors.push((group.clone(), floor));
                    }
                    infos.push((group, info));
                }
                SlotKey::Offset {
                    group,
                    topic,
                    partition,
                } => {
                    let (offset, metadata) = decode_offset(&key, &value)?;
                    state.offsets.push(OffsetRecord {
                        group,
                        topic,
                        partition,
                        offset,
                        metadata,
                    });
                }
            }
        }
        Ok((state, infos))
    }

    /// The `i/` keys of `groups` (slot, group), in that order (default when absent).
    async fn read_infos(&self, groups: &[(u32, String)]) -> Result<Vec<Info>, StoreError> {
        let mut out = Vec::with_capacity(groups.len());
        for chunk in groups.chunks(MAX_TXN_OPS) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|(slot, group)| TxnOp::get(self.keys.info(*slot, group), None))
                .collect();
            let resp = self
                .retry(|| {
                    let mut kv = self.client.kv_client();
                    let txn = Txn::new().and_then(ops.clone());
                    async move { timed(kv.txn(txn)).await }
                })
                .await?;
            for (response, (slot, group)) in resp.op_responses().iter().zip(chunk) {
                let info = match response {
                    TxnOpResponse::Get(get) => match get.kvs().first() {
                        Some(kv) => decode_info(&self.keys.info(*slot, group), kv.value())?,
                        None => Info::default(),
                    },
                    _ => Info::default(),
                };
                out.push(info);
            }
        }
        Ok(out)
    }

    /// The first half of a write, in the order writes are submitted: the batch's net
    /// effect on each group, computed from what the store knows of the groups' infos
    /// (those of groups whose writes are still under way as those writes will leave
    /// them), the transactions, and the write registered in the pipeline.
    async fn prepare(&self, records: &[Record]) -> Result<Prepared, StoreError> {
        let _order = self.preparing.lock().await;
        let tokens = self.tokens.lock().clone();
        let mut order: Vec<(u32, String)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut deleting = HashSet::new();
        for record in records {
            let group = record_group(record);
            if !index.contains_key(group) {
                let slot = slot_of(group, self.slots);
                if !tokens.contains_key(&slot) {
                    return Err(StoreError::Fenced { slot });
                }
                index.insert(group, order.len());
                order.push((slot, group.to_owned()));
            }
            if matches!(record, Record::GroupDeleted { .. }) {
                deleting.insert(group.to_owned());
            }
        }
        if !deleting.is_empty() {
            // A deletion reads the group's stored offsets: wait until no earlier write
            // of the group is under way, so it finds every one of them.
            self.pipeline.quiet(|group| deleting.contains(group)).await;
        }
        let mut infos: Vec<Option<Info>> = {
            let known = self.known.lock();
            order.iter().map(|(slot, g)| known.get(*slot, g)).collect()
        };
        let missing: Vec<(u32, String)> = order
            .iter()
            .zip(&infos)
            .filter(|(_, info)| info.is_none())
            .map(|(group, _)| group.clone())
            .collect();
        if !missing.is_empty() {
            let mut read = self.read_infos(&missing).await?.into_iter();
            for info in infos.iter_mut().filter(|i| i.is_none()) {
                *info = read.next();
            }
        }
        let infos = infos.into_iter().map(Option::unwrap_or_default);
        let mut groups: Vec<GroupWrite> = order
            .iter()
            .zip(infos)
            .map(|((slot, group), info)| GroupWrite::new(*slot, group.clone(), info))
            .collect();

        let now = (self.clock.lock())();
        let mut retention = Retention::new(now);
        for record in records {
            let at = index[record_group(record)];
            retention.apply(
                record,
                &mut Marks {
                    groups: &mut groups,
                    index: &index,
                },
            )?;
            groups[at].apply(&self.keys, record)?;
        }

        let mut chunks = Chunks::default();
        for group in &groups {
            let (offsets, last) = group.ops(self).await?;
            chunks.add(group.slot, offsets, last);
        }
        let chunks = chunks.finish();
        let mut footprint = Footprint::default();
        for op in chunks.iter().flat_map(|chunk| &chunk.ops) {
            match op {
                Op::Put(key, _) | Op::Delete(key) => footprint.keys.insert(key.clone()),
                Op::DeletePrefix(prefix) => {
                    footprint.prefixes.push(prefix.clone());
                    true
                }
            };
        }
        footprint.groups = order.iter().map(|(_, group)| group.clone()).collect();
        let ticket = self.pipeline.begin(footprint);
        // Later writes are prepared from what this one leaves; if it fails, they fail
        // with it (the pipeline's "fail with" rule) and the groups are read again.
        self.known
            .lock()
            .written(groups.into_iter().map(|g| (g.group, g.info)));
        Ok(Prepared {
            tokens,
            chunks,
            order,
            ticket,
        })
    }

    /// The second half of a write, possibly overlapping others: once the earlier writes
    /// to the same keys have ended, its transactions, sent together (they touch
    /// distinct keys and each stands alone, see the module documentation).
    async fn send(&self, prepared: Prepared) -> Result<(), StoreError> {
        let Prepared {
            tokens,
            chunks,
            order,
            mut ticket,
        } = prepared;
        let own = match ticket.may_send().await {
            Ok(()) => {
                let commits = chunks.into_iter().map(|chunk| self.commit(&tokens, chunk));
                futures_util::future::try_join_all(commits).await.map(drop)
            }
            Err(e) => Err(e),
        };
        let outcome = ticket.end(own).await;
        if outcome.is_err() {
            self.known.lock().failed(&order);
        }
        outcome
    }

    /// A whole write: see the module documentation.
    async fn write_async(&self, records: &[Record]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let prepared = self.prepare(records).await?;
        self.send(prepared).await
    }

    /// One chunk as one transaction fenced by the tokens of its slots.
    async fn commit(
        &self,
        tokens: &HashMap<u32, FencingToken>,
        chunk: Chunk,
    ) -> Result<(), StoreError> {
        let slots: Vec<u32> = chunk.slots.into_iter().collect();
        let compares: Vec<Compare> = slots
            .iter()
            .map(|slot| {
                let token = tokens[slot].0 as i64;
                Compare::create_revision(self.keys.owner(*slot), CompareOp::Equal, token)
            })
            .collect();
        let owners: Vec<TxnOp> = slots
            .iter()
            .map(|s| TxnOp::get(self.keys.owner(*s), None))
            .collect();
        let ops: Vec<TxnOp> = chunk.ops.into_iter().map(Op::into_txn_op).collect();
        let resp = self
            .retry(|| {
                let mut kv = self.client.kv_client();
                let txn = Txn::new()
                    .when(compares.clone())
                    .and_then(ops.clone())
                    .or_else(owners.clone());
                async move { timed(kv.txn(txn)).await }
            })
            .await?;
        if resp.succeeded() {
            return Ok(());
        }
        let responses = resp.op_responses();
        for (slot, response) in slots.iter().zip(&responses) {
            let revision = match response {
                TxnOpResponse::Get(get) => get.kvs().first().map_or(0, |kv| kv.create_revision()),
                _ => 0,
            };
            if revision as u64 != tokens[slot].0 {
                return Err(StoreError::Fenced { slot: *slot });
            }
        }
        Err(StoreError::Fenced { slot: slots[0] })
    }

    async fn expired_async(&self, retention: Duration) -> Result<Vec<String>, StoreError> {
        let now = (self.clock.lock())();
        let mut slots: Vec<u32> = self.tokens.lock().keys().copied().collect();
        slots.sort_unstable();
        let mut marks = Vec::new();
        for slot in slots {
            let prefix = self.keys.infos(slot);
            for (key, value) in self.scan(prefix.clone(), false).await? {
                let group = key
                    .strip_prefix(&prefix)
                    .and_then(super::keys::decode)
                    .ok_or_else(|| Self::corrupt(&key, "not a group"))?;
                if let Some(since) = decode_info(&key, &value)?.since {
                    marks.push((group, since));
                }
            }
        }
        let mut out = expired(marks, now, retention);
        out.sort();
        Ok(out)
    }
}

impl Store for EtcdStore {
    fn load(&self) -> Result<RestoredState, StoreError> {
        self.block(self.load_prefix(self.keys.slots_prefix()))
            .map(|(state, _)| state)
    }

    fn write(&self, records: &[Record]) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        let written = self.block(self.write_async(records));
        record_write(started);
        written
    }

    fn writes_in_flight(&self) -> usize {
        WRITES_IN_FLIGHT
    }

    /// Prepares on the caller's thread (so writes are prepared in the order they are
    /// begun) and sends on the connection's runtime.
    fn write_then(self: Arc<Self>, token: FencingToken, records: Vec<Record>, done: WriteDone) {
        let _ = token;
        if records.is_empty() {
            return done(Ok(()));
        }
        let started = std::time::Instant::now();
        let prepared = match self.block(self.prepare(&records)) {
            Ok(prepared) => prepared,
            Err(e) => {
                record_write(started);
                return done(Err(e));
            }
        };
        let runtime = self.runtime.clone();
        runtime.spawn(async move {
            let written = self.send(prepared).await;
            record_write(started);
            done(written);
        });
    }

    fn expired_groups(&self, retention: Duration) -> Result<Vec<String>, StoreError> {
        self.block(self.expired_async(retention))
    }
}

fn record_write(started: std::time::Instant) {
    metrics::histogram!("rollcall_etcd_request_duration_seconds", "op" => "write")
        .record(started.elapsed().as_secs_f64());
}

fn record_group(record: &Record) -> &str {
    match record {
        Record::Offset(offset) => &offset.group,
        Record::Group(snapshot) => &snapshot.group,
        Record::GroupDeleted { group } => group,
    }
}
