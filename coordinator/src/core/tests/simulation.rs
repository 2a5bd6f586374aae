//! Randomised schedules checked against the core's invariants.
