//! The values the etcd store keeps: the redb store's encodings of snapshots and
//! offsets, and the JSON [`Info`] of a group.

use serde::{Deserialize, Serialize};

use crate::core::GroupSnapshot;
use crate::store::{snapshot_json, StoreError};

/// Leading byte of every snapshot and offset value (the redb store's).
pub(crate) const VALUE_FORMAT: u8 = 1;

/// What `i/<group>` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Info {
    /// Retention's mark: wall-clock ms since when the group is idle and empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) since: Option<u64>,
    /// The largest generation of the group when it was deleted, until it has a
    /// snapshot again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) floor: Option<u32>,
    /// The stored snapshot's generation; absent when there is no snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) generation: Option<u32>,
}

impl Info {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

fn corrupt(key: &str, reason: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        path: format!("etcd key {key}"),
        reason: reason.to_string(),
    }
}

pub(crate) fn decode_info(key: &str, value: &[u8]) -> Result<Info, StoreError> {
    serde_json::from_slice(value)
        .map_err(|e| corrupt(key, format!("group info does not decode: {e}")))
}

pub(crate) fn decode_snapshot(
    key: &str,
    group: &str,
    value: &[u8],
) -> Result<GroupSnapshot, StoreError> {
    let json = match value.split_first() {
        Some((&VALUE_FORMAT, json)) => json,
        Some((other, _)) => {
            return Err(corrupt(key, format!("snapshot has unknown format {other}")))
        }
        None => return Err(corrupt(key, "snapshot is empty")),
    };
    let snapshot = snapshot_json::decode(json)
        .map_err(|e| corrupt(key, format!("snapshot does not decode: {e}")))?;
    if snapshot.group != group {
        return Err(corrupt(
            key,
            format!(
                "snapshot of group {:?} stored under {group:?}",
                snapshot.group
            ),
        ));
    }
    Ok(snapshot)
}

/// An offset value: the offset and its metadata.
pub(crate) fn decode_offset(key: &str, value: &[u8]) -> Result<(i64, String), StoreError> {
    let (format, rest) = value
        .split_first()
        .ok_or_else(|| corrupt(key, "empty offset"))?;
    if *format != VALUE_FORMAT {
        return Err(corrupt(key, format!("offset has unknown format {format}")));
    }
    let (offset, metadata) = rest
        .split_first_chunk::<8>()
        .ok_or_else(|| corrupt(key, "offset too short"))?;
    let metadata =
        std::str::from_utf8(metadata).map_err(|_| corrupt(key, "metadata is not UTF-8"))?;
    Ok((i64::from_le_bytes(*offset), metadata.to_owned()))
}

/// The first key after every key starting with `prefix` (which ends with `/`).
pub(crate) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}
