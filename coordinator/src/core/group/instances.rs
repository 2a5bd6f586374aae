//! Static instances: every instance that ever joined a group, with its latest
//! incarnation, so that older incarnations are fenced across restarts.

use std::sync::Arc;

use rollcall_protocol::ExpelReason;

use super::Group;

/// The latest incarnation of a static instance. Kept (and made durable) after that
/// member leaves or is expelled, so that a request naming any older incarnation is
/// fenced, across restarts and however many replacements there were.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    /// Incarnations of the instance so far; the latest is number `epoch`.
    pub(crate) epoch: u64,
    /// The latest incarnation's member id.
    pub(crate) member_id: Arc<str>,
    /// The latest incarnation's join token.
    pub(crate) token: u64,
    /// Join tokens of the most recent older incarnations, newest last: a join retried
    /// with one of them (its response was lost, and newer processes have joined since)
    /// comes from a superseded process and is fenced.
    pub(crate) fenced_tokens: Vec<u64>,
}

/// How many superseded join tokens each static instance remembers.
pub(crate) const FENCED_TOKENS: usize = 16;

/// The instance id a static member id names: static member ids are
/// `<instance id>#<unique suffix>`, and suffixes never contain `#`.
pub(crate) fn instance_of(member_id: &str) -> Option<&str> {
    member_id.rfind('#').map(|i| &member_id[..i])
}

impl Group {
    /// The member that is the current incarnation of `instance`, if it is in the group.
    pub(crate) fn instance_member(&self, instance: &str) -> Option<Arc<str>> {
        self.instances
            .get(instance)
            .filter(|i| self.members.contains_key(&i.member_id))
            .map(|i| i.member_id.clone())
    }

    /// Records a new incarnation of `instance` and returns its epoch.
    pub(crate) fn register_instance(
        &mut self,
        instance: &str,
        member_id: Arc<str>,
        token: u64,
    ) -> u64 {
        let (epoch, mut fenced_tokens) = match self.instances.remove(instance) {
            Some(old) => {
                let mut fenced = old.fenced_tokens;
                fenced.push(old.token);
                let excess = fenced.len().saturating_sub(FENCED_TOKENS);
                fenced.drain(..excess);
                (old.epoch + 1, fenced)
            }
            None => (1, Vec::new()),
        };
        fenced_tokens.retain(|t| *t != token);
        self.instances.insert(
            instance.to_owned(),
            Instance {
                epoch,
                member_id,
                token,
                fenced_tokens,
            },
        );
        self.snapshot_dirty = true;
        epoch
    }

    /// Whether a join for `instance` with `token` retries the join of a superseded
    /// incarnation.
    pub(crate) fn token_fenced(&self, instance: &str, token: u64) -> bool {
        self.instances
            .get(instance)
            .is_some_and(|i| i.fenced_tokens.contains(&token))
    }

    /// Why a member id that is not in the group is gone, if known: a static member id
    /// older than its instance's latest incarnation is fenced, whatever else is known.
    pub(crate) fn gone_reason(&self, member_id: &str) -> Option<ExpelReason> {
        if let Some(latest) = instance_of(member_id).and_then(|i| self.instances.get(i)) {
            if &*latest.member_id != member_id {
                return Some(ExpelReason::Fenced);
            }
        }
        self.removed.get(member_id).copied()
    }
}
