//! Join (API key 1, versions 0 to 3): join a group, or rejoin it with a known member
//! id; version 1 adds the lease timeout, version 2 the group's failure detector,
//! version 3 where the member runs (label, rack), its capacity and the preferred racks
//! of its topics' partitions.

use bytes::{BufMut, BytesMut};

use crate::wire::{put_count, put_opt_string, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// A topic a member subscribes to, with the partition count it believes the topic has.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicSubscription {
    /// Topic name.
    pub topic: String,
    /// Number of partitions (partitions are numbered `0..partitions`).
    pub partitions: u32,
}

/// Join a group, or rejoin it with a known member id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    /// Group to join; created by its first join.
    pub group: String,
    /// The member id from an earlier join, when rejoining after a lost connection.
    pub member_id: Option<String>,
    /// Static membership: a stable id for this process across restarts.
    pub instance_id: Option<String>,
    /// Free-form client name, shown by describe.
    pub client_id: String,
    /// Client-chosen nonzero token; a join retried with the same token (after a lost
    /// response) returns the same member instead of creating a second one.
    pub join_token: u64,
    /// Topics with the partition counts the member believes they have.
    pub subscription: Vec<TopicSubscription>,
    /// Session clock: silence longer than this expels the member.
    pub session_timeout_ms: u32,
    /// Progress clock: no advance of the progress counter for this long expels the member.
    pub progress_timeout_ms: u32,
    /// How long the member may take to acknowledge a revocation.
    pub rebalance_timeout_ms: u32,
    /// Lease clock: how long the member may act on its partitions after the last
    /// acknowledged heartbeat it sent, and how long after the member's last frame the
    /// coordinator grants the partitions of a member it expelled (or whose connection
    /// closed). At most the session timeout. `0` means "the session timeout"; it is
    /// sent at version 0, which has no such field, and any other value needs version 1.
    pub lease_timeout_ms: u32,
    /// The failure detector the group is to judge its members' silence with (`fixed`,
    /// `adaptive`). Empty: the coordinator's default for a new group, whatever the group
    /// uses for an existing one. Any other value needs version 2.
    pub detector: String,
    /// Where the member runs and how much it can take (version 3). `None`: nothing
    /// declared (sent at a lower version). Boxed to keep [`Request`](crate::Request)
    /// small.
    pub placement: Option<Box<JoinPlacement>>,
}

/// What a member declares at join about where it runs and how much it can take (Join
/// version 3). Every field may be left at its default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinPlacement {
    /// An operator's name for where the member runs (a host name), by which a drain can
    /// select it. Empty: none.
    pub label: String,
    /// The member's rack (zone). Empty: none.
    pub rack: String,
    /// Its weight against the other members'. 0: undeclared, counted as 1.
    pub capacity: u32,
    /// Preferred racks of the partitions of topics of the subscription.
    pub topic_racks: Vec<TopicRacks>,
}

/// The preferred rack of each partition of a topic (Join version 3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicRacks {
    /// A topic of the subscription.
    pub topic: String,
    /// `racks[i]`: the preferred rack of partition `i` ("" for none); as many as the
    /// subscription gives the topic partitions.
    pub racks: Vec<String>,
}

impl JoinRequest {
    /// The lowest version that can carry the request.
    pub(crate) fn version(&self) -> u16 {
        if self.placement.is_some() {
            3
        } else if !self.detector.is_empty() {
            2
        } else {
            u16::from(self.lease_timeout_ms != 0)
        }
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        put_opt_string(buf, self.member_id.as_deref())?;
        put_opt_string(buf, self.instance_id.as_deref())?;
        put_string(buf, &self.client_id)?;
        buf.put_u64(self.join_token);
        put_count(buf, self.subscription.len())?;
        for s in &self.subscription {
            put_string(buf, &s.topic)?;
            buf.put_u32(s.partitions);
        }
        buf.put_u32(self.session_timeout_ms);
        buf.put_u32(self.progress_timeout_ms);
        buf.put_u32(self.rebalance_timeout_ms);
        let version = self.version();
        if version >= 1 {
            buf.put_u32(self.lease_timeout_ms);
        }
        if version >= 2 {
            put_string(buf, &self.detector)?;
        }
        if let Some(p) = self.placement.as_deref() {
            put_string(buf, &p.label)?;
            put_string(buf, &p.rack)?;
            buf.put_u32(p.capacity);
            put_count(buf, p.topic_racks.len())?;
            for t in &p.topic_racks {
                put_string(buf, &t.topic)?;
                put_count(buf, t.racks.len())?;
                for rack in &t.racks {
                    put_string(buf, rack)?;
                }
            }
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            member_id: r.opt_string("member id")?,
            instance_id: r.opt_string("instance id")?,
            client_id: r.string("client id")?,
            join_token: r.u64("join token")?,
            subscription: r.array("subscription", 6, |r| {
                Ok(TopicSubscription {
                    topic: r.string("topic")?,
                    partitions: r.u32("partition count")?,
                })
            })?,
            session_timeout_ms: r.u32("session timeout")?,
            progress_timeout_ms: r.u32("progress timeout")?,
            rebalance_timeout_ms: r.u32("rebalance timeout")?,
            lease_timeout_ms: if version >= 1 {
                r.u32("lease timeout")?
            } else {
                0
            },
            detector: if version >= 2 {
                r.string("detector")?
            } else {
                String::new()
            },
            placement: if version >= 3 {
                Some(Box::new(JoinPlacement {
                    label: r.string("label")?,
                    rack: r.string("rack")?,
                    capacity: r.u32("capacity")?,
                    topic_racks: r.array("topic racks", 6, |r| {
                        Ok(TopicRacks {
                            topic: r.string("topic")?,
                            racks: r.array("racks", 2, |r| r.string("rack"))?,
                        })
                    })?,
                }))
            } else {
                None
            },
        })
    }
}

/// The answer to a join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResponse {
    /// The member's id (fresh, or the one the same join token received before).
    pub member_id: String,
    /// The group's generation at the time of the join. The member's first assignment
    /// follows by push.
    pub generation: u32,
    /// The heartbeat interval the coordinator suggests.
    pub heartbeat_interval_ms: u32,
}

impl JoinResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.member_id)?;
        buf.put_u32(self.generation);
        buf.put_u32(self.heartbeat_interval_ms);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            member_id: r.string("member id")?,
            generation: r.u32("generation")?,
            heartbeat_interval_ms: r.u32("heartbeat interval")?,
        })
    }
}
