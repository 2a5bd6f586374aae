//! What a server does once, before it serves: open the store (a single process loads
//! all of it) and divide what it holds among one core per shard.

use std::sync::Arc;

use tracing::debug;

use super::{shard_of, ServerConfig, ServerError, StoreConfig};
use crate::core::{Coordinator, RestoredState, Totals};
use crate::store::{MemoryStore, RedbStore, Store};

/// Opens the store of a single-process server and loads everything in it.
pub(super) async fn open_and_load(
    config: &StoreConfig,
) -> Result<(Arc<dyn Store>, RestoredState), ServerError> {
    let store = open_store(config).await?;
    let loader = store.clone();
    let restored = tokio::task::spawn_blocking(move || loader.load())
        .await
        .map_err(|e| ServerError::Runtime(format!("store load panicked: {e}")))??;
    Ok((store, restored))
}

async fn open_store(config: &StoreConfig) -> Result<Arc<dyn Store>, ServerError> {
    Ok(match config {
        StoreConfig::Memory => Arc::new(MemoryStore::new()),
        StoreConfig::Custom(store) => store.clone(),
        StoreConfig::Dir(dir) => {
            let dir = dir.clone();
            let store = tokio::task::spawn_blocking(move || RedbStore::open(&dir))
                .await
                .map_err(|e| ServerError::Runtime(format!("store open panicked: {e}")))??;
            Arc::new(store)
        }
    })
}

/// One core per shard, each restored with the groups and offsets that hash to it.
pub(super) fn restore_cores(config: &ServerConfig, restored: RestoredState) -> Vec<Coordinator> {
    let shards = config.shards;
    let floor = restored.generation_floor;
    let mut parts: Vec<RestoredState> = (0..shards)
        .map(|_| RestoredState {
            generation_floor: floor,
            ..RestoredState::default()
        })
        .collect();
    for group in restored.groups {
        parts[shard_of(&group.group, shards)].groups.push(group);
    }
    for offset in restored.offsets {
        parts[shard_of(&offset.group, shards)].offsets.push(offset);
    }
    for (group, floor) in restored.floors {
        parts[shard_of(&group, shards)].floors.push((group, floor));
    }
    // Member ids must never repeat across restarts or shards.
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let nonce: u16 = rand::random();
    let now = tokio::time::Instant::now().into_std();
    let totals = Arc::new(Totals::default());
    parts
        .into_iter()
        .enumerate()
        .map(|(index, part)| {
            let mut core_config = config.core.clone();
            // The server's expulsion rate is shared out among the shards.
            core_config.max_expulsion_rate = config.core.max_expulsion_rate / shards as f64;
            core_config.max_answer_bytes = config.max_frame_size;
            core_config.member_id_suffix = format!("-{start:x}{nonce:04x}-{index}");
            // The quotas are the coordinator's: every shard counts into the same totals.
            let mut core = Coordinator::with_totals(core_config, totals.clone());
            if !part.groups.is_empty()
                || !part.offsets.is_empty()
                || !part.floors.is_empty()
                || part.generation_floor > 0
            {
                debug!(
                    shard = index,
                    groups = part.groups.len(),
                    offsets = part.offsets.len(),
                    "restoring"
                );
                core.restore(now, part);
            }
            core
        })
        .collect()
}
