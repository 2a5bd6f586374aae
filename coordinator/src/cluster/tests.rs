//! Tests of the cluster module: the plan (pure), and the etcd part against a real etcd
//! (skipped loudly without one).

mod chunks;
mod etcd;
mod harness;
mod pipeline;
mod plan;
