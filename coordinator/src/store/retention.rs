//! Offsets retention, written once for every store (the rule is in the module
//! documentation of [`crate::store`]).
//!
//! A store keeps one *mark* per group (wall-clock ms since when the group has been idle
//! and empty) in tables of its own, implements [`IdleMarks`] over them, and passes every
//! record of a write through one [`Retention`] for that write. [`expired`] then names the
//! groups whose mark is older than the retention.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use super::StoreError;
use crate::core::Record;

/// A store's table of marks, as retention reads and changes it inside one write.
pub trait IdleMarks {
    /// Whether `group` is marked idle.
    fn marked(&self, group: &str) -> Result<bool, StoreError>;
    /// Marks `group` idle since `since_ms` (replacing an earlier mark).
    fn mark(&mut self, group: &str, since_ms: u64) -> Result<(), StoreError>;
    /// Clears `group`'s mark, if any.
    fn unmark(&mut self, group: &str) -> Result<(), StoreError>;
    /// Whether the store holds a snapshot of `group`.
    fn has_snapshot(&self, group: &str) -> Result<bool, StoreError>;
}

/// Retention's bookkeeping for the records of one write, all dated `now_ms`.
#[derive(Debug)]
pub struct Retention<'r> {
    now_ms: u64,
    /// Groups whose mark an offset commit of this write already renewed: every renewal
    /// of a write uses the same `now_ms`, so once is enough until a snapshot of the
    /// group changes the mark again.
    touched: HashSet<&'r str>,
}

impl<'r> Retention<'r> {
    /// Bookkeeping for a write at wall-clock `now`.
    pub fn new(now: SystemTime) -> Self {
        Self {
            now_ms: unix_ms(now),
            touched: HashSet::new(),
        }
    }

    /// Updates the marks for `record`, the next record of the write, in the order the
    /// records are written.
    pub fn apply(
        &mut self,
        record: &'r Record,
        marks: &mut impl IdleMarks,
    ) -> Result<(), StoreError> {
        match record {
            Record::Offset(offset) => {
                let group = offset.group.as_str();
                // Offsets still being committed are never purged: a commit renews the
                // mark of an empty group, and marks a group that has no snapshot
                // (offsets committed without membership).
                if self.touched.insert(group)
                    && (marks.marked(group)? || !marks.has_snapshot(group)?)
                {
                    marks.mark(group, self.now_ms)?;
                }
            }
            Record::Group(snapshot) => {
                let group = snapshot.group.as_str();
                self.touched.remove(group);
                if !snapshot.members.is_empty() {
                    marks.unmark(group)?;
                } else if !marks.marked(group)? {
                    // An empty group stays empty since the earlier time.
                    marks.mark(group, self.now_ms)?;
                }
            }
            Record::GroupDeleted { group } => {
                self.touched.remove(group.as_str());
                marks.unmark(group)?;
            }
        }
        Ok(())
    }
}

/// The groups among `marks` (group, marked since ms) idle for longer than `retention`
/// at wall-clock `now`, in the order given.
pub fn expired(
    marks: impl IntoIterator<Item = (String, u64)>,
    now: SystemTime,
    retention: Duration,
) -> Vec<String> {
    let now_ms = unix_ms(now);
    let retention_ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    marks
        .into_iter()
        .filter(|(_, since)| now_ms.saturating_sub(*since) > retention_ms)
        .map(|(group, _)| group)
        .collect()
}

/// A [`Record::GroupDeleted`] for each of `groups`.
pub(super) fn deletions(groups: &[String]) -> Vec<Record> {
    groups
        .iter()
        .map(|group| Record::GroupDeleted {
            group: group.clone(),
        })
        .collect()
}

/// Milliseconds since the UNIX epoch; 0 for times before it.
fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
