//! What tests outside the crate need to drive a membership themselves (the `testing`
//! feature): a constructor from a [`MemberConfig`], and where the membership stands.

use super::*;
use crate::config::MemberConfig;
use crate::error::ConfigError;

/// Where a membership stands, as [`Membership::stage`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Joining (or rejoining) the group.
    Joining,
    /// A member.
    Active,
    /// A member that has started to leave (its leave may be sent already).
    Leaving,
    /// Expelled for lack of progress; rejoins once the application makes progress.
    AwaitingProgress,
    /// Left, or failed fatally. Events and a Relinquish may still be pending.
    Finished,
}

impl Membership {
    /// A member about to join with `config`, as [`Client::join`](crate::Client::join)
    /// creates it, with its randomness seeded by `seed`.
    pub fn for_config(
        config: &MemberConfig,
        backoff: BackoffConfig,
        seed: u64,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        Ok(Self::new(config.resolve()?, backoff, seed, now))
    }

    /// Makes the first join name `member_id`, as a rejoin after a lease expiry does: the
    /// coordinator takes it as that member if it still knows it, and the member joins
    /// afresh otherwise. No client process does this on its own; a test uses it to play
    /// a process that restarts its membership with other settings under the same id.
    pub fn rejoining_as(mut self, member_id: String) -> Self {
        if let Phase::Joining(j) = &mut self.phase {
            j.member_id = Some(member_id);
        }
        self
    }

    /// Where the membership stands.
    pub fn stage(&self) -> Stage {
        match self.phase {
            Phase::Joining(_) => Stage::Joining,
            Phase::Active if self.leaving.is_some() => Stage::Leaving,
            Phase::Active => Stage::Active,
            Phase::AwaitingProgress { .. } => Stage::AwaitingProgress,
            Phase::Finished => Stage::Finished,
        }
    }
}
