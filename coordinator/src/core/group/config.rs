//! What an operator sets per group (AlterGroupConfig), and where each member says it runs
//! and how much it can take (Join). Both steer the assignment; neither is needed: a
//! group nobody configured behaves as before.

use std::fmt;
use std::str::FromStr;

use super::super::config::UnknownName;

/// What the assignor balances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Balance {
    /// Partition counts, weighted by capacity (the default).
    #[default]
    Count,
    /// Reported per-partition load, weighted by capacity, within the churn budget.
    Load,
}

impl Balance {
    /// Every kind.
    pub const ALL: [Self; 2] = [Self::Count, Self::Load];

    /// The name configuration and output use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Count => "count",
            Self::Load => "load",
        }
    }
}

impl fmt::Display for Balance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Balance {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Self::ALL
            .into_iter()
            .find(|b| b.as_str() == s.trim())
            .ok_or_else(|| UnknownName::new("balance", s, Self::ALL))
    }
}

/// A group's operator settings. The default is the behaviour of a group nobody
/// configured: no departure delay, no cap on revocations, count balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupConfig {
    /// How long a departed static member's partitions stay reserved, unowned, for its
    /// instance to come back to (milliseconds; 0: off).
    pub departure_delay_ms: u32,
    /// At most this many partitions in revocation at once in the group (0: no cap).
    pub max_revoking: u32,
    /// At most this many partitions in revocation at once per member (0: no cap).
    pub max_revoking_per_member: u32,
    /// What the assignor balances.
    pub balance: Balance,
    /// Load balance: at most this share of the group's partitions (per mille) moved by a
    /// rebalance beyond those that must move (a departed owner's, a new topic's).
    pub churn_budget_permille: u16,
    /// Load balance: a load report triggers a rebalance only when the most loaded
    /// member's load per unit of capacity is this much (per mille) above the group's.
    pub imbalance_permille: u16,
}

impl GroupConfig {
    /// The default churn budget: a tenth of the partitions per rebalance.
    pub const DEFAULT_CHURN_BUDGET_PERMILLE: u16 = 100;
    /// The default imbalance threshold: 10 % above the mean.
    pub const DEFAULT_IMBALANCE_PERMILLE: u16 = 100;

    /// Whether this is the default (a group nobody configured).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            departure_delay_ms: 0,
            max_revoking: 0,
            max_revoking_per_member: 0,
            balance: Balance::Count,
            churn_budget_permille: Self::DEFAULT_CHURN_BUDGET_PERMILLE,
            imbalance_permille: Self::DEFAULT_IMBALANCE_PERMILLE,
        }
    }
}

/// Where a member runs and how much it can take, as it declared at join. Members that
/// declare none of it have none (`Member::placement` is `None`): a label and a rack of
/// "" and a capacity of 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    /// An operator's name for where the member runs (a host name): drains can select
    /// members by it. "" for none.
    pub(crate) label: Box<str>,
    /// The member's rack (zone). "" for none.
    pub(crate) rack: Box<str>,
    /// Its weight against the other members' (at least 1).
    pub(crate) capacity: u32,
}

impl Placement {
    /// A placement as declared (a capacity of 0 counts as 1), or `None` when it is
    /// the default.
    pub(crate) fn boxed(label: &str, rack: &str, capacity: u32) -> Option<Box<Self>> {
        let p = Self {
            label: label.into(),
            rack: rack.into(),
            capacity: capacity.max(1),
        };
        (p != Self::default()).then(|| Box::new(p))
    }
}

impl Default for Placement {
    fn default() -> Self {
        Self {
            label: "".into(),
            rack: "".into(),
            capacity: 1,
        }
    }
}
