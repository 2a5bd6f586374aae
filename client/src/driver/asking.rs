//! Where FindCoordinator questions go. A search's first question goes on the bootstrap
//! connection (or, while it is down, any connection the client has). Each question
//! that found no coordinator to go to (a *miss*, `finding.rs`) moves the next one to
//! the next of the client's configured addresses, in turn: a connection is made there
//! if the client has none, and dropped once no question or member needs it. With one
//! configured address every question goes to it.

use super::*;

/// What a FindCoordinator is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seeker {
    /// The membership with this key.
    Member(u64),
    /// The fetch of offsets with this key (`fetching.rs`).
    Fetch(u64),
}

impl Driver {
    /// The search of `seeker`, if it is still under way.
    pub(super) fn search_mut(&mut self, seeker: Seeker) -> Option<&mut Search> {
        match seeker {
            Seeker::Member(key) => self.slots.get_mut(&key).map(|s| &mut s.search),
            Seeker::Fetch(key) => self.fetches.get_mut(&key).map(|f| &mut f.pages.search),
        }
    }

    /// Every search under way.
    fn searches(&self) -> impl Iterator<Item = (Seeker, &Search)> {
        let members = self
            .slots
            .iter()
            .map(|(key, s)| (Seeker::Member(*key), &s.search));
        let fetches = self
            .fetches
            .iter()
            .map(|(key, f)| (Seeker::Fetch(*key), &f.pages.search));
        members.chain(fetches).filter(|(_, s)| s.is_active())
    }

    /// The address a search's next question goes to after `misses` misses, if not the
    /// bootstrap connection.
    pub(super) fn ask_target(&self, misses: usize) -> Option<String> {
        let bootstrap = self.links.get(&BOOTSTRAP)?;
        turn_target(bootstrap.addrs(), bootstrap.at(), misses).map(str::to_owned)
    }

    /// The addresses searches are about to ask at (connections to keep or make).
    pub(super) fn ask_targets(&self) -> Vec<String> {
        self.searches()
            .filter_map(|(_, s)| self.ask_target(s.misses()))
            .collect()
    }

    /// The link a question after `misses` misses goes on now, if it is connected; a
    /// link to make is made (the question goes once it is connected).
    fn ask_link(&mut self, misses: usize, now: Instant) -> Option<LinkId> {
        let connected = |l: &Link| l.conn.is_some();
        let Some(addr) = self.ask_target(misses) else {
            return match self.links.get(&BOOTSTRAP) {
                Some(l) if connected(l) => Some(BOOTSTRAP),
                _ => self
                    .links
                    .iter()
                    .find(|(_, l)| connected(l))
                    .map(|(id, _)| *id),
            };
        };
        match self.link_to(&addr) {
            Some(id) => self.links.get(&id).filter(|l| connected(l)).map(|_| id),
            None => {
                self.new_link(addr, now);
                None
            }
        }
    }

    /// The link to `addr` (the bootstrap link if it is connected there), if any.
    pub(super) fn link_to(&self, addr: &str) -> Option<LinkId> {
        self.links
            .iter()
            .find(|(_, l)| l.addr() == addr)
            .map(|(id, _)| *id)
    }

    /// A new link to `addr`, to be connected by the task's loop.
    pub(super) fn new_link(&mut self, addr: String, now: Instant) -> LinkId {
        let id = self.next_link;
        self.next_link += 1;
        debug!(%addr, "a link to another coordinator");
        self.links
            .insert(id, Link::new(vec![addr], &self.config, now));
        id
    }

    /// Sends a FindCoordinator for every search that is due, where its misses say.
    pub(super) fn ask_coordinators(&mut self, now: Instant) {
        let std_now = now.into_std();
        let due: Vec<(Seeker, usize)> = self
            .searches()
            .filter(|(_, s)| s.due(std_now))
            .map(|(seeker, s)| (seeker, s.misses()))
            .collect();
        for (seeker, misses) in due {
            let group = match seeker {
                Seeker::Member(key) => self.slots.get(&key).map(|s| s.m.group().to_owned()),
                Seeker::Fetch(key) => self.fetches.get(&key).map(|f| f.group().to_owned()),
            };
            let (Some(group), Some(on)) = (group, self.ask_link(misses, now)) else {
                continue;
            };
            let request = Request::FindCoordinator(FindCoordinatorRequest { group });
            if let Some(correlation) = self.send(on, Pending::Find(seeker), request) {
                if let Some(search) = self.search_mut(seeker) {
                    search.sent(on, correlation);
                }
            }
        }
    }

    /// The connection of `link` (not the bootstrap link) is gone, or could not be
    /// made: a question awaiting its answer there, or about to go there, moves on to
    /// the next address.
    pub(super) fn questions_missed(&mut self, link: LinkId, addr: &str, now: Instant) {
        let std_now = now.into_std();
        let missed: Vec<Seeker> = self
            .searches()
            .filter(|(_, s)| {
                s.asked_on(link)
                    || (!s.asked_on_any() && self.ask_target(s.misses()).as_deref() == Some(addr))
            })
            .map(|(seeker, _)| seeker)
            .collect();
        for seeker in missed {
            let rng = &mut self.rng;
            let search = match seeker {
                Seeker::Member(key) => self.slots.get_mut(&key).map(|s| &mut s.search),
                Seeker::Fetch(key) => self.fetches.get_mut(&key).map(|f| &mut f.pages.search),
            };
            if let Some(search) = search {
                search.missed(std_now, rng);
            }
        }
    }
}

/// Of the client's addresses `addrs`, connected at `at`, the one a question goes to
/// after `misses` misses; `None`: the bootstrap connection itself.
fn turn_target(addrs: &[String], at: usize, misses: usize) -> Option<&str> {
    if addrs.is_empty() {
        return None;
    }
    let turn = misses % addrs.len();
    (turn != 0).then(|| addrs[(at + turn) % addrs.len()].as_str())
}

#[cfg(test)]
mod tests {
    use super::turn_target;

    #[test]
    fn questions_go_round_the_addresses_from_the_one_connected() {
        let addrs: Vec<String> = ["a:1", "b:1", "c:1"].map(String::from).to_vec();
        let at_b: Vec<Option<&str>> = (0..7).map(|m| turn_target(&addrs, 1, m)).collect();
        assert_eq!(
            at_b,
            [
                None,
                Some("c:1"),
                Some("a:1"),
                None,
                Some("c:1"),
                Some("a:1"),
                None
            ]
        );
        // One address: every question goes to the bootstrap connection.
        let one = vec!["a:1".to_owned()];
        assert!((0..4).all(|m| turn_target(&one, 0, m).is_none()));
        assert_eq!(turn_target(&[], 0, 3), None);
    }
}
