//! Cluster mode's slot manager: which of the cluster's slots this coordinator acts for,
//! kept in step with etcd (see the `cluster` module for the etcd side).
//!
//! One task reconciles, on every change of the cluster's view and at least once a
//! second, what this coordinator owns with what the plan gives it:
//!
//! - **Hand back** a slot the plan gives to another live coordinator: the directory
//!   answers `coordinator_loading` for it, every shard releases its groups and the batch
//!   carrying their last snapshots is made durable, then the store forgets the slot's
//!   token and the ownership key is deleted. Only then can the next owner claim it, and
//!   it loads everything the old owner revealed.
//! - **Claim** an unowned slot the plan gives it: the ownership key is created only if
//!   absent (its create revision is the fencing token every write for the slot is
//!   conditioned on); while the slot loads, the directory answers `coordinator_loading`;
//!   the groups are restored into their shards by the rules of a restart; then served.
//! - **Abandon** every slot when the acting deadline passes (the etcd lease could not be
//!   renewed in time): the directory stops routing, and the shards drop the groups
//!   without writing. The deadline falls before the lease can expire in etcd, so no other
//!   coordinator can have loaded a slot while this one still acted for it.
//! - **Retire** (a graceful stop): leave the cluster's list of coordinators, so the
//!   others' plans no longer count this one, hand every slot back, then revoke the lease.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rollcall_protocol::CoordinatorListing;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::directory::Directory;
use super::metrics::Metrics;
use super::registry::Registry;
use super::shard::{shard_of, slot_of, Shard};
use crate::cluster::{plan, ClusterView, Etcd, EtcdStore};
use crate::core::RestoredState;
use crate::store::FencingToken;

/// How often the manager reconciles when nothing changes (claims that failed are
/// retried, abandoned slots are taken back once the lease is renewed).
const RECONCILE_EVERY: Duration = Duration::from_secs(1);

/// The slot manager's task state.
pub(crate) struct SlotManager {
    etcd: Arc<Etcd>,
    store: Arc<EtcdStore>,
    shards: Vec<Arc<Shard>>,
    directory: Directory,
    id: String,
    slots: u32,
    /// The slots this coordinator acts for, with their fencing tokens.
    owned: BTreeMap<u32, FencingToken>,
    metrics: Arc<Metrics>,
    /// The client connections, closed when this coordinator steps out.
    registry: Arc<Registry>,
    /// Woken by a shard whose durable write failed: it abandoned its groups, and every
    /// slot is abandoned and loaded again from the store.
    store_failure: Arc<Notify>,
}

impl std::fmt::Debug for SlotManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotManager")
            .field("id", &self.id)
            .field("slots", &self.slots)
            .field("owned", &self.owned.len())
            .finish_non_exhaustive()
    }
}

impl SlotManager {
    pub(crate) fn new(
        etcd: Arc<Etcd>,
        shards: Vec<Arc<Shard>>,
        directory: Directory,
        id: String,
        metrics: Arc<Metrics>,
        registry: Arc<Registry>,
        store_failure: Arc<Notify>,
    ) -> Self {
        Self {
            store: etcd.store(),
            slots: etcd.slots(),
            etcd,
            shards,
            directory,
            id,
            owned: BTreeMap::new(),
            metrics,
            registry,
            store_failure,
        }
    }

    /// Runs until `stop` is cancelled, then retires: every slot handed back and the
    /// lease revoked before it returns.
    /// `ready` is told once the first reconciliation is done: the slots nobody owned
    /// that the plan gives this coordinator are loaded (slots still held by others come
    /// later, as they hand them over).
    pub(crate) async fn run(mut self, stop: CancellationToken, ready: oneshot::Sender<()>) {
        let mut views = self.etcd.view();
        let first = views.borrow_and_update().clone();
        self.reconcile(&first).await;
        let _ = ready.send(());
        let mut tick = tokio::time::interval(RECONCILE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let deadline = Instant::from_std(self.etcd.acting_deadline());
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep_until(deadline), if !self.directory.is_away() => {
                    if !self.may_act() {
                        self.abandon_all(Abandon::LeaseStale);
                        self.step_out();
                    }
                    continue;
                }
                () = self.store_failure.notified() => {
                    self.abandon_all(Abandon::WriteFailed);
                    if !self.may_act() {
                        self.step_out();
                    }
                    continue;
                }
                changed = views.changed() => {
                    if changed.is_err() {
                        error!("the cluster view ended; abandoning every slot");
                        self.abandon_all(Abandon::ViewEnded);
                        break;
                    }
                }
                _ = tick.tick() => {}
            }
            let view = views.borrow_and_update().clone();
            self.reconcile(&view).await;
        }
        self.retire().await;
    }

    /// Whether this coordinator may act now: its lease was renewed recently enough.
    fn may_act(&self) -> bool {
        std::time::Instant::now() < self.etcd.acting_deadline()
    }

    /// Brings what this coordinator owns in line with the plan for `view`.
    async fn reconcile(&mut self, view: &ClusterView) {
        self.point_directory(view);
        if !self.may_act() {
            self.abandon_all(Abandon::LeaseStale);
            self.step_out();
            return;
        }
        if self.directory.set_away(false) {
            info!("the etcd lease is fresh again: taking client connections");
        }
        let planned = plan(self.slots, view);
        let mine: BTreeSet<u32> = planned
            .get(&self.id)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        let give: Vec<u32> = self
            .owned
            .keys()
            .filter(|s| !mine.contains(s))
            .copied()
            .collect();
        for slot in give {
            self.hand_back(slot).await;
        }
        for slot in mine {
            if self.owned.contains_key(&slot) || !self.may_act() {
                continue;
            }
            match view.owners.get(&slot) {
                Some((id, _, _)) if *id != self.id => continue, // still handing it over
                _ => self.claim(slot).await,
            }
        }
    }

    /// The directory learns where each slot not owned here is served, and which other
    /// coordinators there are: the live ones and every other slot owner (one leaving
    /// the cluster owns slots until it has handed them back).
    fn point_directory(&self, view: &ClusterView) {
        let mut others: BTreeMap<&str, &str> = view
            .coordinators
            .iter()
            .filter(|(id, _)| **id != self.id)
            .map(|(id, addr)| (id.as_str(), addr.as_str()))
            .collect();
        for (id, addr, _) in view.owners.values() {
            if *id != self.id {
                others.entry(id.as_str()).or_insert(addr.as_str());
            }
        }
        self.directory.set_others(
            others
                .into_iter()
                .map(|(id, addr)| CoordinatorListing {
                    id: id.to_owned(),
                    addr: addr.to_owned(),
                })
                .collect(),
        );
        for slot in 0..self.slots {
            if self.owned.contains_key(&slot) {
                continue;
            }
            match view.owners.get(&slot) {
                Some((id, addr, _)) if *id != self.id => {
                    self.directory.set_elsewhere(slot, Arc::from(addr.as_str()));
                }
                _ => self.directory.set_unknown(slot),
            }
        }
    }

    /// Claims `slot` and loads its groups.
    async fn claim(&mut self, slot: u32) {
        let started = Instant::now();
        let token = match self.etcd.claim(slot).await {
            Ok(Some(token)) => token,
            Ok(None) => return,
            Err(e) => {
                warn!(slot, error = %e, "claiming a slot failed; retrying");
                return;
            }
        };
        self.directory.set_loading(slot);
        self.store.adopt(slot, token);
        let store = self.store.clone();
        let loaded = tokio::task::spawn_blocking(move || store.load_slot(slot)).await;
        let state = match loaded {
            Ok(Ok(state)) => state,
            Ok(Err(e)) => {
                warn!(slot, error = %e, "loading a slot failed; handing it back");
                self.give_up(slot).await;
                return;
            }
            Err(e) => {
                error!(slot, error = %e, "loading a slot panicked; handing it back");
                self.give_up(slot).await;
                return;
            }
        };
        if !self.may_act() {
            // The lease lapsed while loading: nothing was restored, nothing to drop.
            self.store.forget(slot);
            self.directory.set_unknown(slot);
            return;
        }
        let groups = state.groups.len();
        for (index, part) in split_by_shard(state, self.shards.len()) {
            self.shards[index].adopt(part);
        }
        self.owned.insert(slot, token);
        self.directory.set_here(slot);
        let m = &self.metrics.cluster;
        m.slots_owned.set(self.owned.len() as f64);
        m.adopted.increment(1);
        m.slot_load.record(started.elapsed().as_secs_f64());
        let took = started.elapsed();
        info!(slot, token = token.0, groups, load = ?took, "slot adopted");
        self.etcd.loaded(slot, token, took).await;
    }

    /// Releases the ownership of a slot that could not be loaded.
    async fn give_up(&mut self, slot: u32) {
        self.store.forget(slot);
        self.directory.set_unknown(slot);
        if let Err(e) = self.etcd.release(slot).await {
            warn!(slot, error = %e, "releasing a slot failed; its key lapses with the lease");
        }
    }

    /// Hands `slot` back: its groups' last state durable, then its key deleted.
    async fn hand_back(&mut self, slot: u32) {
        let started = Instant::now();
        self.directory.set_loading(slot);
        let slots = self.slots;
        let waits: Vec<_> = self
            .shards
            .iter()
            .map(|shard| shard.hand_back(move |group| slot_of(group, slots) == slot))
            .collect();
        let mut durable = true;
        for wait in waits {
            if !matches!(wait.await, Ok(Ok(()))) {
                durable = false;
            }
        }
        self.owned.remove(&slot);
        self.store.forget(slot);
        self.metrics
            .cluster
            .slots_owned
            .set(self.owned.len() as f64);
        self.metrics.cluster.handed_back.increment(1);
        if !durable {
            // The shard failed the write and stops the server; the key lapses with the
            // lease, and the next owner loads what was durable.
            error!(slot, "a slot's last records could not be made durable");
            self.directory.set_unknown(slot);
            return;
        }
        if let Err(e) = self.etcd.release(slot).await {
            warn!(slot, error = %e, "deleting a slot's key failed; it lapses with the lease");
        }
        self.directory.set_unknown(slot);
        info!(slot, took = ?started.elapsed(), "slot handed back");
    }

    /// Stops acting for every slot at once, without writing, for `why`.
    fn abandon_all(&mut self, why: Abandon) {
        if self.owned.is_empty() {
            return;
        }
        for slot in self.owned.keys() {
            self.directory.set_unknown(*slot);
        }
        let slots = self.owned.len() as u64;
        let dropped: usize = self.shards.iter().map(|s| s.abandon_all()).sum();
        for slot in std::mem::take(&mut self.owned).into_keys() {
            self.store.forget(slot);
        }
        self.metrics.cluster.slots_owned.set(0.0);
        self.metrics.cluster.abandoned.increment(slots);
        warn!(
            groups = dropped,
            "{}: stopped acting for every slot",
            why.reason()
        );
    }

    /// Steps out of the cluster while this coordinator can act for no slot: its view of
    /// who owns what may be stale, so rather than send its clients' FindCoordinator
    /// nowhere, it closes their connections and takes no new ones until its lease is
    /// fresh again. Clients reconnect to their other addresses and find the owners
    /// there.
    fn step_out(&self) {
        if !self.directory.set_away(true) {
            return;
        }
        let handles = self.registry.handles();
        warn!(
            connections = handles.len(),
            "acting for no slot: closing client connections until the etcd lease is fresh"
        );
        for handle in handles {
            handle.kill();
        }
    }

    /// A graceful stop: out of the plan, every slot handed back, lease revoked.
    async fn retire(&mut self) {
        if let Err(e) = self.etcd.retire().await {
            warn!(error = %e, "leaving the list of coordinators failed");
        }
        let slots: Vec<u32> = self.owned.keys().copied().collect();
        info!(
            slots = slots.len(),
            "handing every slot back before stopping"
        );
        for slot in slots {
            if !self.may_act() {
                self.abandon_all(Abandon::LeaseStale);
                break;
            }
            self.hand_back(slot).await;
        }
        self.etcd.leave().await;
    }
}

/// Splits one slot's loaded state by the local shard of each group. Every shard gets
/// its part, empty or not: adopting is also what lets a shard that abandoned its groups
/// take requests again.
fn split_by_shard(state: RestoredState, shards: usize) -> Vec<(usize, RestoredState)> {
    (0..shards)
        .map(|index| {
            let mut part = state.clone();
            part.retain(|group| shard_of(group, shards) == index);
            (index, part)
        })
        .collect()
}

/// Connects to the cluster's etcd as the coordinator `settings` and `advertise` describe.
pub(super) async fn connect(
    settings: &super::ClusterSettings,
    advertise: &str,
) -> Result<Arc<Etcd>, super::ServerError> {
    let options = crate::cluster::ClusterOptions {
        endpoints: settings.endpoints.clone(),
        name: settings.name.clone(),
        id: settings.id.clone().unwrap_or_else(|| advertise.to_owned()),
        advertise: advertise.to_owned(),
        lease_ttl: settings.lease_ttl,
        slots: settings.slots,
    };
    Etcd::connect(&options).await.map_err(|e| {
        super::ServerError::Runtime(format!(
            "cannot join cluster {} through etcd {}: {e}",
            settings.name,
            settings.endpoints.join(",")
        ))
    })
}

/// Why a coordinator stopped acting for every slot at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abandon {
    /// Its etcd lease was not renewed recently enough for it to act.
    LeaseStale,
    /// A durable write failed: what the store holds is no longer known, so the slots
    /// are loaded again from it.
    WriteFailed,
    /// The watch of the cluster ended.
    ViewEnded,
}

impl Abandon {
    fn reason(self) -> &'static str {
        match self {
            Self::LeaseStale => "the etcd lease was not renewed in time",
            Self::WriteFailed => "a durable write failed; the slots are to be loaded again",
            Self::ViewEnded => "the cluster view ended",
        }
    }
}
