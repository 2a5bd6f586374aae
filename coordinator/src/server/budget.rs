//! The budget of every connection's buffers together.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of connection buffers (frames being read, frames queued) over all
/// connections, beyond a free allowance each connection has: a ceiling on what
/// connections can make the coordinator hold, whatever their number. Within its
/// allowance a connection never touches the shared counter, so heartbeats and their
/// answers do not contend on it.
#[derive(Debug)]
pub(crate) struct BufferBudget {
    used: AtomicUsize,
    max: usize,
}

/// Buffer bytes per connection that are not counted against the [`BufferBudget`].
pub(crate) const FREE_BUFFER_BYTES: usize = 64 * 1024;

impl BufferBudget {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            used: AtomicUsize::new(0),
            max,
        }
    }

    /// Moves a connection's buffers from `from` to `to` bytes. Growing past the budget
    /// is refused (`false`, nothing changes); shrinking always succeeds.
    pub(crate) fn resize(&self, from: usize, to: usize) -> bool {
        let was = from.saturating_sub(FREE_BUFFER_BYTES);
        let will = to.saturating_sub(FREE_BUFFER_BYTES);
        if will <= was {
            if will < was {
                self.used.fetch_sub(was - will, Ordering::AcqRel);
            }
            return true;
        }
        let more = will - was;
        let before = self.used.fetch_add(more, Ordering::AcqRel);
        if before + more > self.max {
            self.used.fetch_sub(more, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// The budget, bytes.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Bytes counted now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests;
