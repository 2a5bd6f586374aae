//! Memory given back to the system after a burst.
//!
//! The coordinator's binary allocates with mimalloc, which keeps a freed large block
//! in its arenas and returns ("purges") the pages to the system only once its purge
//! delay (1 s by default) has passed, and then only when some thread next frees or
//! allocates a page of its own. A coordinator that goes quiet after a burst of large
//! frames therefore kept them resident until its next burst: after 2,000 connections
//! each sent an unfinished 1 MiB frame and closed, 415 MiB stayed resident, where
//! 13 MiB was resident before. So once a second the lag probe (see
//! [`super::evidence::probe_lag`]), which wakes anyway, allocates and frees one block
//! large enough to be a page of its own: freeing it runs the allocator's purge of
//! whatever has waited past its delay. Memory freed after a burst is back with the
//! system within about three seconds (the purge delay, this period, and the
//! allocator's pacing of purges).
//!
//! The workspace forbids unsafe code, so the allocator's own collection call cannot be
//! made; this reaches the same purge through the ordinary allocation interface. Under
//! another allocator it costs one allocation a second.

use std::time::Duration;

/// How often the allocator is given the chance to purge.
pub(crate) const GIVE_BACK_EVERY: Duration = Duration::from_secs(1);

/// A block larger than mimalloc's largest pooled size (512 KiB), so that it is a page
/// of its own and freeing it returns the page to the arena.
const BLOCK: usize = 1 << 20;

/// Lets the allocator return what it has kept past its purge delay.
pub(crate) fn give_back() {
    let block: Vec<u8> = Vec::with_capacity(BLOCK);
    // Kept opaque so that the allocation and its free are not optimised away.
    drop(std::hint::black_box(block));
}
