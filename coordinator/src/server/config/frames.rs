//! The largest frames the coordinator sends about one member or one offset, which the
//! configured limits must fit in the largest frame.

use super::{InvalidConfig, ServerConfig};

/// An upper bound, in bytes (length prefix excluded), of the largest frame the
/// coordinator sends about one member of a group of `partitions` partitions in one
/// topic: its Assignment or Revoke push, or the DescribeGroup answer for a group of that
/// one member. The Describe answer is the largest: it lists the member's owned
/// partitions, those pending revocation (a subset of the owned ones) and those pending
/// grant (disjoint from the owned ones), so at most twice the group's partitions, in
/// three lists.
///
/// Every name is counted at its longest (255 bytes; a member id 510). Encoding, from
/// `docs/PROTOCOL.md` §3, §6.9 and §7.1: a 9-byte header; a response's error code;
/// group, assignor, member id,
/// client id as strings (2 + length); the instance id as an optional string
/// (1 + 2 + length); state 1, generation 4, member count 4, liveness 1, two u64s; at
/// version 1 the detector and shadow detector names and the member's detection; at
/// version 3 the group's summary of its gaps and the member's expel basis; each
/// partition list a u32 count, then per topic a string and a u32 count (at most 261
/// bytes), then 4 bytes per partition.
///
/// Each further topic adds at most 261 bytes per list. The default limits leave room
/// for hundreds of them (100,000 partitions need 802,743 of the 1,048,576 bytes); a
/// group with so many topics that an answer still does not fit gets the
/// `frame_too_large` error answer instead (see `docs/PROTOCOL.md` §2).
pub fn largest_member_answer(partitions: u64) -> u64 {
    const NAME: u64 = 2 + crate::core::MAX_NAME_BYTES as u64;
    const MEMBER_ID: u64 = 2 + crate::core::MAX_MEMBER_ID_BYTES as u64;
    const TOPIC: u64 = NAME + 4;
    // Version 1: the detector names (at most 16 bytes each) and the member's detection.
    const DETECTION: u64 = (2 + 16) + (1 + 2 + 16) + (8 + 4 * 4 + 8 + 8 + 4 * 4);
    let fixed = rollcall_protocol::HEADER_SIZE as u64
        + 2 // error code
        + NAME // group
        + 1 // state
        + 4 // generation
        + NAME // assignor
        + 4 // member count
        + MEMBER_ID
        + 1 + NAME // instance id
        + NAME // client id
        + 1 // liveness
        + 8 + 8 // since heartbeat, since progress
        + DETECTION
        + 1 // version 2: whether more members follow
        // Version 3: the group's summary of its gaps, and the member's expel basis.
        + crate::core::liveness::advice::MAX_SUMMARY_BYTES as u64
        + 1;
    let lists = 3 * (4 + TOPIC);
    fixed + lists + 2 * 4 * partitions
}

/// An upper bound, in bytes (length prefix excluded), of a FetchOffsets answer carrying
/// one offset whose metadata has `metadata` bytes: a 9-byte header, the error code, the
/// count, the offset (its topic at its longest, 255 bytes; partition, offset and the
/// metadata string) and, at version 1, the `more` flag (`docs/PROTOCOL.md` §6.7). A
/// paged FetchOffsets answer holds at least one offset, so this must fit the frame.
pub fn largest_offset_answer(metadata: u64) -> u64 {
    const TOPIC: u64 = 2 + crate::core::MAX_NAME_BYTES as u64;
    rollcall_protocol::HEADER_SIZE as u64 + 2 + 4 + TOPIC + 4 + 8 + 2 + metadata + 1
}

/// The most partitions per group whose [`largest_member_answer`] fits
/// `max_frame_size`.
pub fn max_partitions_for(max_frame_size: usize) -> u64 {
    (max_frame_size as u64).saturating_sub(largest_member_answer(0)) / 8
}

impl ServerConfig {
    /// The largest push or Describe answer about one member, in a group at the
    /// partition limit, fits the frame.
    pub(super) fn check_member_answer_fits(&self) -> Result<(), InvalidConfig> {
        let core = &self.core;
        let largest = largest_member_answer(u64::from(core.max_partitions_per_group));
        if largest > self.max_frame_size as u64 {
            return Err(InvalidConfig::new(
                "max-partitions-per-group",
                format!(
                    "({}) is too many for max-frame-size ({} bytes): the largest push or describe answer about one member could take {largest} bytes; at most {} fit",
                    core.max_partitions_per_group,
                    self.max_frame_size,
                    max_partitions_for(self.max_frame_size)
                ),
            ));
        }
        Ok(())
    }

    /// A FetchOffsets answer of one offset, its metadata at the limit, fits the frame.
    pub(super) fn check_offset_answer_fits(&self) -> Result<(), InvalidConfig> {
        let core = &self.core;
        let offset = largest_offset_answer(core.max_metadata_bytes as u64);
        if offset > self.max_frame_size as u64 {
            return Err(InvalidConfig::new(
                "max-metadata-bytes",
                format!(
                    "({}) is too large for max-frame-size ({} bytes): a FetchOffsets answer of one offset could take {offset} bytes",
                    core.max_metadata_bytes, self.max_frame_size
                ),
            ));
        }
        Ok(())
    }
}
