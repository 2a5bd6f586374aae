//! The rollcall client: what a worker embeds to take part in a consumer group.
//!
//! A [`Client`] holds one connection to the coordinator; any number of [`Member`]s (in
//! one group or several) share it. Where several coordinators share the groups (a
//! cluster), it holds one connection per coordinator its members live on: each member
//! starts on the connection to the addresses it was given ([`ClientConfig::bootstrap`])
//! and, when that coordinator says it does not serve the group, or the coordinator that
//! did fails, finds the group's coordinator and moves there as the same member. A background task owns the socket: it heartbeats for
//! every member on its own jittered schedule, never waiting on the application, and
//! reconnects with backoff when the connection drops. When several members' heartbeats
//! fall due together, and the coordinator supports it, they go out in one Heartbeats
//! request: as soon as one member's heartbeat is due, those of the others due within
//! half their interval are sent with it (early, never late). The application takes
//! [`Event`]s from each member, with [`Member::next_event`] or as a `Stream` from
//! [`Member::events`], and acts on them:
//!
//! ```no_run
//! use std::time::Duration;
//! use rollcall_client::{Client, ClientConfig, Event, MemberConfig, Offset};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::connect("127.0.0.1:7070", ClientConfig::default()).await?;
//! let member = client
//!     .join(MemberConfig::new("billing", [("invoices", 12)]).with_session_timeout(Duration::from_secs(10)))
//!     .await?;
//! while let Some(event) = member.next_event().await {
//!     match event {
//!         Event::Assigned { partitions, .. } => { /* start work on them */ }
//!         Event::RevokeRequested { partitions, .. } => {
//!             // Finish, commit, then release.
//!             let offsets: Vec<Offset> = partitions.iter().map(|p| Offset::new(p.clone(), 0)).collect();
//!             member.commit(offsets).await?;
//!             member.ack_revocation(partitions)?;
//!         }
//!         Event::Lost { partitions, .. } => { /* stop at once: someone else may own them */ }
//!         Event::Suspended { .. } => { /* pause all work until Resumed (or Lost) */ }
//!         Event::Resumed { partitions } => { /* carry on with these */ }
//!         Event::Fatal(e) => return Err(e.into()),
//!         _ => {}
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//!
//! - **Events are consistent.** A partition is announced by `Assigned` and stops being
//!   the member's either when the application acknowledges its revocation or by one
//!   `Lost` event; it is never reported lost while held, nor held after it was lost.
//! - **Leases.** Each acknowledged heartbeat extends the member's lease to the instant
//!   that heartbeat was *sent* plus the lease timeout, less a safety margin. The
//!   coordinator never hands a member's unreleased partitions to another member before
//!   the latest lease it promised (last receipt plus the lease timeout), which comes
//!   later, also across a coordinator restart. [`Member::lease_deadline`] bounds writes
//!   made outside the coordinator.
//! - **Suspension.** When the lease runs out without a newer acknowledgement, or the
//!   connection to the coordinator is lost, the member *suspends*: the application gets
//!   [`Event::Suspended`] at once and must stop acting on its partitions
//!   ([`Member::is_suspended`] says so too). The member stays a member, keeps its
//!   partitions and keeps heartbeating (reconnecting first if needed; the first attempt
//!   comes within the reconnection base delay, 50 ms by default). The next
//!   acknowledgement resumes it with [`Event::Resumed`] and the partitions it still
//!   holds; if the coordinator expelled it meanwhile, it reports [`Event::Lost`] instead.
//!   Commits may still be sent while suspended (the coordinator fences them by
//!   ownership), but the work behind them must wait for `Resumed`. If no heartbeat is
//!   acknowledged for the session timeout (less the margin) after it was sent, the
//!   member reports its partitions [`LostReason::LeaseExpired`] and rejoins when it can.
//! - **Crashes.** A process that dies closes its connection; the coordinator expels its
//!   members when their lease timeout has run out without them reconnecting, so their
//!   partitions move after the lease timeout rather than the session timeout.
//! - **Relinquishing.** When the coordinator itself ends a membership (an expulsion, or
//!   fencing), the partitions wait for the member's lease to run out in case its
//!   process is still at work on them. When the application, having taken the
//!   resulting [`Event::Lost`], asks for the *next* event (from [`Member::next_event`]
//!   or the [`Member::events`] stream), the client tells the coordinator that it
//!   stopped (a `Relinquish` request, sent once, and given up after a session timeout),
//!   and the partitions move at once. So stop every piece of work on lost partitions,
//!   worker tasks included, before asking for the next event.
//! - **Fencing.** Commits are checked against ownership locally and by the coordinator;
//!   a member that was expelled or fenced gets a typed [`CommitError`].
//! - **Leaving.** [`Member::leave`] revokes every partition locally and leaves once the
//!   application has released them all. If the leave deadline passes first, the rest
//!   is reported [`LostReason::Left`] as the leave goes out, and the coordinator holds
//!   those partitions until this member's lease has run out. A static member (with an
//!   instance id) stands down instead of leaving: it stays in the group without a
//!   rebalance, and the next process with its instance id takes over at once.
//! - **Connection loss.** After a reconnect each member heartbeats with its member id
//!   and generation: it resumes if the coordinator still knows it (partitions it no
//!   longer holds are reported lost), and otherwise reports everything lost and joins
//!   afresh. A coordinator restart is survived the same way.
//! - **Moves.** A member whose group moves to another coordinator (told
//!   `not_coordinator`) keeps its member id, generation and partitions, and keeps
//!   acting within its lease while it finds the new coordinator (the coordinator that
//!   takes a group over honours every lease promised before); one whose coordinator
//!   fails suspends, as on any connection loss, and resumes at the coordinator that took
//!   the group over. Across a move or failover shorter than the session timeout the
//!   application sees at most `Suspended` then `Resumed`, never `Lost`.
//!
//! See [`MemberConfig`] for the timeouts and how they relate.
//!
//! # Protocol types
//!
//! The API is made of this crate's own types, with two deliberate exceptions:
//! [`ErrorCode`] (in the `Refused` and `Rejected` variants of the errors) and
//! [`ExpelReason`] (in [`LostReason::Expelled`]) are the wire protocol's own enums,
//! re-exported here. The coordinator defines them and the client passes them on as they
//! arrive, so that an application sees exactly what the coordinator said, and each
//! code's documentation says what a client should do about it. The [`raw`] module is
//! the protocol level itself and speaks in protocol types throughout.
//!
//! # The `testing` feature
//!
//! With the `testing` feature, the [`testing`] module exposes the client's sans-IO
//! membership state machine, the one the connection task drives for every member, so
//! that a test can drive it itself: feed it responses, pushes, application commands and
//! simulated time, and read what it sends and reports. The coordinator's fault
//! simulation plays its clients with it. It is **not part of the stable API**: it
//! follows the client's internals and changes with them, in any release.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

// Their `pub` items are what the `testing` feature exposes.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
mod backoff;
mod client;
mod config;
mod driver;
mod error;
mod handed;
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
mod membership;
pub mod raw;
mod tls;
mod types;

/// The membership state machine and the backoff the connection task uses, for tests that
/// drive them themselves (the `testing` feature). **Not part of the stable API**: see
/// [The `testing` feature](crate#the-testing-feature).
///
/// A [`Membership`](testing::Membership) performs no I/O and reads no clock: every input
/// carries `now`, so a test runs it in simulated time. What a client's connection task
/// does with it, a test does in its stead: connect it ([`handle_connected`]), send what
/// [`poll_transmit`] produces and hand back the answers ([`handle_response`], or
/// [`handle_commit_response`] for commits) and the pushes ([`handle_push`]), run
/// [`handle_timeout`] when [`poll_timeout`] says, take the events ([`poll_event`]) and
/// confirm each ticket with [`handle_taken`] once the application moved past its event.
///
/// [`handle_connected`]: testing::Membership::handle_connected
/// [`poll_transmit`]: testing::Membership::poll_transmit
/// [`handle_response`]: testing::Membership::handle_response
/// [`handle_commit_response`]: testing::Membership::handle_commit_response
/// [`handle_push`]: testing::Membership::handle_push
/// [`handle_timeout`]: testing::Membership::handle_timeout
/// [`poll_timeout`]: testing::Membership::poll_timeout
/// [`poll_event`]: testing::Membership::poll_event
/// [`handle_taken`]: testing::Membership::handle_taken
#[cfg(feature = "testing")]
pub mod testing {
    pub use crate::backoff::Backoff;
    pub use crate::membership::{BackoffConfig, Features, Membership, RequestId, Stage, Ticket};
}

pub use client::{Client, Events, Member};
pub use config::{ClientConfig, Credentials, MemberConfig};
pub use error::{
    CommitError, ConfigError, ConnectError, FatalError, JoinError, LeaveError, RequestError,
};
/// The protocol's error codes, re-exported on purpose: see [Protocol types](crate#protocol-types).
pub use rollcall_protocol::ErrorCode;
/// The protocol's expulsion reasons, re-exported on purpose: see
/// [Protocol types](crate#protocol-types).
pub use rollcall_protocol::ExpelReason;
/// A group's operator settings, and a change to them ([`Client::alter_group_config`]),
/// re-exported from the protocol.
pub use rollcall_protocol::{AlterGroupConfigRequest, GroupSettings};
pub use tls::TlsConfig;
pub use types::{
    Assignment, Committed, Event, LostReason, Offset, PartitionSet, TopicPartition,
    TopicSubscription,
};
