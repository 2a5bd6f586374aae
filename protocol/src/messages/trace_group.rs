//! TraceGroup (API key 10): the arrival instants of a group's heartbeats on the
//! coordinator's clock, read in pages by a client that polls with a cursor (for
//! `rollcall trace` and the detector lab).

use bytes::{BufMut, BytesMut};

use crate::wire::{put_count, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Reads a group's heartbeat arrivals from `cursor` on, and keeps the group's trace
/// running (a trace lapses when nobody has asked for it for a while).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceGroupRequest {
    /// The group.
    pub group: String,
    /// The trace the cursor belongs to, from the last answer; 0 to start.
    pub epoch: u64,
    /// The first arrival wanted (the last answer's `cursor`); 0 to start.
    pub cursor: u64,
}

impl TraceGroupRequest {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        buf.put_u64(self.epoch);
        buf.put_u64(self.cursor);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            epoch: r.u64("epoch")?,
            cursor: r.u64("cursor")?,
        })
    }
}

/// One heartbeat's arrival.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// The member whose heartbeat it was.
    pub member_id: String,
    /// When it arrived: microseconds since the trace began, on the coordinator's clock.
    pub at_us: u64,
}

/// A page of a group's heartbeat arrivals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceGroupResponse {
    /// The trace these arrivals belong to. Differs from the request's when a trace
    /// began with this request (the first one, or one after the last trace lapsed):
    /// arrivals before it are not known.
    pub epoch: u64,
    /// The cursor to ask from next.
    pub cursor: u64,
    /// Arrivals between the request's cursor and the first one returned that the
    /// coordinator no longer holds (it keeps a bounded number per group).
    pub dropped: u64,
    /// The arrivals, oldest first.
    pub arrivals: Vec<Arrival>,
}

impl TraceGroupResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        buf.put_u64(self.epoch);
        buf.put_u64(self.cursor);
        buf.put_u64(self.dropped);
        put_count(buf, self.arrivals.len())?;
        for a in &self.arrivals {
            put_string(buf, &a.member_id)?;
            buf.put_u64(a.at_us);
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            epoch: r.u64("epoch")?,
            cursor: r.u64("cursor")?,
            dropped: r.u64("dropped")?,
            arrivals: r.array("arrivals", 10, |r| {
                Ok(Arrival {
                    member_id: r.string("member id")?,
                    at_us: r.u64("arrival")?,
                })
            })?,
        })
    }
}
