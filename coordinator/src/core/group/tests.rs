//! Layout checks of a member.

/// Every member is one allocation of this size (boxed in its group's map). Up to 512
/// bytes it takes the allocator's 512-byte size class; past that, the next class is
/// 640 bytes: a quarter more per member. A new field that most members leave empty
/// belongs in a box; raise this only knowing that.
#[test]
fn a_member_fits_a_512_byte_allocation() {
    let size = std::mem::size_of::<super::Member>();
    assert!(size <= 512, "a Member is {size} bytes");
}

/// A renewal's fields fill the first [`RENEWAL_LINES`] lines of a member, which
/// starts a line: a field added among them, or a hot field of the watch moved
/// behind its cold ones, shows here instead of as a slower renewal.
#[test]
fn renewal_fields_fill_the_first_lines() {
    use std::mem::{align_of, offset_of};

    use super::super::liveness::Watch;
    use super::{Member, RENEWAL_LINES};

    assert_eq!(align_of::<Member>(), 64);
    let hot_end = offset_of!(Member, liveness) + Watch::RENEWAL_BYTES;
    assert!(
        hot_end <= RENEWAL_LINES * 64,
        "a renewal touches {hot_end} bytes of a member"
    );
    assert!(
        hot_end > (RENEWAL_LINES - 1) * 64,
        "RENEWAL_LINES is too high"
    );
    assert!(offset_of!(Member, id) >= hot_end);
}
