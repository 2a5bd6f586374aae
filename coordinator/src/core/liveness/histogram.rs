//! The counts of a member's gap histogram, kept inline while few buckets are in use.
//!
//! A member heartbeating at a steady rhythm puts nearly every gap in one or two of the
//! histogram's buckets, so the counts of its few buckets in use are kept in the member
//! itself (24 bytes), and the full table of counts (152 bytes, on the heap) only once
//! its gaps spread over more buckets than that. Both hold the same counts: which one a
//! member has changes nothing it reports.

/// Buckets whose counts are kept inline.
const INLINE: usize = 7;

/// Counts per bucket, for buckets `0..BUCKETS`.
#[derive(Debug, Clone)]
pub(super) enum Counts<const BUCKETS: usize> {
    /// At most [`INLINE`] buckets hold a count: `buckets[..len]` ascending, each with
    /// its count (never zero) at the same index of `counts`.
    Few {
        len: u8,
        buckets: [u8; INLINE],
        counts: [u16; INLINE],
    },
    /// Every bucket's count.
    Many(Box<[u16; BUCKETS]>),
}

impl<const BUCKETS: usize> Default for Counts<BUCKETS> {
    fn default() -> Self {
        Self::Few {
            len: 0,
            buckets: [0; INLINE],
            counts: [0; INLINE],
        }
    }
}

impl<const BUCKETS: usize> Counts<BUCKETS> {
    /// Counts one more in `bucket` (saturating).
    pub(super) fn add(&mut self, bucket: usize) {
        debug_assert!(bucket < BUCKETS && BUCKETS <= usize::from(u8::MAX) + 1);
        match self {
            Self::Few {
                len,
                buckets,
                counts,
            } => {
                let n = usize::from(*len);
                // Buckets fit a u8 (checked above): the cast only narrows the type.
                let b = bucket as u8;
                match buckets[..n].binary_search(&b) {
                    Ok(i) => counts[i] = counts[i].saturating_add(1),
                    Err(i) if n < INLINE => {
                        buckets.copy_within(i..n, i + 1);
                        counts.copy_within(i..n, i + 1);
                        buckets[i] = b;
                        counts[i] = 1;
                        *len += 1;
                    }
                    Err(_) => {
                        let mut all = Box::new([0; BUCKETS]);
                        for (&b, &c) in buckets[..n].iter().zip(&counts[..n]) {
                            all[usize::from(b)] = c;
                        }
                        all[bucket] = 1;
                        *self = Self::Many(all);
                    }
                }
            }
            Self::Many(all) => all[bucket] = all[bucket].saturating_add(1),
        }
    }

    /// Halves every count; buckets left empty are dropped, and the full table goes back
    /// inline once few enough buckets hold a count.
    pub(super) fn halve(&mut self) {
        match self {
            Self::Few {
                len,
                buckets,
                counts,
            } => {
                let mut kept = 0;
                for i in 0..usize::from(*len) {
                    let c = counts[i] >> 1;
                    if c > 0 {
                        buckets[kept] = buckets[i];
                        counts[kept] = c;
                        kept += 1;
                    }
                }
                // At most INLINE: the cast cannot truncate.
                *len = kept as u8;
            }
            Self::Many(all) => {
                for c in all.iter_mut() {
                    *c >>= 1;
                }
                if all.iter().filter(|&&c| c > 0).count() <= INLINE {
                    let mut len = 0;
                    let mut buckets = [0; INLINE];
                    let mut counts = [0; INLINE];
                    for (b, &c) in all.iter().enumerate().filter(|(_, &c)| c > 0) {
                        // Bucket indexes fit a u8 (checked in `add`).
                        buckets[len] = b as u8;
                        counts[len] = c;
                        len += 1;
                    }
                    *self = Self::Few {
                        // At most INLINE: the cast cannot truncate.
                        len: len as u8,
                        buckets,
                        counts,
                    };
                }
            }
        }
    }

    /// The buckets holding a count, ascending, with their counts.
    pub(super) fn iter(&self) -> impl Iterator<Item = (usize, u16)> + '_ {
        let (few, many) = match self {
            Self::Few {
                len,
                buckets,
                counts,
            } => {
                let n = usize::from(*len);
                (Some(buckets[..n].iter().zip(&counts[..n])), None)
            }
            Self::Many(all) => (None, Some(all.iter().enumerate())),
        };
        let few = few
            .into_iter()
            .flatten()
            .map(|(&b, &c)| (usize::from(b), c));
        let many = many
            .into_iter()
            .flatten()
            .filter(|(_, &c)| c > 0)
            .map(|(b, &c)| (b, c));
        few.chain(many)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const N: usize = 76;

    #[derive(Debug, Clone)]
    enum Op {
        Add(usize),
        Halve,
    }

    /// Mostly a few nearby buckets (the common case), sometimes any, so that the counts
    /// move between inline and the full table both ways; some long runs in one bucket
    /// reach saturation.
    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            8 => (30..34usize).prop_map(Op::Add),
            3 => (0..N).prop_map(Op::Add),
            1 => Just(Op::Halve),
        ];
        prop::collection::vec(op, 0..400)
    }

    proptest! {
        #[test]
        fn holds_the_counts_a_full_table_holds(ops in ops(), saturate in any::<bool>()) {
            let mut counts = Counts::<N>::default();
            let mut table = [0u16; N];
            if saturate {
                for _ in 0..70_000 {
                    counts.add(31);
                    table[31] = table[31].saturating_add(1);
                }
            }
            for op in ops {
                match op {
                    Op::Add(b) => {
                        counts.add(b);
                        table[b] = table[b].saturating_add(1);
                    }
                    Op::Halve => {
                        counts.halve();
                        for c in &mut table {
                            *c >>= 1;
                        }
                    }
                }
                let want: Vec<(usize, u16)> = table
                    .iter()
                    .enumerate()
                    .filter(|(_, &c)| c > 0)
                    .map(|(b, &c)| (b, c))
                    .collect();
                let got: Vec<(usize, u16)> = counts.iter().collect();
                prop_assert_eq!(&got, &want);
                if let Counts::Few { .. } = counts {
                    prop_assert!(want.len() <= INLINE);
                }
            }
        }
    }

    #[test]
    fn few_buckets_stay_inline_and_many_go_back_when_halved_away() {
        assert_eq!(std::mem::size_of::<Counts<N>>(), 24);
        let mut counts = Counts::<N>::default();
        for b in [35, 36, 35, 34, 35] {
            counts.add(b);
        }
        assert!(matches!(counts, Counts::Few { len: 3, .. }));
        for b in 0..10 {
            counts.add(b);
        }
        assert!(matches!(counts, Counts::Many(_)));
        counts.halve();
        assert!(matches!(counts, Counts::Few { len: 1, .. }));
        assert_eq!(counts.iter().collect::<Vec<_>>(), [(35, 1)]);
    }
}
