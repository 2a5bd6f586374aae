use super::*;

#[test]
fn the_budget_counts_only_bytes_beyond_each_connections_allowance() {
    let budget = BufferBudget::new(100_000);
    assert!(budget.resize(0, FREE_BUFFER_BYTES));
    assert_eq!(budget.used(), 0);
    assert!(budget.resize(FREE_BUFFER_BYTES, FREE_BUFFER_BYTES + 60_000));
    assert_eq!(budget.used(), 60_000);
    // A second connection may not take it past the ceiling; nothing is counted.
    assert!(!budget.resize(0, FREE_BUFFER_BYTES + 50_000));
    assert_eq!(budget.used(), 60_000);
    assert!(budget.resize(0, FREE_BUFFER_BYTES + 40_000));
    assert!(budget.resize(FREE_BUFFER_BYTES + 60_000, 10));
    assert!(budget.resize(FREE_BUFFER_BYTES + 40_000, 0));
    assert_eq!(budget.used(), 0);
}
