//! A batch's operations packed into transactions within etcd's limits (see `store.rs`
//! for why a split is safe).

use std::collections::BTreeSet;

use etcd_client::{DeleteOptions, TxnOp};

/// Operations per transaction: etcd's default `--max-txn-ops`.
pub const MAX_TXN_OPS: usize = 128;

/// Bytes of keys and values per transaction, well under etcd's default 1.5 MiB
/// `--max-request-bytes` (the rest is headroom for framing and compares).
pub const MAX_TXN_BYTES: usize = 1024 * 1024;

/// One operation of a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Put(String, Vec<u8>),
    Delete(String),
    /// Every key with this prefix.
    DeletePrefix(String),
}

impl Op {
    fn bytes(&self) -> usize {
        match self {
            Self::Put(key, value) => key.len() + value.len(),
            Self::Delete(key) | Self::DeletePrefix(key) => key.len(),
        }
    }

    pub(crate) fn into_txn_op(self) -> TxnOp {
        match self {
            Self::Put(key, value) => TxnOp::put(key, value, None),
            Self::Delete(key) => TxnOp::delete(key, None),
            Self::DeletePrefix(prefix) => {
                TxnOp::delete(prefix, Some(DeleteOptions::new().with_prefix()))
            }
        }
    }
}

/// One transaction's operations and the slots whose tokens it is conditioned on.
#[derive(Debug, Default)]
pub(crate) struct Chunk {
    pub(crate) ops: Vec<Op>,
    bytes: usize,
    pub(crate) slots: BTreeSet<u32>,
}

/// Packs groups' operations into chunks within [`MAX_TXN_OPS`] and [`MAX_TXN_BYTES`].
#[derive(Debug, Default)]
pub(crate) struct Chunks {
    done: Vec<Chunk>,
    open: Chunk,
}

impl Chunks {
    /// Adds one group's operations: all in one chunk when they fit in one; otherwise
    /// the individual `offsets` in chunks ahead and `last` together after them.
    pub(crate) fn add(&mut self, slot: u32, offsets: Vec<Op>, last: Vec<Op>) {
        let size = |ops: &[Op]| ops.iter().map(Op::bytes).sum::<usize>();
        let (n, bytes) = (offsets.len() + last.len(), size(&offsets) + size(&last));
        if n <= MAX_TXN_OPS && bytes <= MAX_TXN_BYTES {
            if !self.fits(n, bytes) {
                self.flush();
            }
            self.push(slot, offsets.into_iter().chain(last));
            return;
        }
        for op in offsets {
            if !self.fits(1, op.bytes()) {
                self.flush();
            }
            self.push(slot, [op]);
        }
        if !self.fits(last.len(), size(&last)) {
            self.flush();
        }
        self.push(slot, last);
    }

    fn fits(&self, n: usize, bytes: usize) -> bool {
        self.open.ops.is_empty()
            || (self.open.ops.len() + n <= MAX_TXN_OPS && self.open.bytes + bytes <= MAX_TXN_BYTES)
    }

    fn push(&mut self, slot: u32, ops: impl IntoIterator<Item = Op>) {
        for op in ops {
            self.open.bytes += op.bytes();
            self.open.ops.push(op);
        }
        self.open.slots.insert(slot);
    }

    fn flush(&mut self) {
        if !self.open.ops.is_empty() {
            self.done.push(std::mem::take(&mut self.open));
        }
    }

    pub(crate) fn finish(mut self) -> Vec<Chunk> {
        self.flush();
        self.done
    }
}
