//! Cluster mode (feature `cluster`): slots owned through etcd, their state kept in etcd.
//!
//! (Module documentation: see the end of this step's work.)

pub mod testing;

#[cfg(test)]
mod tests;
