//! Unit tests of each guard.
