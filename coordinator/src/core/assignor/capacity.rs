//! Capacity-weighted quotas.
//!
//! A member's quota is its share of the partitions in proportion to its capacity: with
//! `P` partitions and capacities `c` summing to `C`, member `m` gets `⌊P·c_m / C⌋`, and
//! the partitions left over go one each to the members with the largest remainders
//! `P·c_m mod C` (largest remainder apportionment). Ties go to the member owning the
//! most valid partitions beyond its rounded-down share (it then has to give up fewer,
//! and a member given one more keeps it on the next run), then to member order. Every
//! quota is therefore within one of the exact proportional share, and the quotas add up
//! to `P`.
//!
//! With equal capacities every remainder and rounded-down share is the same, so the
//! choice falls to owned partitions and member order: exactly the quotas the sticky assignor chose before it
//! knew of capacities (`P / N`, plus one for the `P % N` members owning the most).

use std::cmp::Reverse;

/// A member's capacity as the assignors use it: at least 1.
pub(super) fn capacity(declared: u32) -> u64 {
    u64::from(declared.max(1))
}

/// The quotas of `total` partitions over members of the given capacities (0: the
/// member takes part in nothing and gets 0), breaking ties by `owned` (more first), then
/// by position. See the module docs.
pub(super) fn quotas(total: usize, capacities: &[u64], owned: &[usize]) -> Vec<usize> {
    let n = capacities.len();
    let sum: u128 = capacities.iter().map(|&c| u128::from(c)).sum();
    if sum == 0 {
        return vec![0; n];
    }
    let total = total as u128;
    let mut quota = Vec::with_capacity(n);
    let mut remainder = Vec::with_capacity(n);
    let mut given = 0_u128;
    for &c in capacities {
        let share = total * u128::from(c);
        quota.push((share / sum) as usize);
        remainder.push(share % sum);
        given += share / sum;
    }
    let extra = (total - given) as usize;
    if extra > 0 {
        let mut order: Vec<u32> = (0..n as u32)
            .filter(|&m| capacities[m as usize] > 0)
            .collect();
        // Owned beyond the lower quota: a member that kept a quota rounded up owns one
        // more than its floor, and keeps it on the next run.
        let beyond = |m: usize| owned[m] as i128 - quota[m] as i128;
        let key = |&m: &u32| {
            (
                Reverse(remainder[m as usize]),
                Reverse(beyond(m as usize)),
                m,
            )
        };
        if extra < order.len() {
            order.select_nth_unstable_by_key(extra, key);
        }
        for &m in &order[..extra] {
            quota[m as usize] += 1;
        }
    }
    quota
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportional_within_one_and_summing_to_the_total() {
        assert_eq!(quotas(700, &[1, 2, 4], &[0; 3]), vec![100, 200, 400]);
        assert_eq!(quotas(10, &[1, 2, 4], &[0; 3]), vec![1, 3, 6]);
        assert_eq!(quotas(3, &[1, 1, 1, 1], &[0, 5, 0, 5]), vec![1, 1, 0, 1]);
        assert_eq!(quotas(5, &[2, 0, 2], &[0; 3]), vec![3, 0, 2]);
        assert_eq!(quotas(5, &[0, 0], &[0; 2]), vec![0, 0]);
        let caps: Vec<u64> = (1..=37).collect();
        // Equal capacities: the old choice, P / N each and one more for the P % N
        // members owning the most (ties by position).
        for total in 0..40 {
            for n in 1..8 {
                let owned: Vec<usize> = (0..n).map(|m| (m * 7 + total) % 5).collect();
                let mut by_owned: Vec<usize> = (0..n).collect();
                by_owned.sort_by_key(|&m| (Reverse(owned[m]), m));
                let mut old = vec![total / n; n];
                for &m in &by_owned[..total % n] {
                    old[m] += 1;
                }
                for c in [1, 3] {
                    assert_eq!(quotas(total, &vec![c; n], &owned), old, "{total} over {n}");
                }
            }
        }
        let q = quotas(1_000, &caps, &[0; 37]);
        assert_eq!(q.iter().sum::<usize>(), 1_000);
        let sum: u64 = caps.iter().sum();
        for (&c, &q) in caps.iter().zip(&q) {
            let exact = 1_000.0 * c as f64 / sum as f64;
            assert!((q as f64 - exact).abs() < 1.0, "{c}: {q} vs {exact}");
        }
    }
}
