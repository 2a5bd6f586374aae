//! Unit tests of each guard, one file per guard, against a core driven by
//! [`TestContext`](crate::core::tests::TestContext) (scenarios across guards are in
//! `core/tests/defects/` (`pause.rs`, `isolation.rs`, `backlog.rs`)).

mod backlog;
mod bound;
mod isolation;
mod pause;
mod rate_limit;

use std::time::{Duration, Instant};

use crate::core::group::Member;
use crate::core::tests::{TestContext, M};

const MS: Duration = Duration::from_millis(1);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The core's view of `m`.
fn member<'a>(t: &'a TestContext, m: &M) -> &'a Member {
    t.core.groups[m.group.as_str()]
        .members
        .get(&m.id)
        .expect("a member")
}

/// The core's view of `m`, to change.
fn member_mut<'a>(t: &'a mut TestContext, m: &M) -> &'a mut Member {
    t.core
        .groups
        .get_mut(m.group.as_str())
        .and_then(|g| g.members.get_mut(&m.id))
        .expect("a member")
}

/// A member of group "g" on connection `conn`, and when it was last heard.
fn joined(t: &mut TestContext, conn: u64) -> (M, Instant) {
    let m = t.join(conn, "g", &[("orders", 4)]);
    let heard = member(t, &m).heard_at;
    (m, heard)
}
