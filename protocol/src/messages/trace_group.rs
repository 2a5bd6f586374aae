//! TraceGroup (API key 10, versions 0 and 1): what the coordinator saw of a group's
//! heartbeats, on its own clock, read in pages by a client that polls with a cursor
//! (for `rollcall trace` and the detector lab). Version 0 has the arrival instants of
//! the heartbeats alone; version 1 adds each beat's sequence number, the members'
//! connections closing and opening, and the shard's evidence for its guards (pauses,
//! lag, server silence), so that a replay can feed the coordinator what it saw.

use bytes::{BufMut, BytesMut};

use crate::wire::{put_count, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Reads a group's trace from `cursor` on, and keeps the group's trace running (a
/// trace lapses when nobody has asked for it for a while).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceGroupRequest {
    /// The group.
    pub group: String,
    /// The trace the cursor belongs to, from the last answer; 0 to start.
    pub epoch: u64,
    /// The first entry wanted (the last answer's `cursor`); 0 to start.
    pub cursor: u64,
    /// Version 1: the answer carries every entry of the trace, each with its kind,
    /// sequence number and duration. Version 0 (`false`): heartbeats alone, as
    /// member and instant. The body is the same at both versions.
    pub events: bool,
}

impl TraceGroupRequest {
    /// The lowest version that can carry the request.
    pub(crate) fn version(&self) -> u16 {
        u16::from(self.events)
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        buf.put_u64(self.epoch);
        buf.put_u64(self.cursor);
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            epoch: r.u64("epoch")?,
            cursor: r.u64("cursor")?,
            events: version >= 1,
        })
    }
}

/// What one entry of a trace records (TraceGroup version 1). The first three are a
/// member's; the others are the shard's (their `member_id` is empty), recorded in every
/// group the shard traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ArrivalKind {
    /// A heartbeat of the member arrived (a beat of a Heartbeats request counts as one).
    #[default]
    Beat,
    /// The connection the member talked over closed.
    Closed,
    /// The member, known before, talked over a new connection: after its connection
    /// closed, or moving from another one.
    Opened,
    /// The core woke later than its earliest timer, by `value_us`: it was not running
    /// from `at_us − value_us` to `at_us`.
    Pause,
    /// The server reported the core behind by `value_us` (at least the backlog guard's
    /// floor): its frames may wait unread.
    Lag,
    /// The server read no member frame, on any connection, for `value_us` up to `at_us`.
    Silence,
}

impl ArrivalKind {
    /// Every kind, in wire order.
    pub const ALL: [Self; 6] = [
        Self::Beat,
        Self::Closed,
        Self::Opened,
        Self::Pause,
        Self::Lag,
        Self::Silence,
    ];

    /// Wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::Beat => 0,
            Self::Closed => 1,
            Self::Opened => 2,
            Self::Pause => 3,
            Self::Lag => 4,
            Self::Silence => 5,
        }
    }

    /// From wire value; `None` for a value this version does not know.
    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.get(usize::from(v)).copied()
    }

    /// Whether the entry is the shard's rather than a member's (no member id; the
    /// duration in `value_us`).
    pub fn is_shard_event(self) -> bool {
        matches!(self, Self::Pause | Self::Lag | Self::Silence)
    }

    /// Lower-case name, as `rollcall trace` writes it (`beat` lines are written
    /// without one).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Beat => "beat",
            Self::Closed => "closed",
            Self::Opened => "opened",
            Self::Pause => "pause",
            Self::Lag => "lag",
            Self::Silence => "silent",
        }
    }
}

/// One entry of a trace: a heartbeat's arrival, or (version 1) an event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Arrival {
    /// The member whose heartbeat (or connection) it was; empty for a shard's event.
    pub member_id: String,
    /// When: microseconds since the trace began, on the coordinator's clock.
    pub at_us: u64,
    /// Version 1: the heartbeat's sequence number, as the member sent it; 0 for the
    /// other kinds, and at version 0.
    pub sequence: u64,
    /// Version 1: what the entry records; always `Beat` at version 0.
    pub kind: ArrivalKind,
    /// Version 1: the duration, microseconds, of a `Pause`, `Lag` or `Silence`; 0 for
    /// the other kinds, and at version 0.
    pub value_us: u64,
}

impl Arrival {
    /// Encoded size at version 0, bytes, without the member id's.
    const V0_SIZE: usize = 2 + 8;
    /// Encoded size at version 1, bytes, without the member id's.
    const V1_SIZE: usize = Self::V0_SIZE + 8 + 1 + 8;

    /// Encoded size at `version`, bytes (what a page counts).
    pub fn encoded_size(&self, version: u16) -> usize {
        self.member_id.len()
            + if version >= 1 {
                Self::V1_SIZE
            } else {
                Self::V0_SIZE
            }
    }

    fn encode(&self, version: u16, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.member_id)?;
        buf.put_u64(self.at_us);
        if version >= 1 {
            buf.put_u64(self.sequence);
            buf.put_u8(self.kind.to_u8());
            buf.put_u64(self.value_us);
        }
        Ok(())
    }

    fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let member_id = r.string("member id")?;
        let at_us = r.u64("arrival")?;
        if version == 0 {
            return Ok(Self {
                member_id,
                at_us,
                ..Self::default()
            });
        }
        let sequence = r.u64("sequence")?;
        let kind = ArrivalKind::from_u8(r.u8("arrival kind")?).ok_or(DecodeError::Invalid {
            what: "arrival kind",
            reason: "must be 0 (beat), 1 (closed), 2 (opened), 3 (pause), 4 (lag) or 5 (silence)",
        })?;
        Ok(Self {
            member_id,
            at_us,
            sequence,
            kind,
            value_us: r.u64("duration")?,
        })
    }
}

/// A page of a group's trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceGroupResponse {
    /// The trace these entries belong to. Differs from the request's when a trace
    /// began with this request (the first one, or one after the last trace lapsed):
    /// entries before it are not known.
    pub epoch: u64,
    /// The cursor to ask from next.
    pub cursor: u64,
    /// Entries between the request's cursor and the first one returned that the
    /// coordinator no longer holds (it keeps a bounded number per group).
    pub dropped: u64,
    /// The entries, oldest first: heartbeats alone at version 0.
    pub arrivals: Vec<Arrival>,
    /// Version 1: the entries carry their kind, sequence number and duration (the
    /// answer to a version 1 request).
    pub events: bool,
}

impl TraceGroupResponse {
    /// The version the answer is encoded in: its request's.
    pub(crate) fn version(&self) -> u16 {
        u16::from(self.events)
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let version = self.version();
        buf.put_u64(self.epoch);
        buf.put_u64(self.cursor);
        buf.put_u64(self.dropped);
        put_count(buf, self.arrivals.len())?;
        for a in &self.arrivals {
            a.encode(version, buf)?;
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let min = if version >= 1 {
            Arrival::V1_SIZE
        } else {
            Arrival::V0_SIZE
        };
        Ok(Self {
            epoch: r.u64("epoch")?,
            cursor: r.u64("cursor")?,
            dropped: r.u64("dropped")?,
            arrivals: r.array("arrivals", min, |r| Arrival::decode(version, r))?,
            events: version >= 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::{Body, DecodeError, Frame, FrameError, Response, DEFAULT_MAX_FRAME_SIZE};

    fn page(events: bool) -> Response {
        Response::TraceGroup(TraceGroupResponse {
            epoch: 3,
            cursor: 9,
            dropped: 0,
            arrivals: vec![
                Arrival {
                    member_id: "m".into(),
                    at_us: 1_000,
                    sequence: if events { 41 } else { 0 },
                    ..Arrival::default()
                },
                Arrival {
                    member_id: String::new(),
                    at_us: 2_000,
                    sequence: 0,
                    kind: if events {
                        ArrivalKind::Pause
                    } else {
                        ArrivalKind::Beat
                    },
                    value_us: if events { 75_000 } else { 0 },
                },
            ],
            events,
        })
    }

    fn encoded(response: Response) -> Vec<u8> {
        let mut buf = BytesMut::new();
        Frame::response(7, response)
            .encode(&mut buf, DEFAULT_MAX_FRAME_SIZE)
            .unwrap();
        buf[crate::LENGTH_PREFIX_SIZE..].to_vec()
    }

    #[test]
    fn both_versions_round_trip_and_version_1_carries_kind_sequence_and_duration() {
        for events in [false, true] {
            let bytes = encoded(page(events));
            let frame = Frame::decode(&bytes).unwrap();
            assert_eq!(frame.header().api_version, u16::from(events));
            assert_eq!(frame.body, Body::Response(page(events)));
        }
        // Version 1 adds 17 bytes an entry.
        assert_eq!(
            encoded(page(true)).len(),
            encoded(page(false)).len() + 2 * 17
        );
    }

    #[test]
    fn an_unknown_kind_is_a_decode_error_naming_it() {
        let mut bytes = encoded(page(true));
        // The second entry's kind: the last entry ends with kind (1) and duration (8).
        let at = bytes.len() - 9;
        assert_eq!(bytes[at], ArrivalKind::Pause.to_u8());
        for kind in [6, 0xff] {
            bytes[at] = kind;
            match Frame::decode(&bytes) {
                Err(FrameError::Malformed {
                    source: DecodeError::Invalid { what, .. },
                    ..
                }) => assert_eq!(what, "arrival kind"),
                other => panic!("kind {kind}: {other:?}"),
            }
        }
    }

    #[test]
    fn every_truncation_of_a_version_1_page_is_an_error() {
        let bytes = encoded(page(true));
        for len in 0..bytes.len() {
            assert!(
                Frame::decode(&bytes[..len]).is_err(),
                "{len} of {} bytes decoded",
                bytes.len()
            );
        }
    }

    #[test]
    fn kinds_round_trip_and_the_shard_s_are_pause_lag_and_silence() {
        for (v, kind) in ArrivalKind::ALL.iter().enumerate() {
            assert_eq!(usize::from(kind.to_u8()), v);
            assert_eq!(ArrivalKind::from_u8(kind.to_u8()), Some(*kind));
        }
        assert_eq!(ArrivalKind::from_u8(6), None);
        let shard: Vec<_> = ArrivalKind::ALL
            .into_iter()
            .filter(|k| k.is_shard_event())
            .collect();
        assert_eq!(
            shard,
            [ArrivalKind::Pause, ArrivalKind::Lag, ArrivalKind::Silence]
        );
    }
}
