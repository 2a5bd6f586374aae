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

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use parking_lot::Mutex;
use tokio::runtime::Handle;

use super::chunks::{Chunk, Chunks, Op, MAX_TXN_OPS};
use super::codec::{decode_info, decode_offset, decode_snapshot, prefix_end, Info, VALUE_FORMAT};
use super::etcd::{timed, LeaseState};
use super::keys::{parse_key, Keys, SlotKey};
use super::known::Known;
use super::ClusterError;
use crate::core::{OffsetRecord, Record, RestoredState};
use crate::server::slot_of;
use crate::store::retention::{expired, IdleMarks, Retention};
use crate::store::{snapshot_json, system_clock, Clock, FencingToken, Store, StoreError};

/// Keys per page when reading a range.
const PAGE: i64 = 1000;

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
}

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

    /// Reads `clock` to date when groups become empty (tests).
    pub fn set_clock(&self, clock: Clock) {
        *self.clock.lock() = clock;
    }

    /// Everything stored about `slot`'s groups. Loading an adopted slot (before its
    /// groups are served) also lets later writes to it skip reading their groups'
    /// infos.
    pub fn load_slot(&self, slot: u32) -> Result<RestoredState, StoreError> {
        let started = std::time::Instant::now();
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
    /// has not passed.
    async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ClusterError>>,
    {
        let mut backoff = Duration::from_millis(20);
        loop {
            match op().await {
                Ok(value) => return Ok(value),
                Err(ClusterError::Etcd(e)) if Instant::now() + backoff < self.lease.deadline() => {
                    tracing::debug!(error = %e, "etcd request failed; retrying");
                    tokio::time::sleep(backoff).await;
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
    async fn scan(
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

    /// The body of [`Store::write`]: see the module documentation.
    async fn write_async(&self, records: &[Record]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let tokens = self.tokens.lock().clone();
        let mut order: Vec<(u32, String)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
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
        // The chunks touch distinct keys and each stands alone (see the module
        // documentation), so they go to etcd together.
        let commits = chunks
            .finish()
            .into_iter()
            .map(|chunk| self.commit(&tokens, chunk));
        match futures_util::future::try_join_all(commits).await {
            Ok(_) => {
                let infos = groups.into_iter().map(|g| (g.group, g.info));
                self.known.lock().written(infos);
                Ok(())
            }
            Err(e) => {
                self.known.lock().failed(&order);
                Err(e)
            }
        }
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
        metrics::histogram!("rollcall_etcd_request_duration_seconds", "op" => "write")
            .record(started.elapsed().as_secs_f64());
        written
    }

    fn expired_groups(&self, retention: Duration) -> Result<Vec<String>, StoreError> {
        self.block(self.expired_async(retention))
    }
}

fn record_group(record: &Record) -> &str {
    match record {
        Record::Offset(offset) => &offset.group,
        Record::Group(snapshot) => &snapshot.group,
        Record::GroupDeleted { group } => group,
    }
}

/// The net effect of a batch on one group.
#[derive(Debug)]
struct GroupWrite {
    slot: u32,
    group: String,
    before: Info,
    info: Info,
    /// `Some(None)`: delete the snapshot; `Some(Some(value))`: put it.
    snapshot: Option<Option<Vec<u8>>>,
    /// Offsets put after the last deletion, by key.
    offsets: BTreeMap<String, Vec<u8>>,
    /// A deletion removes every offset stored before it.
    deleted: bool,
}

impl GroupWrite {
    fn new(slot: u32, group: String, info: Info) -> Self {
        Self {
            slot,
            group,
            before: info.clone(),
            info,
            snapshot: None,
            offsets: BTreeMap::new(),
            deleted: false,
        }
    }

    fn apply(&mut self, keys: &Keys, record: &Record) -> Result<(), StoreError> {
        match record {
            Record::Offset(o) => {
                let mut value = Vec::with_capacity(9 + o.metadata.len());
                value.push(VALUE_FORMAT);
                value.extend_from_slice(&o.offset.to_le_bytes());
                value.extend_from_slice(o.metadata.as_bytes());
                self.offsets.insert(
                    keys.offset(self.slot, &o.group, &o.topic, o.partition),
                    value,
                );
            }
            Record::Group(snapshot) => {
                let mut value = vec![VALUE_FORMAT];
                snapshot_json::encode(snapshot, &mut value).map_err(|e| {
                    StoreError::Io(format!(
                        "cannot encode snapshot of group {:?}: {e}",
                        snapshot.group
                    ))
                })?;
                self.snapshot = Some(Some(value));
                // The snapshot's generation is above the floor: it speaks for it.
                self.info.generation = Some(snapshot.generation);
                self.info.floor = None;
            }
            Record::GroupDeleted { .. } => {
                if let Some(generation) = self.info.generation.take() {
                    self.info.floor = Some(self.info.floor.unwrap_or(0).max(generation));
                    self.snapshot = Some(None);
                }
                self.offsets.clear();
                self.deleted = true;
            }
        }
        Ok(())
    }

    /// The operations: the individual offset ones, and the ones that must land
    /// together (offset range deletion, snapshot, info).
    async fn ops(&self, store: &EtcdStore) -> Result<(Vec<Op>, Vec<Op>), StoreError> {
        let keys = &store.keys;
        let mut offsets = Vec::new();
        let mut last = Vec::new();
        if self.deleted {
            let prefix = keys.offsets(self.slot, &self.group);
            if self.offsets.is_empty() {
                last.push(Op::DeletePrefix(prefix));
            } else {
                // etcd refuses a put inside a range deleted by the same transaction:
                // delete the stored offsets one by one instead.
                for (key, _) in store.scan(prefix, true).await? {
                    if !self.offsets.contains_key(&key) {
                        offsets.push(Op::Delete(key));
                    }
                }
            }
        }
        for (key, value) in &self.offsets {
            offsets.push(Op::Put(key.clone(), value.clone()));
        }
        match &self.snapshot {
            Some(Some(value)) => last.push(Op::Put(
                keys.snapshot(self.slot, &self.group),
                value.clone(),
            )),
            Some(None) => last.push(Op::Delete(keys.snapshot(self.slot, &self.group))),
            None => {}
        }
        if self.info != self.before {
            let key = keys.info(self.slot, &self.group);
            if self.info.is_empty() {
                last.push(Op::Delete(key));
            } else {
                let json =
                    serde_json::to_vec(&self.info).map_err(|e| StoreError::Io(e.to_string()))?;
                last.push(Op::Put(key, json));
            }
        }
        Ok((offsets, last))
    }
}

/// Retention's view of the batch's groups.
struct Marks<'a, 'g> {
    groups: &'a mut [GroupWrite],
    index: &'a HashMap<&'g str, usize>,
}

impl IdleMarks for Marks<'_, '_> {
    fn marked(&self, group: &str) -> Result<bool, StoreError> {
        Ok(self.groups[self.index[group]].info.since.is_some())
    }

    fn mark(&mut self, group: &str, since_ms: u64) -> Result<(), StoreError> {
        self.groups[self.index[group]].info.since = Some(since_ms);
        Ok(())
    }

    fn unmark(&mut self, group: &str) -> Result<(), StoreError> {
        self.groups[self.index[group]].info.since = None;
        Ok(())
    }

    fn has_snapshot(&self, group: &str) -> Result<bool, StoreError> {
        Ok(self.groups[self.index[group]].info.generation.is_some())
    }
}
