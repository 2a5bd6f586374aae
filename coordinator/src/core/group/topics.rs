//! The group's topic table: the topics its members subscribe to, interned by index,
//! with the partition counts and the footprint the quotas count.

use std::sync::Arc;

use rollcall_protocol::TopicPartitions;

use super::super::assignor::TopicPartition;
use super::super::{CoreConfig, Quota};
use super::{Group, Member, Refusal};

#[derive(Debug)]
pub(crate) struct Topic {
    pub(crate) name: String,
    pub(crate) partitions: u32,
    /// Members subscribing to it; a topic with none is no longer part of the work.
    pub(crate) subscribers: u32,
    /// The preferred rack of each partition (the last join that declared them wins;
    /// durable). "" for none.
    pub(crate) preferred_racks: Option<Box<[Box<str>]>>,
}

impl Group {
    /// Checks a subscription against the topic table without changing anything: the
    /// partition counts must agree with the topics' other subscribers, and the group's
    /// partitions (see [`Usage::partitions`]) may grow to at most
    /// `max_partitions_per_group`, and to at most `room` (what the coordinator's
    /// partition quota leaves it). `replacing` is the member whose subscription this one
    /// replaces (a rejoin, or a static member's replacement). Returns the group's
    /// partitions once subscribed.
    pub(crate) fn check_subscription(
        &self,
        subscription: &[(String, u32)],
        config: &CoreConfig,
        replacing: Option<&Member>,
        room: u64,
    ) -> Result<u64, Refusal> {
        let mine = |idx: u32| replacing.is_some_and(|m| m.subscription.binary_search(&idx).is_ok());
        let mut after = self.footprint;
        for (name, count) in subscription {
            let count = u64::from(*count);
            match self.topic_index.get(name) {
                Some(&idx) => {
                    let topic = &self.topics[idx as usize];
                    let others = topic.subscribers.saturating_sub(u32::from(mine(idx)));
                    if others > 0 && u64::from(topic.partitions) != count {
                        return Err(Refusal {
                            code: rollcall_protocol::ErrorCode::InconsistentSubscription,
                            message: format!(
                                "topic {name:?} has {} partitions in group {:?}, the join declares {count}",
                                topic.partitions, &*self.name
                            ),
                            quota: None,
                        });
                    }
                    if others == 0 {
                        // Counted now as one (no subscriber) or as its partitions (only
                        // the replaced member's); counted as `count` once subscribed.
                        after = after - Self::charge(topic) + count;
                    }
                }
                None => after += count,
            }
        }
        // Topics only the replaced member subscribes to, and this subscription does not
        // name, fall to one each.
        if let Some(m) = replacing {
            for &idx in &m.subscription {
                let topic = &self.topics[idx as usize];
                if topic.subscribers == 1 && !subscription.iter().any(|(n, _)| *n == topic.name) {
                    after = after - Self::charge(topic) + 1;
                }
            }
        }
        if after > self.footprint {
            let max = u64::from(config.max_partitions_per_group);
            if after > max {
                return Err(Refusal {
                    code: rollcall_protocol::ErrorCode::TooManyPartitions,
                    message: format!(
                        "group {:?} would have {after} partitions, more than the maximum of {max}{}",
                        &*self.name,
                        if self.topics.iter().any(|t| t.subscribers == 0) {
                            " (a topic no member subscribes to any more counts as one)"
                        } else {
                            ""
                        }
                    ),
                    quota: Some(Quota::GroupPartitions),
                });
            }
            if after > room {
                return Err(Refusal {
                    code: rollcall_protocol::ErrorCode::TooManyPartitions,
                    message: format!(
                        "the coordinator has its maximum of {} partitions over all groups; group {:?} would need {} more",
                        config.max_partitions,
                        &*self.name,
                        after - self.footprint
                    ),
                    quota: Some(Quota::Partitions),
                });
            }
        }
        Ok(after)
    }

    /// What a topic adds to the group's partitions: its partitions while a member
    /// subscribes to it, one otherwise.
    fn charge(topic: &Topic) -> u64 {
        if topic.subscribers > 0 {
            u64::from(topic.partitions)
        } else {
            1
        }
    }

    /// Counts the group's partitions from its topic table (after a restore).
    pub(crate) fn recount_footprint(&mut self) {
        self.footprint = self.topics.iter().map(Self::charge).sum();
    }

    /// Interns a subscription's topics (after `check_subscription`) and counts the new
    /// subscriber. Returns the ascending topic indexes.
    pub(crate) fn subscribe(&mut self, subscription: &[(String, u32)]) -> Vec<u32> {
        let mut out = Vec::with_capacity(subscription.len());
        for (name, count) in subscription {
            let (idx, before) = match self.topic_index.get(name) {
                Some(&idx) => (idx, Self::charge(&self.topics[idx as usize])),
                None => {
                    let idx = self.topics.len() as u32;
                    self.topics.push(Topic {
                        name: name.clone(),
                        partitions: *count,
                        subscribers: 0,
                        preferred_racks: None,
                    });
                    self.topic_index.insert(name.clone(), idx);
                    (idx, 0)
                }
            };
            let topic = &mut self.topics[idx as usize];
            if topic.subscribers == 0 {
                topic.partitions = *count;
            }
            topic.subscribers += 1;
            self.footprint = self.footprint - before + Self::charge(topic);
            out.push(idx);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Drops a member's subscription from the topic counts (before it is replaced by a
    /// new one) and returns it.
    pub(crate) fn unsubscribe_for_replacement(&mut self, id: &Arc<str>) -> Vec<u32> {
        let Some(m) = self.members.get_mut(id) else {
            return Vec::new();
        };
        let subscription = std::mem::take(&mut m.subscription);
        self.unsubscribe(&subscription);
        subscription.into_vec()
    }

    pub(crate) fn unsubscribe(&mut self, subscription: &[u32]) {
        for &idx in subscription {
            let t = &mut self.topics[idx as usize];
            let before = Self::charge(t);
            t.subscribers = t.subscribers.saturating_sub(1);
            self.footprint = self.footprint - before + Self::charge(t);
        }
    }

    /// Whether `m` subscribes to exactly `subscription` (names and partition counts, in
    /// any order).
    pub(crate) fn subscription_is(&self, m: &Member, subscription: &[(String, u32)]) -> bool {
        let mut have: Vec<(&str, u32)> = m
            .subscription
            .iter()
            .map(|&t| {
                let topic = &self.topics[t as usize];
                (topic.name.as_str(), topic.partitions)
            })
            .collect();
        let mut wanted: Vec<(&str, u32)> =
            subscription.iter().map(|(n, c)| (n.as_str(), *c)).collect();
        have.sort_unstable();
        wanted.sort_unstable();
        have == wanted
    }

    pub(crate) fn resolve(&self, topic: &str, partition: u32) -> Option<TopicPartition> {
        let idx = *self.topic_index.get(topic)?;
        Some(TopicPartition {
            topic: idx,
            partition,
        })
    }

    /// Converts partitions to the wire form, grouped by topic name.
    pub(crate) fn to_wire<'a>(
        &self,
        partitions: impl IntoIterator<Item = &'a TopicPartition>,
    ) -> Vec<TopicPartitions> {
        let mut out: Vec<TopicPartitions> = Vec::new();
        let mut current: Option<u32> = None;
        for tp in partitions {
            if current != Some(tp.topic) {
                current = Some(tp.topic);
                out.push(TopicPartitions {
                    topic: self.topics[tp.topic as usize].name.clone(),
                    partitions: Vec::new(),
                });
            }
            if let Some(last) = out.last_mut() {
                last.partitions.push(tp.partition);
            }
        }
        out
    }
}
