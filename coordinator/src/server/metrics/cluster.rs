//! Cluster mode's metrics: registered in every server (they stay at zero outside a
//! cluster), so that the dashboard's cluster row is checked like every other.

use metrics::{Counter, Gauge, Histogram};

/// The etcd requests timed by `rollcall_etcd_request_duration_seconds`.
const ETCD_OPS: [&str; 4] = ["write", "load", "keepalive", "claim"];

/// Describes the cluster metrics.
pub(super) fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_gauge!(
        "rollcall_cluster_slots_owned",
        "Cluster slots this coordinator acts for."
    );
    describe_counter!(
        "rollcall_cluster_slot_moves_total",
        "Slots this coordinator adopted, handed back, or abandoned (its etcd lease not renewed in time)."
    );
    describe_histogram!(
        "rollcall_cluster_slot_load_seconds",
        Unit::Seconds,
        "Time from claiming a slot until its groups are served."
    );
    describe_counter!(
        "rollcall_cluster_lease_renewals_missed_total",
        "etcd lease keepalives that failed or were not answered in time."
    );
    describe_histogram!(
        "rollcall_etcd_request_duration_seconds",
        Unit::Seconds,
        "Time of an etcd request, by operation."
    );
}

/// Cluster mode's metric handles (registered in every build, recorded only by one
/// with the `cluster` feature).
#[derive(Debug)]
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) struct ClusterMetrics {
    pub(crate) slots_owned: Gauge,
    pub(crate) adopted: Counter,
    pub(crate) handed_back: Counter,
    pub(crate) abandoned: Counter,
    pub(crate) slot_load: Histogram,
}

impl ClusterMetrics {
    pub(crate) fn new() -> Self {
        let moved = |how: &'static str| metrics::counter!("rollcall_cluster_slot_moves_total", "move" => how);
        // Recorded by the etcd side (`cluster::etcd`, `cluster::store`) under the same
        // names; registered here so they are exported, at zero, from the start.
        let _ = metrics::counter!("rollcall_cluster_lease_renewals_missed_total");
        for op in ETCD_OPS {
            let _ = metrics::histogram!("rollcall_etcd_request_duration_seconds", "op" => op);
        }
        Self {
            slots_owned: metrics::gauge!("rollcall_cluster_slots_owned"),
            adopted: moved("adopted"),
            handed_back: moved("handed_back"),
            abandoned: moved("abandoned"),
            slot_load: metrics::histogram!("rollcall_cluster_slot_load_seconds"),
        }
    }
}
