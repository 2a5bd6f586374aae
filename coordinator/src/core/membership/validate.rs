//! A Join's validation, before anything is looked up: ids, the subscription's shape,
//! the detector's name, and timeouts within the coordinator's bounds. The checks run
//! in this order, so the first fault found is the one answered.

use std::time::Duration;

use rollcall_protocol::{ApiKey, ErrorCode, JoinRequest, Response};

use super::super::group::Timeouts;
use super::super::{refuse, Coordinator, CoreConfig, DetectorKind};
use super::super::{MAX_MEMBER_ID_BYTES, MAX_NAME_BYTES};

/// A Join refused as malformed or out of bounds: `code` and why.
fn bad<T>(code: ErrorCode, msg: String) -> Result<T, Response> {
    Err(refuse(ApiKey::Join, code, msg))
}

impl Coordinator {
    pub(in crate::core) fn validate_join(&self, r: &JoinRequest) -> Result<Timeouts, Response> {
        check_ids(r)?;
        if r.subscription.is_empty() {
            return bad(
                ErrorCode::InvalidRequest,
                "subscription must name at least one topic".into(),
            );
        }
        check_detector(r)?;
        check_topics(r)?;
        if let Some(p) = r.placement.as_deref() {
            let subscription: Vec<(String, u32)> = r
                .subscription
                .iter()
                .map(|t| (t.topic.clone(), t.partitions))
                .collect();
            if let Err(message) = super::super::operate::check_placement(p, &subscription) {
                return bad(ErrorCode::InvalidRequest, message);
            }
        }
        check_timeouts(r, &self.config)
    }
}

/// The group, client, instance and member ids, and the join token.
fn check_ids(r: &JoinRequest) -> Result<(), Response> {
    if r.group.is_empty() || r.group.len() > MAX_NAME_BYTES {
        return bad(
            ErrorCode::InvalidRequest,
            format!("group id must be 1 to {MAX_NAME_BYTES} bytes"),
        );
    }
    if r.join_token == 0 {
        return bad(
            ErrorCode::InvalidRequest,
            "join token must be nonzero".into(),
        );
    }
    let too_long = |s: &Option<String>| s.as_ref().is_some_and(|s| s.len() > MAX_NAME_BYTES);
    if r.client_id.len() > MAX_NAME_BYTES || too_long(&r.instance_id) {
        return bad(
            ErrorCode::InvalidRequest,
            format!("client and instance ids are at most {MAX_NAME_BYTES} bytes"),
        );
    }
    if r.member_id
        .as_ref()
        .is_some_and(|id| id.len() > MAX_MEMBER_ID_BYTES)
    {
        return bad(
            ErrorCode::InvalidRequest,
            format!("member ids are at most {MAX_MEMBER_ID_BYTES} bytes"),
        );
    }
    if r.instance_id.as_deref() == Some("") {
        return bad(
            ErrorCode::InvalidRequest,
            "instance id must not be empty".into(),
        );
    }
    Ok(())
}

/// The detector asked for, if any, is one the coordinator knows.
fn check_detector(r: &JoinRequest) -> Result<(), Response> {
    if !r.detector.is_empty() {
        if let Err(e) = r.detector.parse::<DetectorKind>() {
            return bad(ErrorCode::InvalidRequest, e.to_string());
        }
    }
    Ok(())
}

/// The subscription's topics: each named once, with at least one partition.
fn check_topics(r: &JoinRequest) -> Result<(), Response> {
    let mut names: Vec<&str> = Vec::with_capacity(r.subscription.len());
    for t in &r.subscription {
        if t.topic.is_empty() || t.topic.len() > MAX_NAME_BYTES {
            return bad(
                ErrorCode::InvalidRequest,
                format!("topic names must be 1 to {MAX_NAME_BYTES} bytes"),
            );
        }
        if t.partitions == 0 {
            return bad(
                ErrorCode::InvalidRequest,
                format!("topic {:?} must have at least one partition", t.topic),
            );
        }
        names.push(&t.topic);
    }
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return bad(
            ErrorCode::InvalidRequest,
            "subscription names a topic twice".into(),
        );
    }
    Ok(())
}

/// The session, progress, rebalance and lease timeouts, within the coordinator's bounds.
fn check_timeouts(r: &JoinRequest, c: &CoreConfig) -> Result<Timeouts, Response> {
    let session = Duration::from_millis(u64::from(r.session_timeout_ms));
    if session < c.min_session_timeout || session > c.max_session_timeout {
        return bad(
            ErrorCode::InvalidSessionTimeout,
            format!(
                "session timeout {session:?} is outside the coordinator's bounds {:?}..={:?}",
                c.min_session_timeout, c.max_session_timeout
            ),
        );
    }
    let progress = Duration::from_millis(u64::from(r.progress_timeout_ms));
    if progress.is_zero() || progress > c.max_progress_timeout {
        return bad(
            ErrorCode::InvalidRequest,
            format!(
                "progress timeout {progress:?} must be above zero and at most {:?}",
                c.max_progress_timeout
            ),
        );
    }
    let rebalance = Duration::from_millis(u64::from(r.rebalance_timeout_ms));
    if rebalance.is_zero() || rebalance > c.max_rebalance_timeout {
        return bad(
            ErrorCode::InvalidRequest,
            format!(
                "rebalance timeout {rebalance:?} must be above zero and at most {:?}",
                c.max_rebalance_timeout
            ),
        );
    }
    let lease = match r.lease_timeout_ms {
        0 => session,
        ms => Duration::from_millis(u64::from(ms)),
    };
    if lease < c.min_session_timeout || lease > session {
        return bad(
            ErrorCode::InvalidSessionTimeout,
            format!(
                "lease timeout {lease:?} must be at least {:?} and at most the session timeout {session:?}",
                c.min_session_timeout
            ),
        );
    }
    // Each was checked above as the Duration of these milliseconds.
    Ok(Timeouts {
        session_ms: r.session_timeout_ms,
        progress_ms: r.progress_timeout_ms,
        rebalance_ms: r.rebalance_timeout_ms,
        lease_ms: match r.lease_timeout_ms {
            0 => r.session_timeout_ms,
            ms => ms,
        },
    })
}
