//! The scenarios, one module each.

pub(crate) mod capacity;
pub(crate) mod churn;
pub(crate) mod commit;
pub(crate) mod connections;
pub(crate) mod detector;
pub(crate) mod drain;
pub(crate) mod failover;
pub(crate) mod fleet;
pub(crate) mod floor;
pub(crate) mod join_storm;
pub(crate) mod pause;
pub(crate) mod racks;
pub(crate) mod rolling;
pub(crate) mod safety;
pub(crate) mod stall;
pub(crate) mod steady;
pub(crate) mod throttle;
