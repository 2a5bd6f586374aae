//! Members and the connections they talk over: binding, a connection closing, and
//! Join answers leaving the coordinator.

use std::time::Instant;

use super::super::{ConnId, Coordinator};

impl Coordinator {
    /// Connection `conn` closed. Its members may resume on another connection within
    /// their lease; one that does not is expelled when its lease runs out, without
    /// waiting for its session deadline (a crashed process closes its sockets).
    ///
    /// Costs O(members that were bound to `conn`), not O(members).
    pub fn handle_disconnect(&mut self, now: Instant, conn: ConnId) {
        if self.tick(now) {
            self.detect_pause(now);
        }
        let bound = self.bound.remove(&conn).unwrap_or_default();
        self.beat_slots.remove(&conn);
        let (groups, mut ctx) = self.parts(now);
        for (group, member) in bound {
            let Some(g) = groups.get_mut(&group) else {
                continue;
            };
            let Some(m) = g.members.get_mut(&member) else {
                continue;
            };
            if m.conn == Some(conn) {
                if let Some(trace) = super::super::trace::live(&mut g.trace, now) {
                    trace.closed(now, &m.id);
                }
                m.conn = None;
                m.conn_closed = true;
                g.schedule_member(&mut ctx, &member);
            }
        }
    }

    /// The answers to the Joins of `joined` (group, member id) left the coordinator at
    /// `at`, after their records were durable. A member cannot speak before its answer
    /// reaches it, so its session counts from then: a durable store that is slow to
    /// confirm does not expel the members it has just let in. (The lease is not moved:
    /// it was promised from the request.)
    pub fn answers_released(&mut self, at: Instant, joined: &[(String, String)]) {
        if self.tick(at) {
            self.detect_pause(at);
        }
        for (group, member) in joined {
            let Some(m) = self
                .groups
                .get_mut(group.as_str())
                .and_then(|g| g.members.get_mut(member.as_str()))
            else {
                continue;
            };
            m.renew_session(at);
            // Nor can it have made progress: a member that has reported none yet gets
            // its progress timeout from then too.
            if m.progress == 0 && at > m.last_progress_at {
                m.last_progress_at = at;
                m.progress_deadline = m.progress_deadline.max(at + m.progress_timeout());
            }
        }
    }

    /// Records that `member` of `group` now talks over `conn`.
    pub(in crate::core) fn bind(&mut self, conn: ConnId, group: &str, member: &str) {
        let Some(g) = self.groups.get(group) else {
            return;
        };
        let Some((id, _)) = g.members.get_key_value(member) else {
            return;
        };
        let entry = (g.name.clone(), id.clone());
        let list = self.bound.entry(conn).or_default();
        list.push(entry);
        // A long-lived connection whose members come and go would pile up stale
        // entries; drop them whenever the list doubles.
        if list.len() >= 64 && list.len().is_power_of_two() {
            let groups = &self.groups;
            list.retain(|(group, member)| {
                groups
                    .get(group)
                    .and_then(|g| g.members.get(member))
                    .is_some_and(|m| m.conn == Some(conn))
            });
        }
    }
}
