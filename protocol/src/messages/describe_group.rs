//! DescribeGroup (API key 7, versions 0 to 4): one group's members, their liveness and
//! partitions; version 1 adds how the group's detector judges each member, version 2
//! describes the members a page at a time, version 3 adds what the detector has learned
//! from all the members' gaps together and on what basis each member would be expelled,
//! version 4 the operator's view: the group's settings, drains and reservations, and
//! each member's placement, drained state and load.

use bytes::{BufMut, BytesMut};

use super::list_groups::decode_state;
use super::{decode_tps, encode_tps, GroupSettings, GroupState, Page, TopicPartitions};
use crate::wire::{put_bool, put_count, put_opt_string, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Describe one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeGroupRequest {
    /// The group.
    pub group: String,
    /// Ask for the detection details of the group and each member (version 1; the
    /// body is the same as version 0's). Version 2 always has them: a request with a
    /// `page` is sent at version 2 and decodes with `detection` set.
    pub detection: bool,
    /// Version 2: a page of the members, by member id (the cursor is the last member
    /// id of the previous page). `None`: every member, in one answer.
    pub page: Option<Page<String>>,
    /// Version 3 (with a `page`; its body is version 2's): also the group's detection
    /// summary and each member's expel basis. Without a page it changes nothing: the
    /// request goes at version 0 or 1.
    pub summary: bool,
    /// Version 4 (with a `page`; its body is version 2's): everything version 3 has,
    /// and the operator's view of the group and of each member. Without a page it
    /// changes nothing.
    pub operator: bool,
}

impl DescribeGroupRequest {
    /// The lowest version that can carry the request.
    pub(crate) fn version(&self) -> u16 {
        if self.page.is_some() {
            if self.operator {
                4
            } else if self.summary {
                3
            } else {
                2
            }
        } else {
            u16::from(self.detection)
        }
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        if let Some(page) = &self.page {
            put_opt_string(buf, page.after.as_deref())?;
            buf.put_u32(page.limit);
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let group = r.string("group")?;
        let page = if version >= 2 {
            Some(Page {
                after: r.opt_string("after")?,
                limit: r.u32("limit")?,
            })
        } else {
            None
        };
        Ok(Self {
            group,
            detection: version >= 1,
            page,
            summary: version >= 3,
            operator: version >= 4,
        })
    }
}

/// How a group judges its members' silence (DescribeGroup version 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDetection {
    /// The detector that acts: `fixed` or `adaptive`.
    pub detector: String,
    /// The detector run in shadow (reported, never acted on), if any.
    pub shadow: Option<String>,
    /// What the detector has learned from all the members' gaps (version 3 only).
    pub summary: Option<DetectionSummary>,
}

/// What a group's detector has learned from all its members' heartbeat gaps together
/// (DescribeGroup version 3): the figures the timeout advisor works from. A gap
/// *normalised* is measured in its own member's mean gap, so that members of different
/// rhythms pool; `_centi` fields are in hundredths of that mean.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DetectionSummary {
    /// Gaps learned by all the members together since the group's record began (it is
    /// not durable: it begins again when the group is loaded).
    pub pooled_gaps: u64,
    /// Milliseconds since the group's record began.
    pub span_ms: u64,
    /// Pooled gaps since the last proven long gap (a beat that ended a long silence, a
    /// jump in sequence numbers, or a beat from a member expelled for silence).
    pub clean_gaps: u64,
    /// The median of the members' median gaps, milliseconds.
    pub gap_median_ms: u32,
    /// The longest gap the members remember, milliseconds.
    pub gap_longest_ms: u32,
    /// The longest normalised gap, hundredths of its member's mean gap.
    pub longest_centi: u32,
    /// The gaps `tail` and `exceedances` count among (recent gaps weigh most: the
    /// counts halve as they age, and this with them).
    pub tail_gaps: u64,
    /// The threshold of the tail fit, hundredths of the member's mean gap.
    pub threshold_centi: u32,
    /// Gaps above the threshold.
    pub exceedances: u64,
    /// Shape ξ of the generalised Pareto fit of the gaps above the threshold, in
    /// thousandths (0 with fewer than 30 exceedances: no fit).
    pub shape_milli: i32,
    /// Its scale σ, hundredths of the member's mean gap (0 without a fit).
    pub scale_centi: u32,
    /// Runs of lost beats (jumps in the sequence numbers).
    pub loss_runs: u64,
    /// Beats lost in those runs.
    pub lost_beats: u64,
    /// How many of the `tail_gaps` were longer than each normalised length, shortest
    /// length first.
    pub tail: Vec<TailCount>,
}

impl DetectionSummary {
    /// Encoded size without the tail counts, bytes.
    const FIXED_SIZE: usize = 8 * 3 + 4 * 3 + 8 + 4 + 8 + 4 + 4 + 8 * 2 + 4;

    /// Encoded size, bytes.
    pub fn encoded_len(&self) -> usize {
        Self::encoded_len_of(self.tail.len())
    }

    /// Encoded size of a summary with `tail` tail counts, bytes.
    pub const fn encoded_len_of(tail: usize) -> usize {
        Self::FIXED_SIZE + TailCount::SIZE * tail
    }

    fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        buf.put_u64(self.pooled_gaps);
        buf.put_u64(self.span_ms);
        buf.put_u64(self.clean_gaps);
        buf.put_u32(self.gap_median_ms);
        buf.put_u32(self.gap_longest_ms);
        buf.put_u32(self.longest_centi);
        buf.put_u64(self.tail_gaps);
        buf.put_u32(self.threshold_centi);
        buf.put_u64(self.exceedances);
        buf.put_i32(self.shape_milli);
        buf.put_u32(self.scale_centi);
        buf.put_u64(self.loss_runs);
        buf.put_u64(self.lost_beats);
        put_count(buf, self.tail.len())?;
        for t in &self.tail {
            buf.put_u32(t.over_centi);
            buf.put_u64(t.gaps);
        }
        Ok(())
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            pooled_gaps: r.u64("pooled gaps")?,
            span_ms: r.u64("span")?,
            clean_gaps: r.u64("clean gaps")?,
            gap_median_ms: r.u32("gap median")?,
            gap_longest_ms: r.u32("gap longest")?,
            longest_centi: r.u32("longest normalised gap")?,
            tail_gaps: r.u64("tail gaps")?,
            threshold_centi: r.u32("tail threshold")?,
            exceedances: r.u64("exceedances")?,
            // The wire's two's complement: the cast only reinterprets the bits.
            shape_milli: r.u32("tail shape")? as i32,
            scale_centi: r.u32("tail scale")?,
            loss_runs: r.u64("loss runs")?,
            lost_beats: r.u64("lost beats")?,
            tail: r.array("tail", TailCount::SIZE, |r| {
                Ok(TailCount {
                    over_centi: r.u32("tail length")?,
                    gaps: r.u64("tail gaps longer")?,
                })
            })?,
        })
    }
}

/// How many gaps were longer than a normalised length (DescribeGroup version 3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TailCount {
    /// The length, hundredths of the member's mean gap.
    pub over_centi: u32,
    /// Gaps longer than it.
    pub gaps: u64,
}

impl TailCount {
    /// Encoded size, bytes.
    pub const SIZE: usize = 4 + 8;
}

/// What a member's expulsion deadline rests on (DescribeGroup version 3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ExpelBasis {
    /// Too few gaps to judge by: the session timeout.
    #[default]
    Young,
    /// The group has shown no long gap for long enough: the fit of the member's
    /// recent gaps.
    Clean,
    /// The group's long gaps: the earliest silence its tail fit makes rare enough.
    Tail,
    /// The session timeout: the fixed detector, or a tail that allows nothing earlier.
    Session,
}

impl ExpelBasis {
    /// Wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::Young => 0,
            Self::Clean => 1,
            Self::Tail => 2,
            Self::Session => 3,
        }
    }

    /// From wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Young,
            1 => Self::Clean,
            2 => Self::Tail,
            3 => Self::Session,
            _ => return None,
        })
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Young => "young",
            Self::Clean => "clean",
            Self::Tail => "tail",
            Self::Session => "session",
        }
    }
}

/// How the group's detector judges one member (DescribeGroup version 1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberDetection {
    /// Milliseconds the member has been in its liveness state.
    pub in_state_ms: u64,
    /// Suspicion level of the current silence, φ = −log10 of the chance that a
    /// healthy member's heartbeat gap is that long, in hundredths (0 while the member
    /// has too few gaps to judge by).
    pub phi_centi: u32,
    /// The silence after which the member is suspect, milliseconds.
    pub suspect_after_ms: u32,
    /// The silence after which it is expelled, milliseconds.
    pub expel_after_ms: u32,
    /// Heartbeat gaps learned.
    pub gaps: u32,
    /// Heartbeats sent that never arrived (gaps in sequence numbers).
    pub beats_lost: u64,
    /// Heartbeats that arrived after a silence past the suspicion threshold.
    pub beats_late: u64,
    /// Heartbeat gap percentiles over the last 512 to 1,024 gaps, milliseconds.
    pub gap_p50_ms: u32,
    /// 99th percentile gap.
    pub gap_p99_ms: u32,
    /// 99.9th percentile gap.
    pub gap_p999_ms: u32,
    /// Longest gap remembered.
    pub gap_max_ms: u32,
    /// What the expulsion deadline rests on (version 3 only).
    pub expel_basis: Option<ExpelBasis>,
}

impl MemberDetection {
    /// Encoded size at versions 1 and 2, bytes (version 3 adds the expel basis, 1 byte).
    pub const SIZE: usize = 8 + 4 * 4 + 8 + 8 + 4 * 4;

    fn encode(&self, buf: &mut BytesMut) {
        buf.put_u64(self.in_state_ms);
        buf.put_u32(self.phi_centi);
        buf.put_u32(self.suspect_after_ms);
        buf.put_u32(self.expel_after_ms);
        buf.put_u32(self.gaps);
        buf.put_u64(self.beats_lost);
        buf.put_u64(self.beats_late);
        buf.put_u32(self.gap_p50_ms);
        buf.put_u32(self.gap_p99_ms);
        buf.put_u32(self.gap_p999_ms);
        buf.put_u32(self.gap_max_ms);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            in_state_ms: r.u64("in state")?,
            phi_centi: r.u32("phi")?,
            suspect_after_ms: r.u32("suspect after")?,
            expel_after_ms: r.u32("expel after")?,
            gaps: r.u32("gaps")?,
            beats_lost: r.u64("beats lost")?,
            beats_late: r.u64("beats late")?,
            gap_p50_ms: r.u32("gap p50")?,
            gap_p99_ms: r.u32("gap p99")?,
            gap_p999_ms: r.u32("gap p99.9")?,
            gap_max_ms: r.u32("gap max")?,
            expel_basis: None,
        })
    }
}

/// The operator's view of one member (DescribeGroup version 4).
#[derive(Debug, Clone, Default)]
pub struct MemberOperator {
    /// The label it declared at join ("" for none).
    pub label: String,
    /// Its rack ("" for none).
    pub rack: String,
    /// Its capacity (1 when it declared none).
    pub capacity: u32,
    /// Whether it is drained (by its id, its instance or its label).
    pub drained: bool,
    /// The sum of the loads it last reported for the partitions it owns.
    pub load: f64,
}

/// Loads compare by their bits, so equality is total (a NaN equals itself, and a
/// decoded load equals what was encoded).
impl PartialEq for MemberOperator {
    fn eq(&self, other: &Self) -> bool {
        self.label == other.label
            && self.rack == other.rack
            && self.capacity == other.capacity
            && self.drained == other.drained
            && self.load.to_bits() == other.load.to_bits()
    }
}

impl Eq for MemberOperator {}

impl MemberOperator {
    /// Encoded size, bytes.
    pub fn encoded_len(&self) -> usize {
        2 + self.label.len() + 2 + self.rack.len() + 4 + 1 + 8
    }

    fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.label)?;
        put_string(buf, &self.rack)?;
        buf.put_u32(self.capacity);
        put_bool(buf, self.drained);
        buf.put_f64(self.load);
        Ok(())
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            label: r.string("label")?,
            rack: r.string("rack")?,
            capacity: r.u32("capacity")?,
            drained: r.bool("drained")?,
            load: f64::from_bits(r.u64("load")?),
        })
    }
}

/// Partitions kept, unowned, for a departed static member's instance to come back to
/// (DescribeGroup version 4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reservation {
    /// The instance they wait for.
    pub instance_id: String,
    /// The member of that instance they were taken from.
    pub member_id: String,
    /// How many partitions.
    pub partitions: u32,
    /// Milliseconds until the reservation ends and they move.
    pub remaining_ms: u32,
}

impl Reservation {
    /// Encoded size, bytes.
    pub fn encoded_len(&self) -> usize {
        2 + self.instance_id.len() + 2 + self.member_id.len() + 4 + 4
    }
}

/// The operator's view of a group (DescribeGroup version 4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupOperator {
    /// Its settings.
    pub config: GroupSettings,
    /// The labels drained: a member that joins with one is drained at once.
    pub drained_labels: Vec<String>,
    /// Partitions reserved for departed static members.
    pub reservations: Vec<Reservation>,
}

impl GroupOperator {
    /// Encoded size, bytes.
    pub fn encoded_len(&self) -> usize {
        GroupSettings::SIZE
            + 4
            + self
                .drained_labels
                .iter()
                .map(|l| 2 + l.len())
                .sum::<usize>()
            + 4
            + self
                .reservations
                .iter()
                .map(Reservation::encoded_len)
                .sum::<usize>()
    }

    fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        self.config.encode(buf);
        put_count(buf, self.drained_labels.len())?;
        for l in &self.drained_labels {
            put_string(buf, l)?;
        }
        put_count(buf, self.reservations.len())?;
        for res in &self.reservations {
            put_string(buf, &res.instance_id)?;
            put_string(buf, &res.member_id)?;
            buf.put_u32(res.partitions);
            buf.put_u32(res.remaining_ms);
        }
        Ok(())
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            config: GroupSettings::decode(r)?,
            drained_labels: r.array("drained labels", 2, |r| r.string("label"))?,
            reservations: r.array("reservations", 12, |r| {
                Ok(Reservation {
                    instance_id: r.string("instance id")?,
                    member_id: r.string("member id")?,
                    partitions: r.u32("partitions")?,
                    remaining_ms: r.u32("remaining")?,
                })
            })?,
        })
    }
}

/// How the coordinator judges a member's liveness right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// Heard from recently.
    Alive,
    /// Silent for longer than usual but not yet past its deadline.
    Suspect,
}

impl Liveness {
    /// Wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::Alive => 0,
            Self::Suspect => 1,
        }
    }

    /// From wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Alive,
            1 => Self::Suspect,
            _ => return None,
        })
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Alive => "alive",
            Self::Suspect => "suspect",
        }
    }
}

/// One member as described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id.
    pub member_id: String,
    /// Static instance id, if any.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Liveness.
    pub liveness: Liveness,
    /// Milliseconds since the last frame from the member.
    pub since_heartbeat_ms: u64,
    /// Milliseconds since the member's progress counter last advanced.
    pub since_progress_ms: u64,
    /// Partitions the member owns (including those pending revocation).
    pub owned: Vec<TopicPartitions>,
    /// Owned partitions the member has been asked to release.
    pub pending_revoke: Vec<TopicPartitions>,
    /// Partitions assigned to the member that wait for their previous owner to release them.
    pub pending_grant: Vec<TopicPartitions>,
    /// How the detector judges it (version 1 only).
    pub detection: Option<MemberDetection>,
    /// The operator's view of it (version 4 only).
    pub operator: Option<MemberOperator>,
}

impl MemberDescription {
    /// Its encoded size, bytes, in an answer with the detection details (version 1 and
    /// 2) or without (version 0).
    pub fn encoded_len(&self, detection: bool) -> usize {
        self.encoded_len_at(u16::from(detection))
    }

    /// Its encoded size, bytes, in an answer at `version`.
    pub fn encoded_len_at(&self, version: u16) -> usize {
        let tps = |l: &[TopicPartitions]| -> usize {
            4 + l
                .iter()
                .map(|t| 2 + t.topic.len() + 4 + 4 * t.partitions.len())
                .sum::<usize>()
        };
        2 + self.member_id.len()
            + 1
            + self.instance_id.as_ref().map_or(0, |i| 2 + i.len())
            + 2
            + self.client_id.len()
            + 1
            + 8
            + 8
            + tps(&self.owned)
            + tps(&self.pending_revoke)
            + tps(&self.pending_grant)
            + match version {
                0 => 0,
                1 | 2 => MemberDetection::SIZE,
                _ => MemberDetection::SIZE + 1,
            }
            + if version >= 4 {
                self.operator
                    .as_ref()
                    .map_or(MemberOperator::default().encoded_len(), |o| o.encoded_len())
            } else {
                0
            }
    }
}

/// The answer to describe group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeGroupResponse {
    /// Group id.
    pub group: String,
    /// State.
    pub state: GroupState,
    /// Generation.
    pub generation: u32,
    /// Assignor name.
    pub assignor: String,
    /// Members, by member id.
    pub members: Vec<MemberDescription>,
    /// How the group judges its members' silence (versions 1 to 3; they also
    /// describe every member's detection; version 3 has its summary). Boxed to keep [`Response`](crate::Response)
    /// small.
    pub detection: Option<Box<GroupDetection>>,
    /// Versions 2 and 3 (with `detection`): whether members after the last one
    /// described remain (ask again with its id as the cursor). `None` is a version 0 or
    /// 1 answer.
    pub more: Option<bool>,
    /// Version 4 (with `more` and the detection summary): the operator's view of the
    /// group; each member has its own. Boxed to keep [`Response`](crate::Response)
    /// small.
    pub operator: Option<Box<GroupOperator>>,
}

impl DescribeGroupResponse {
    /// The version the response is encoded in: 3 when it answers a page with the
    /// group's detection summary, 2 when it answers a page, 1 when it carries detection
    /// details.
    pub(crate) fn version(&self) -> u16 {
        if self.more.is_some() {
            let summary = self.detection.as_ref().is_some_and(|d| d.summary.is_some());
            if self.operator.is_some() {
                4
            } else if summary {
                3
            } else {
                2
            }
        } else {
            u16::from(self.detection.is_some())
        }
    }

    /// The encoded size of the body, error code included, bytes.
    pub fn encoded_len(&self) -> usize {
        let version = self.version();
        2 + 2
            + self.group.len()
            + 1
            + 4
            + 2
            + self.assignor.len()
            + self
                .detection
                .as_ref()
                .map_or(if version >= 1 { 2 + 1 } else { 0 }, |d| {
                    2 + d.detector.len()
                        + 1
                        + d.shadow.as_ref().map_or(0, |s| 2 + s.len())
                        + if version >= 3 {
                            d.summary.as_ref().map_or(
                                DetectionSummary::encoded_len_of(0),
                                DetectionSummary::encoded_len,
                            )
                        } else {
                            0
                        }
                })
            + self.operator.as_ref().map_or(0, |o| o.encoded_len())
            + 4
            + self
                .members
                .iter()
                .map(|m| m.encoded_len_at(version))
                .sum::<usize>()
            + usize::from(self.more.is_some())
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        buf.put_u8(self.state.to_u8());
        buf.put_u32(self.generation);
        put_string(buf, &self.assignor)?;
        let version = self.version();
        let detection = version >= 1;
        if detection {
            let d = self.detection.as_deref();
            put_string(buf, d.map_or("", |d| &d.detector))?;
            put_opt_string(buf, d.and_then(|d| d.shadow.as_deref()))?;
            if version >= 3 {
                match d.and_then(|d| d.summary.as_ref()) {
                    Some(summary) => summary.encode(buf)?,
                    None => DetectionSummary::default().encode(buf)?,
                }
            }
        }
        if let Some(o) = self.operator.as_deref().filter(|_| version >= 4) {
            o.encode(buf)?;
        }
        put_count(buf, self.members.len())?;
        for m in &self.members {
            put_string(buf, &m.member_id)?;
            put_opt_string(buf, m.instance_id.as_deref())?;
            put_string(buf, &m.client_id)?;
            buf.put_u8(m.liveness.to_u8());
            buf.put_u64(m.since_heartbeat_ms);
            buf.put_u64(m.since_progress_ms);
            encode_tps(buf, &m.owned)?;
            encode_tps(buf, &m.pending_revoke)?;
            encode_tps(buf, &m.pending_grant)?;
            if detection {
                let d = m.detection.unwrap_or_default();
                d.encode(buf);
                if version >= 3 {
                    buf.put_u8(d.expel_basis.unwrap_or_default().to_u8());
                }
            }
            if version >= 4 {
                m.operator.clone().unwrap_or_default().encode(buf)?;
            }
        }
        if let Some(more) = self.more {
            put_bool(buf, more);
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let group = r.string("group")?;
        let state = decode_state(r)?;
        let generation = r.u32("generation")?;
        let assignor = r.string("assignor")?;
        let detection = if version >= 1 {
            Some(Box::new(GroupDetection {
                detector: r.string("detector")?,
                shadow: r.opt_string("shadow detector")?,
                summary: if version >= 3 {
                    Some(DetectionSummary::decode(r)?)
                } else {
                    None
                },
            }))
        } else {
            None
        };
        let operator = if version >= 4 {
            Some(Box::new(GroupOperator::decode(r)?))
        } else {
            None
        };
        let min_member = 34
            + match version {
                0 => 0,
                1 | 2 => MemberDetection::SIZE,
                3 => MemberDetection::SIZE + 1,
                _ => MemberDetection::SIZE + 1 + 17,
            };
        let members = r.array("members", min_member, |r| {
            Ok(MemberDescription {
                member_id: r.string("member id")?,
                instance_id: r.opt_string("instance id")?,
                client_id: r.string("client id")?,
                liveness: Liveness::from_u8(r.u8("liveness")?).ok_or(DecodeError::Invalid {
                    what: "liveness",
                    reason: "unknown liveness value",
                })?,
                since_heartbeat_ms: r.u64("since heartbeat")?,
                since_progress_ms: r.u64("since progress")?,
                owned: decode_tps(r, "owned")?,
                pending_revoke: decode_tps(r, "pending revoke")?,
                pending_grant: decode_tps(r, "pending grant")?,
                detection: if version >= 1 {
                    let mut d = MemberDetection::decode(r)?;
                    if version >= 3 {
                        let basis = r.u8("expel basis")?;
                        d.expel_basis =
                            Some(ExpelBasis::from_u8(basis).ok_or(DecodeError::Invalid {
                                what: "expel basis",
                                reason: "unknown expel basis value",
                            })?);
                    }
                    Some(d)
                } else {
                    None
                },
                operator: if version >= 4 {
                    Some(MemberOperator::decode(r)?)
                } else {
                    None
                },
            })
        })?;
        Ok(Self {
            group,
            state,
            generation,
            assignor,
            detection,
            members,
            more: if version >= 2 {
                Some(r.bool("more")?)
            } else {
                None
            },
            operator,
        })
    }
}
