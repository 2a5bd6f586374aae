//! What `rollcall cluster` shows: the cluster as etcd holds it, read without joining
//! it (no lease, nothing written).

use std::collections::BTreeMap;

use etcd_client::{Client, GetOptions};
use serde::Serialize;

use super::etcd::{timed, Entry};
use super::keys::{parse_key, Keys, SlotKey};
use super::ClusterError;

/// One slot's owner, as its key says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotOwner {
    /// The owner's coordinator id.
    pub id: String,
    /// The owner's advertised address.
    pub addr: String,
    /// The owner's fencing token for the slot (the key's create revision).
    pub token: u64,
    /// How long the owner took to load the slot, once it serves it.
    pub loaded_ms: Option<u64>,
}

/// The cluster as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterReport {
    /// The cluster's name.
    pub name: String,
    /// The slot count (`None`: no cluster of that name in this etcd).
    pub slots: Option<u32>,
    /// Live coordinators: id -> advertised address.
    pub coordinators: BTreeMap<String, String>,
    /// Owned slots.
    pub owners: BTreeMap<u32, SlotOwner>,
    /// Groups with a stored snapshot, per slot (slots without any are left out).
    pub groups: BTreeMap<u32, u64>,
}

/// Reads cluster `name` from the etcd at `endpoints`.
pub async fn inspect(endpoints: &[String], name: &str) -> Result<ClusterReport, ClusterError> {
    let mut client = timed(Client::connect(endpoints, None)).await?;
    let keys = Keys::new(name);
    let slots = timed(client.get(keys.meta_slots(), None))
        .await?
        .kvs()
        .first()
        .and_then(|kv| kv.value_str().ok()?.trim().parse().ok());
    let prefixed = || Some(GetOptions::new().with_prefix());
    let mut coordinators = BTreeMap::new();
    for kv in timed(client.get(keys.coordinators_prefix(), prefixed()))
        .await?
        .kvs()
    {
        let id = kv
            .key_str()
            .ok()
            .and_then(|k| k.strip_prefix(&keys.coordinators_prefix()));
        if let (Some(id), Ok(entry)) = (id, serde_json::from_slice::<Entry>(kv.value())) {
            coordinators.insert(id.to_owned(), entry.addr);
        }
    }
    let mut owners = BTreeMap::new();
    for kv in timed(client.get(keys.owners_prefix(), prefixed()))
        .await?
        .kvs()
    {
        let slot = kv
            .key_str()
            .ok()
            .and_then(|k| k.strip_prefix(&keys.owners_prefix()))
            .and_then(|s| s.parse::<u32>().ok());
        if let (Some(slot), Ok(entry)) = (slot, serde_json::from_slice::<Entry>(kv.value())) {
            owners.insert(
                slot,
                SlotOwner {
                    id: entry.id,
                    addr: entry.addr,
                    token: kv.create_revision() as u64,
                    loaded_ms: entry.loaded_ms,
                },
            );
        }
    }
    let mut groups = BTreeMap::new();
    let snapshots = timed(client.get(
        keys.slots_prefix(),
        Some(GetOptions::new().with_prefix().with_keys_only()),
    ))
    .await?;
    for kv in snapshots.kvs() {
        let parsed = kv
            .key_str()
            .ok()
            .and_then(|k| k.strip_prefix(&keys.slots_prefix()))
            .and_then(parse_key);
        if let Some((slot, SlotKey::Snapshot(_))) = parsed {
            *groups.entry(slot).or_insert(0) += 1;
        }
    }
    Ok(ClusterReport {
        name: name.to_owned(),
        slots,
        coordinators,
        owners,
        groups,
    })
}
