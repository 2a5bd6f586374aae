//! [`Etcd`]: one connected etcd client, this coordinator's lease and what hangs on it
//! (registration, slot ownership, the acting deadline, the view).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions, Txn,
    TxnOp, TxnOpResponse, WatchOptions,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::keys::Keys;
use super::store::EtcdStore;
use super::{ClusterError, ClusterOptions, ClusterView};
use crate::store::FencingToken;

/// How long one etcd request may take before it counts as failed.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// What `coordinators/<id>` and `owners/<slot>` hold.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) id: String,
    pub(crate) addr: String,
    /// On an owner key, once its groups are served: how long the owner took to load
    /// them, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) loaded_ms: Option<u64>,
}

/// This coordinator's lease, shared with the store and the keepalive task.
#[derive(Debug)]
pub(crate) struct LeaseState {
    id: AtomicI64,
    /// The acting deadline (see the module documentation).
    deadline: Mutex<Instant>,
}

impl LeaseState {
    pub(crate) fn id(&self) -> i64 {
        self.id.load(Ordering::Acquire)
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock()
    }

    /// etcd answered a keepalive (or grant) sent at `sent` with a TTL of `ttl_secs`.
    fn renewed(&self, sent: Instant, ttl_secs: i64) {
        let deadline = sent + acting_window(Duration::from_secs(ttl_secs.max(0) as u64));
        let mut current = self.deadline.lock();
        if deadline > *current {
            *current = deadline;
        }
    }

    fn expire(&self) {
        *self.deadline.lock() = Instant::now();
    }
}

/// How long after sending a keepalive that etcd answered with `ttl` this coordinator may
/// act: `ttl - max(ttl / 10, 250 ms)`. The margin covers clock rate drift between this
/// machine and etcd's (up to 10 % of the TTL) and the time it takes to stop acting.
pub fn acting_window(ttl: Duration) -> Duration {
    ttl.saturating_sub((ttl / 10).max(Duration::from_millis(250)))
}

/// One connected etcd client and this coordinator's lease.
pub struct Etcd {
    client: Client,
    keys: Keys,
    id: String,
    entry: Vec<u8>,
    slots: u32,
    lease_ttl: Duration,
    lease: Arc<LeaseState>,
    view: watch::Receiver<ClusterView>,
    store: Arc<EtcdStore>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Etcd {
    /// Connects, grants this coordinator's lease and starts keeping it alive, registers
    /// `coordinators/<id>`, creates `meta/slots` (or reads the count an earlier
    /// coordinator chose: it wins over `opts.slots`), and starts watching the view.
    pub async fn connect(opts: &ClusterOptions) -> Result<Arc<Self>, ClusterError> {
        if opts.name.is_empty() || opts.name.contains('/') {
            return Err(ClusterError::Invalid(format!(
                "cluster name {:?} must be non-empty and without '/'",
                opts.name
            )));
        }
        let connect = ConnectOptions::new()
            .with_connect_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(Duration::from_secs(1), REQUEST_TIMEOUT)
            .with_keep_alive_while_idle(true);
        let mut client = timed(Client::connect(&opts.endpoints, Some(connect))).await?;
        let keys = Keys::new(&opts.name);
        let entry = serde_json::to_vec(&Entry {
            id: opts.id.clone(),
            addr: opts.advertise.clone(),
            loaded_ms: None,
        })
        .map_err(|e| ClusterError::Invalid(e.to_string()))?;

        let ttl_secs = opts.lease_ttl.as_secs_f64().ceil().max(1.0) as i64;
        let lease = Arc::new(LeaseState {
            id: AtomicI64::new(0),
            deadline: Mutex::new(Instant::now()),
        });
        grant(
            &mut client,
            &lease,
            ttl_secs,
            &keys.coordinator(&opts.id),
            &entry,
        )
        .await?;

        let slots = slot_count(&mut client, &keys, opts.slots).await?;
        if slots != opts.slots {
            info!(
                slots,
                asked = opts.slots,
                "the cluster's slot count was chosen when it was created; using it"
            );
        }

        let (initial, revision) = load_view(&mut client, &keys).await?;
        let (tx, view) = watch::channel(initial);
        let store = Arc::new(EtcdStore::new(
            client.clone(),
            keys.clone(),
            slots,
            Arc::clone(&lease),
        ));
        let keepalive = tokio::spawn(keep_alive(
            client.clone(),
            Arc::clone(&lease),
            ttl_secs,
            keys.coordinator(&opts.id),
            entry.clone(),
        ));
        let watcher = tokio::spawn(watch_view(client.clone(), keys.clone(), tx, revision));
        Ok(Arc::new(Self {
            client,
            keys,
            id: opts.id.clone(),
            entry,
            slots,
            lease_ttl: Duration::from_secs(ttl_secs as u64),
            lease,
            view,
            store,
            tasks: Mutex::new(vec![keepalive, watcher]),
        }))
    }

    /// The cluster's slot count (kept in etcd).
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// This coordinator's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The TTL of this coordinator's etcd lease.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// The current etcd lease. It changes when the lease expired and a new one was
    /// granted: every slot owned under the old one is lost.
    pub fn lease_id(&self) -> i64 {
        self.lease.id()
    }

    /// After this instant this coordinator acts for no slot: (send time of the last
    /// keepalive etcd answered with TTL > 0) + TTL - max(TTL / 10, 250 ms).
    pub fn acting_deadline(&self) -> Instant {
        self.lease.deadline()
    }

    /// The live coordinators and the slots' owners, kept by an etcd watch.
    pub fn view(&self) -> watch::Receiver<ClusterView> {
        self.view.clone()
    }

    /// Claims `slot`: creates `owners/<slot>` with this coordinator's lease if absent.
    /// Its create revision is the fencing token. `None` when another coordinator owns
    /// it; the token again when this lease already owns it.
    pub async fn claim(&self, slot: u32) -> Result<Option<FencingToken>, ClusterError> {
        if Instant::now() >= self.acting_deadline() {
            return Err(ClusterError::LeaseLost);
        }
        let key = self.keys.owner(slot);
        let lease = self.lease.id();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                self.entry.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(key, None)]);
        let sent = Instant::now();
        let resp = timed(self.client.kv_client().txn(txn)).await?;
        metrics::histogram!("rollcall_etcd_request_duration_seconds", "op" => "claim")
            .record(sent.elapsed().as_secs_f64());
        if resp.succeeded() {
            let revision = resp.header().map_or(0, |h| h.revision());
            return Ok(Some(FencingToken(revision as u64)));
        }
        Ok(first_kv(&resp.op_responses())
            .filter(|kv| kv.lease() == lease)
            .map(|kv| FencingToken(kv.create_revision() as u64)))
    }

    /// Notes on `owners/<slot>` how long loading its groups took (for `rollcall
    /// cluster`), if this coordinator still owns it with `token`. Informational: a
    /// failure is only logged.
    pub async fn loaded(&self, slot: u32, token: FencingToken, took: Duration) {
        let Ok(mut entry) = serde_json::from_slice::<Entry>(&self.entry) else {
            return;
        };
        entry.loaded_ms = Some(took.as_millis() as u64);
        let Ok(value) = serde_json::to_vec(&entry) else {
            return;
        };
        let key = self.keys.owner(slot);
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                token.0 as i64,
            )])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(self.lease.id())),
            )]);
        if let Err(e) = timed(self.client.kv_client().txn(txn)).await {
            warn!(slot, error = %e, "cannot note a slot's load time");
        }
    }

    /// Deletes `owners/<slot>` if this lease holds it (after the slot's groups were
    /// released from the cores and their records made durable).
    pub async fn release(&self, slot: u32) -> Result<(), ClusterError> {
        let key = self.keys.owner(slot);
        let txn = Txn::new()
            .when([Compare::lease(
                key.clone(),
                CompareOp::Equal,
                self.lease.id(),
            )])
            .and_then([TxnOp::delete(key, None)]);
        timed(self.client.kv_client().txn(txn)).await?;
        Ok(())
    }

    /// Leaves the list of live coordinators (a graceful stop begins): the others' plans
    /// stop counting this one, so they claim its slots as it hands them back, and do not
    /// give it new ones. Its lease, and the slots it still owns, stay until [`Self::leave`].
    pub async fn retire(&self) -> Result<(), ClusterError> {
        let key = self.keys.coordinator(&self.id);
        timed(self.client.kv_client().delete(key, None)).await?;
        Ok(())
    }

    /// Revokes the lease (after every slot was handed off): the registration and any
    /// owner key left go at once, and the acting deadline is now.
    pub async fn leave(&self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
        let id = self.lease.id();
        self.lease.expire();
        if let Err(e) = timed(self.client.lease_client().revoke(id)).await {
            warn!(error = %e, "cannot revoke the cluster lease; it expires by itself");
        }
    }

    /// The store over this connection.
    pub fn store(&self) -> Arc<EtcdStore> {
        Arc::clone(&self.store)
    }
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("keys", &self.keys)
            .field("id", &self.id)
            .field("slots", &self.slots)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

/// `fut` bounded by [`REQUEST_TIMEOUT`], its error as a [`ClusterError`].
pub(crate) async fn timed<T>(
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, ClusterError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(result) => result.map_err(|e| ClusterError::Etcd(e.to_string())),
        Err(_) => Err(ClusterError::Etcd(format!(
            "no answer within {REQUEST_TIMEOUT:?}"
        ))),
    }
}

pub(crate) fn first_kv(responses: &[TxnOpResponse]) -> Option<&KeyValue> {
    responses.iter().find_map(|r| match r {
        TxnOpResponse::Get(get) => get.kvs().first(),
        _ => None,
    })
}

/// Grants a lease, puts the registration with it, and counts it renewed from the
/// grant's send time.
async fn grant(
    client: &mut Client,
    lease: &LeaseState,
    ttl_secs: i64,
    key: &str,
    entry: &[u8],
) -> Result<(), ClusterError> {
    let sent = Instant::now();
    let granted = timed(client.lease_grant(ttl_secs, None)).await?;
    let options = PutOptions::new().with_lease(granted.id());
    timed(client.put(key, entry.to_vec(), Some(options))).await?;
    lease.id.store(granted.id(), Ordering::Release);
    lease.renewed(sent, granted.ttl());
    Ok(())
}

/// Creates `meta/slots` with `wanted` if absent; the stored count either way.
async fn slot_count(client: &mut Client, keys: &Keys, wanted: u32) -> Result<u32, ClusterError> {
    if wanted == 0 {
        return Err(ClusterError::Invalid(
            "the slot count must be at least 1".into(),
        ));
    }
    let key = keys.meta_slots();
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key.clone(), wanted.to_string(), None)])
        .or_else([TxnOp::get(key.clone(), None)]);
    let resp = timed(client.txn(txn)).await?;
    if resp.succeeded() {
        return Ok(wanted);
    }
    let responses = resp.op_responses();
    let value = first_kv(&responses).map(|kv| kv.value().to_vec());
    value
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| ClusterError::Invalid(format!("{key} does not hold a slot count")))
}

/// Keeps the lease alive every TTL / 3 and moves the acting deadline on each answer.
/// A lease that etcd says expired is replaced by a new one (the registration is put
/// again; every slot of the old one is lost and the owner keys went with it).
async fn keep_alive(
    mut client: Client,
    lease: Arc<LeaseState>,
    ttl_secs: i64,
    key: String,
    entry: Vec<u8>,
) {
    let interval = Duration::from_millis((ttl_secs as u64 * 1000 / 3).max(100));
    loop {
        let opened =
            tokio::time::timeout(REQUEST_TIMEOUT, client.lease_keep_alive(lease.id())).await;
        let (mut keeper, mut stream) = match opened {
            Ok(Ok(opened)) => opened,
            // etcd no longer knows the lease (it expired while etcd was out of reach):
            // the client says so when the stream opens, not with a TTL of 0.
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(e))) if e.contains("not found") => {
                warn!("the cluster lease expired; acting for no slot, granting a new one");
                lease.expire();
                while let Err(e) = grant(&mut client, &lease, ttl_secs, &key, &entry).await {
                    warn!(error = %e, "cannot grant a new cluster lease");
                    tokio::time::sleep(interval / 4).await;
                }
                continue;
            }
            Ok(Err(_)) | Err(_) => {
                missed();
                tokio::time::sleep(interval / 4).await;
                continue;
            }
        };
        loop {
            let sent = Instant::now();
            if keeper.keep_alive().await.is_err() {
                missed();
                break;
            }
            match tokio::time::timeout(interval, stream.message()).await {
                Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                    lease.renewed(sent, resp.ttl());
                    metrics::histogram!("rollcall_etcd_request_duration_seconds", "op" => "keepalive")
                        .record(sent.elapsed().as_secs_f64());
                }
                Ok(Ok(Some(_))) => {
                    warn!("the cluster lease expired; acting for no slot, granting a new one");
                    lease.expire();
                    while let Err(e) = grant(&mut client, &lease, ttl_secs, &key, &entry).await {
                        warn!(error = %e, "cannot grant a new cluster lease");
                        tokio::time::sleep(interval / 4).await;
                    }
                    break;
                }
                _ => {
                    missed();
                    break;
                }
            }
            tokio::time::sleep_until((sent + interval).into()).await;
        }
    }
}

/// Counts a keepalive that failed or went unanswered.
fn missed() {
    metrics::counter!("rollcall_cluster_lease_renewals_missed_total").increment(1);
}

/// Everything from `coordinators/` up to and including `owners/` (`meta/` between them
/// is read too and ignored): the keys the view is made of.
fn view_range(keys: &Keys) -> (String, String) {
    (keys.coordinators_prefix(), keys.owners_end())
}

async fn load_view(client: &mut Client, keys: &Keys) -> Result<(ClusterView, i64), ClusterError> {
    let (start, end) = view_range(keys);
    let resp = timed(client.get(start, Some(GetOptions::new().with_range(end)))).await?;
    let mut view = ClusterView::default();
    for kv in resp.kvs() {
        apply(&mut view, keys, kv, true);
    }
    Ok((view, resp.header().map_or(0, |h| h.revision())))
}

/// Applies a put (`present`) or delete of `kv` to `view`.
fn apply(view: &mut ClusterView, keys: &Keys, kv: &KeyValue, present: bool) {
    let Ok(key) = kv.key_str() else { return };
    let entry = || serde_json::from_slice::<Entry>(kv.value()).ok();
    if let Some(id) = key.strip_prefix(&keys.coordinators_prefix()) {
        match entry().filter(|_| present) {
            Some(e) => view.coordinators.insert(id.to_owned(), e.addr),
            None => view.coordinators.remove(id),
        };
    } else if let Some(slot) = key
        .strip_prefix(&keys.owners_prefix())
        .and_then(|s| s.parse::<u32>().ok())
    {
        match entry().filter(|_| present) {
            Some(e) => view
                .owners
                .insert(slot, (e.id, e.addr, kv.create_revision() as u64)),
            None => view.owners.remove(&slot),
        };
    }
}

/// Keeps the view current: a watch from the revision of the last full read; on any
/// break, a full read again.
async fn watch_view(
    mut client: Client,
    keys: Keys,
    tx: watch::Sender<ClusterView>,
    mut revision: i64,
) {
    loop {
        let (start, end) = view_range(&keys);
        let options = WatchOptions::new()
            .with_range(end)
            .with_start_revision(revision + 1);
        if let Ok(mut stream) = client.watch(start, Some(options)).await {
            while let Ok(Some(resp)) = stream.message().await {
                if resp.canceled() {
                    break;
                }
                if resp.events().is_empty() {
                    continue;
                }
                tx.send_modify(|view| {
                    for event in resp.events() {
                        if let Some(kv) = event.kv() {
                            apply(view, &keys, kv, event.event_type() == EventType::Put);
                        }
                    }
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        match load_view(&mut client, &keys).await {
            Ok((view, rev)) => {
                revision = rev;
                tx.send_if_modified(|current| {
                    let changed = *current != view;
                    *current = view;
                    changed
                });
            }
            Err(e) => warn!(error = %e, "cannot read the cluster view"),
        }
    }
}

/// The slots in `view` owned by `id`, for callers that compare the plan with what is.
pub fn owned_by(view: &ClusterView, id: &str) -> Vec<u32> {
    view.owners
        .iter()
        .filter(|(_, (owner, _, _))| owner == id)
        .map(|(slot, _)| *slot)
        .collect()
}
