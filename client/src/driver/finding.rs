//! Finding a group's coordinator: when a membership's coordinator says it does not
//! serve the group, or a connection to a coordinator found this way is lost, the
//! membership is detached and the connection task asks FindCoordinator (on any
//! connection it has) until an answer names an address, then puts the membership on
//! the connection to that address. Answers without one (`coordinator_loading`,
//! `not_coordinator`: nobody serves the group yet) are asked again after a backoff.
//! An answer that knows no coordinator for the group (rather than one still loading
//! it) counts as a *miss*, and so does a question lost with a connection to another
//! coordinator: the next question goes to the next of the client's addresses
//! ([`Search::misses`]), since the coordinator asked may have a stale view (or be
//! between owners for that slot) where another knows. A membership searches until it
//! finds; a fetch of offsets gives up after a while (`fetching.rs`).
//!
//! Sans-IO like the membership: the connection task feeds it and sends what it says.

use std::time::{Duration, Instant};

use rand::Rng;
use rollcall_protocol::{ErrorCode, Response};

use crate::backoff::Backoff;

/// A link: one connection (or the attempts at one) to one coordinator.
pub(super) type LinkId = u64;

/// One membership's search for its group's coordinator.
#[derive(Debug)]
pub(super) struct Search {
    /// Whether it is searching (detached from every connection).
    active: bool,
    /// Where its FindCoordinator went, if one is awaiting its answer: the link and
    /// the correlation id.
    asked: Option<(LinkId, u32)>,
    /// No FindCoordinator before this.
    not_before: Instant,
    backoff: Backoff,
    /// When the membership was last put on a coordinator's connection.
    placed_at: Instant,
    /// A membership placed for this long before it has to search again starts over
    /// from the first (shortest) delay.
    settle: Duration,
    /// Questions since the search started that found no coordinator to go to.
    misses: usize,
}

impl Search {
    pub(super) fn new(base: Duration, max: Duration, now: Instant) -> Self {
        Self {
            active: false,
            asked: None,
            not_before: now,
            backoff: Backoff::new(base, max),
            placed_at: now,
            settle: max,
            misses: 0,
        }
    }

    /// Questions of this search that found nothing: the `n`th question goes to the
    /// client's address `n` places after the one it is connected to.
    pub(super) fn misses(&self) -> usize {
        self.misses
    }

    /// The question could not be asked where it was to go (the connection there could
    /// not be made, or was lost before the answer): it goes to the next address, after
    /// a backoff.
    pub(super) fn missed(&mut self, now: Instant, rng: &mut impl Rng) {
        if !self.active {
            return;
        }
        self.asked = None;
        self.misses += 1;
        self.not_before = now + self.backoff.next_delay(rng);
    }

    /// Whether a FindCoordinator awaits its answer on `link`.
    pub(super) fn asked_on(&self, link: LinkId) -> bool {
        self.active && self.asked.is_some_and(|(l, _)| l == link)
    }

    /// Whether a FindCoordinator awaits its answer.
    pub(super) fn asked_on_any(&self) -> bool {
        self.asked.is_some()
    }

    /// Whether the search is under way.
    pub(super) fn is_active(&self) -> bool {
        self.active
    }

    /// Starts a search. The first FindCoordinator goes out after the next delay of the
    /// backoff, so a group bounced between coordinators that disagree is asked about
    /// less and less often; one that was served in one place for a while starts over.
    pub(super) fn start(&mut self, now: Instant, rng: &mut impl Rng) {
        if now.saturating_duration_since(self.placed_at) >= self.settle {
            self.backoff.reset();
        }
        self.active = true;
        self.asked = None;
        self.misses = 0;
        self.not_before = now + self.backoff.next_delay(rng);
    }

    /// Whether a FindCoordinator is to be sent now.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.active && self.asked.is_none() && now >= self.not_before
    }

    /// When a FindCoordinator is next due, if one is to be sent.
    pub(super) fn wake(&self) -> Option<Instant> {
        (self.active && self.asked.is_none()).then_some(self.not_before)
    }

    /// The FindCoordinator went out on `link` with `correlation`.
    pub(super) fn sent(&mut self, link: LinkId, correlation: u32) {
        self.asked = Some((link, correlation));
    }

    /// The answer to the FindCoordinator sent on `link`: the address to connect to,
    /// or `None` (asked again after a backoff). `asked_addr` is the address of the
    /// coordinator that answered: an answer naming an unspecified host (a coordinator
    /// advertising the address it listens on, `0.0.0.0:port`) means that host.
    pub(super) fn answered(
        &mut self,
        response: Response,
        asked_addr: &str,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Option<String> {
        if !self.active {
            return None;
        }
        self.asked = None;
        match response {
            Response::FindCoordinator(r) if !r.addr.is_empty() => {
                self.active = false;
                self.placed_at = now;
                Some(reachable(&r.addr, asked_addr))
            }
            // The group is there in a moment: ask the same coordinator again.
            Response::Error(e) if e.code == ErrorCode::CoordinatorLoading => {
                self.not_before = now + self.backoff.next_delay(rng);
                None
            }
            _ => {
                self.misses += 1;
                self.not_before = now + self.backoff.next_delay(rng);
                None
            }
        }
    }

    /// The connection `link` is gone: a FindCoordinator awaiting an answer there is
    /// sent again (on another connection, or this one once it is back).
    pub(super) fn link_lost(&mut self, link: LinkId) {
        if self.asked.is_some_and(|(l, _)| l == link) {
            self.asked = None;
        }
    }

    /// Put directly on a connection (a new membership on the bootstrap connection).
    pub(super) fn placed(&mut self, now: Instant) {
        self.active = false;
        self.asked = None;
        self.placed_at = now;
    }
}

/// `addr` as a client can reach it: an unspecified host (`0.0.0.0`, `[::]`, empty) is
/// the host of `asked`, the coordinator that gave the address.
pub(super) fn reachable(addr: &str, asked: &str) -> String {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return addr.to_owned();
    };
    if !matches!(host, "" | "0.0.0.0" | "[::]" | "::") {
        return addr.to_owned();
    }
    match asked.rsplit_once(':') {
        Some((asked_host, _)) => format!("{asked_host}:{port}"),
        None => addr.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::SeedableRng;
    use rollcall_protocol::{ApiKey, FindCoordinatorResponse};

    use super::*;

    const BASE: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(5);

    fn found(addr: &str) -> Response {
        Response::FindCoordinator(FindCoordinatorResponse { addr: addr.into() })
    }

    fn refused(code: ErrorCode) -> Response {
        Response::error(ApiKey::FindCoordinator as u16, code, "x")
    }

    #[test]
    fn a_search_asks_once_at_a_time_and_ends_with_an_address() {
        let mut rng = SmallRng::seed_from_u64(1);
        let t0 = Instant::now();
        let mut s = Search::new(BASE, MAX, t0);
        assert!(!s.is_active() && !s.due(t0) && s.wake().is_none());
        s.start(t0 + MAX, &mut rng);
        let at = s.wake().expect("due");
        assert!(
            at <= t0 + MAX + BASE,
            "the first ask waits at most the base delay"
        );
        assert!(s.due(at));
        s.sent(7, 42);
        assert!(!s.due(at + MAX), "one question at a time");
        assert_eq!(s.wake(), None);
        let addr = s.answered(found("10.0.0.2:7070"), "10.0.0.1:7070", at, &mut rng);
        assert_eq!(addr.as_deref(), Some("10.0.0.2:7070"));
        assert!(!s.is_active());
        // A late duplicate answer changes nothing.
        assert_eq!(s.answered(found("x:1"), "y:1", at, &mut rng), None);
    }

    #[test]
    fn answers_without_an_address_are_asked_again_with_a_growing_backoff() {
        let mut rng = SmallRng::seed_from_u64(2);
        let t0 = Instant::now();
        let mut s = Search::new(BASE, MAX, t0);
        s.start(t0 + MAX, &mut rng);
        let mut now = s.wake().unwrap();
        let mut bounds = Vec::new();
        for code in [
            ErrorCode::CoordinatorLoading,
            ErrorCode::NotCoordinator,
            ErrorCode::CoordinatorLoading,
            ErrorCode::NotCoordinator,
        ] {
            assert!(s.due(now));
            s.sent(1, 1);
            assert_eq!(s.answered(refused(code), "a:1", now, &mut rng), None);
            assert!(s.is_active());
            let next = s.wake().unwrap();
            bounds.push(next - now);
            now = next;
        }
        // Full jitter: each delay within its doubling bound.
        for (i, d) in bounds.iter().enumerate() {
            assert!(*d <= BASE * (1 << (i + 1)), "delay {i}: {d:?}");
        }
        // An empty address is no answer either.
        s.sent(1, 1);
        assert_eq!(s.answered(found(""), "a:1", now, &mut rng), None);
        assert!(s.is_active());
    }

    #[test]
    fn answers_that_know_no_coordinator_move_the_next_question_on() {
        let mut rng = SmallRng::seed_from_u64(5);
        let t0 = Instant::now();
        let mut s = Search::new(BASE, MAX, t0);
        s.start(t0, &mut rng);
        assert_eq!(s.misses(), 0);
        let mut now = s.wake().unwrap();
        s.sent(1, 1);
        // Loading: the group is at that coordinator in a moment; ask it again.
        s.answered(refused(ErrorCode::CoordinatorLoading), "a:1", now, &mut rng);
        assert_eq!(s.misses(), 0);
        now = s.wake().unwrap();
        s.sent(1, 2);
        // Nobody known there: the next question goes elsewhere, after a backoff.
        s.answered(refused(ErrorCode::NotCoordinator), "a:1", now, &mut rng);
        assert_eq!(s.misses(), 1);
        assert!(s.wake().unwrap() >= now);
        s.sent(1, 3);
        s.answered(found(""), "a:1", now, &mut rng);
        assert_eq!(s.misses(), 2);
        // The connection to the next address cannot be made: one more along.
        let before = s.wake().unwrap();
        s.missed(before, &mut rng);
        assert_eq!(s.misses(), 3);
        assert!(s.is_active() && s.wake().unwrap() >= before);
        // A question awaiting its answer on a link is known to be there.
        s.sent(4, 4);
        assert!(s.asked_on(4) && !s.asked_on(1));
        // Found: a later search starts from the first address again.
        assert!(s.answered(found("b:1"), "a:1", now, &mut rng).is_some());
        s.start(now, &mut rng);
        assert_eq!(s.misses(), 0);
    }

    #[test]
    fn a_question_lost_with_its_connection_is_asked_again() {
        let mut rng = SmallRng::seed_from_u64(3);
        let t0 = Instant::now();
        let mut s = Search::new(BASE, MAX, t0);
        s.start(t0, &mut rng);
        let at = s.wake().unwrap();
        s.sent(3, 9);
        s.link_lost(4);
        assert!(!s.due(at), "another connection's loss changes nothing");
        s.link_lost(3);
        assert!(s.due(at));
    }

    #[test]
    fn a_group_bounced_around_is_asked_about_less_and_less_often() {
        let mut rng = SmallRng::seed_from_u64(4);
        let t0 = Instant::now();
        let mut s = Search::new(BASE, Duration::from_millis(400), t0);
        // Placed, then moved again at once, many times: the first ask of each search
        // comes later and later (within the backoff bound).
        let mut now = t0 + Duration::from_secs(1);
        let mut last_bound = Duration::ZERO;
        for round in 0..6 {
            s.start(now, &mut rng);
            let at = s.wake().unwrap();
            let bound = (BASE * (1 << round)).min(Duration::from_millis(400));
            assert!(at - now <= bound);
            last_bound = bound;
            s.sent(1, 1);
            assert!(s.answered(found("b:1"), "a:1", at, &mut rng).is_some());
            now = at + Duration::from_millis(1);
        }
        assert_eq!(last_bound, Duration::from_millis(400));
        // Placed for longer than the largest delay: the next search starts over.
        now += Duration::from_millis(400);
        s.start(now, &mut rng);
        assert!(s.wake().unwrap() - now <= BASE);
    }

    #[test]
    fn an_unspecified_host_is_the_answering_coordinator_s() {
        assert_eq!(reachable("10.0.0.2:7070", "10.0.0.1:7070"), "10.0.0.2:7070");
        assert_eq!(reachable("0.0.0.0:7070", "10.0.0.1:7171"), "10.0.0.1:7070");
        assert_eq!(
            reachable("[::]:7070", "host.example:7171"),
            "host.example:7070"
        );
        assert_eq!(reachable(":7070", "[fe80::1]:7171"), "[fe80::1]:7070");
        assert_eq!(reachable("name.example:7070", "x:1"), "name.example:7070");
        assert_eq!(reachable("no-port", "x:1"), "no-port");
    }
}
