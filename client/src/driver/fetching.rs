//! Fetches of committed offsets that follow their group: a fetch answered
//! `not_coordinator` (the group is served elsewhere) or `coordinator_loading` (it is
//! being loaded, or handed over) is *parked*, finds the group's coordinator as a
//! membership does (`finding.rs`, `asking.rs`), and goes on there from the page it had
//! reached. It follows at most [`MAX_FOLLOWS`] times and for at most [`FOLLOW_FOR`];
//! then it fails as unavailable, saying why.

use super::*;

/// The most times a fetch goes looking for its group's coordinator.
pub(super) const MAX_FOLLOWS: u32 = 8;

/// How long a fetch may spend looking for its group's coordinator, from its first
/// refusal.
pub(super) const FOLLOW_FOR: Duration = Duration::from_secs(10);

/// A fetch looking for its group's coordinator, or waiting for the connection to it.
pub(super) struct Parked {
    /// The fetch, with its search.
    pub(super) pages: Box<FetchPages>,
    /// The link to the coordinator found, while its connection is being made.
    link: Option<LinkId>,
    /// It fails as unavailable at this instant.
    deadline: Instant,
    /// Why it last could not go on.
    reason: String,
}

impl Parked {
    pub(super) fn group(&self) -> &str {
        &self.pages.group
    }
}

impl Driver {
    /// `pages` was answered `reason` (`not_coordinator` or `coordinator_loading`): it
    /// looks for its group's coordinator, if it may still follow.
    pub(super) fn park_fetch(&mut self, mut pages: Box<FetchPages>, reason: String, now: Instant) {
        pages.follows += 1;
        let deadline = *pages.following_since.get_or_insert(now) + FOLLOW_FOR;
        if pages.follows > MAX_FOLLOWS || now >= deadline {
            let _ = pages.reply.send(Err(RequestError::Unavailable {
                reason: format!("the group's coordinator was not found: {reason}"),
            }));
            return;
        }
        debug!(group = %pages.group, %reason, "fetch of offsets: finding the group's coordinator");
        // Each follow soon after the last waits longer before its first question, as a
        // membership's does.
        pages.search.start(now.into_std(), &mut self.rng);
        let key = self.next_fetch;
        self.next_fetch += 1;
        self.fetches.insert(
            key,
            Parked {
                pages,
                link: None,
                deadline,
                reason,
            },
        );
    }

    /// The coordinator of fetch `key`'s group is at `addr`: it goes on there once
    /// connected.
    pub(super) fn fetch_found(&mut self, key: u64, addr: String, now: Instant) {
        let link = self
            .link_to(&addr)
            .unwrap_or_else(|| self.new_link(addr, now));
        if let Some(parked) = self.fetches.get_mut(&key) {
            parked.link = Some(link);
        }
        self.resume_fetches(link);
    }

    /// Sends the parked fetches waiting for `link`, if it is connected.
    pub(super) fn resume_fetches(&mut self, link: LinkId) {
        let Some(paged) = self
            .links
            .get(&link)
            .and_then(|l| l.conn.as_ref())
            .map(|c| c.features.paged_fetch)
        else {
            return;
        };
        let ready: Vec<u64> = self
            .fetches
            .iter()
            .filter(|(_, f)| f.link == Some(link))
            .map(|(key, _)| *key)
            .collect();
        for key in ready {
            if let Some(parked) = self.fetches.remove(&key) {
                let request = parked.pages.request(paged, parked.pages.after.clone());
                self.send(link, Pending::Fetch(parked.pages), request);
            }
        }
    }

    /// The connection of `link` could not be made: the fetches waiting for it look
    /// for their coordinator again.
    pub(super) fn fetches_unreachable(&mut self, link: LinkId, reason: &str, now: Instant) {
        let waiting: Vec<u64> = self
            .fetches
            .iter()
            .filter(|(_, f)| f.link == Some(link))
            .map(|(key, _)| *key)
            .collect();
        for key in waiting {
            if let Some(parked) = self.fetches.remove(&key) {
                self.park_fetch(parked.pages, reason.to_owned(), now);
            }
        }
    }

    /// Fails the fetches that have looked for their coordinator for too long.
    pub(super) fn expire_fetches(&mut self, now: Instant) {
        let expired: Vec<u64> = self
            .fetches
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(key, _)| *key)
            .collect();
        for key in expired {
            if let Some(parked) = self.fetches.remove(&key) {
                let _ = parked.pages.reply.send(Err(RequestError::Unavailable {
                    reason: format!(
                        "the group's coordinator was not found within {FOLLOW_FOR:?}: {}",
                        parked.reason
                    ),
                }));
            }
        }
    }

    /// The links parked fetches wait for.
    pub(super) fn fetch_links(&self) -> impl Iterator<Item = LinkId> + '_ {
        self.fetches.values().filter_map(|f| f.link)
    }

    /// When the first parked fetch expires.
    pub(super) fn fetch_deadline(&self) -> Option<Instant> {
        self.fetches.values().map(|f| f.deadline).min()
    }
}
