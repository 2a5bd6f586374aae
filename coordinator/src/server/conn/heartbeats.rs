//! A Heartbeats request whose beats span several shards, or some of whose beats are
//! answered here (denied by access, or of groups this coordinator does not serve):
//! split, one part per shard, and joined into one answer (see [`Joiner`]).

use rollcall_protocol::{HeartbeatResult, HeartbeatsResponse};

use super::*;

impl Connection {
    /// A Heartbeats request whose beats belong to several shards, or some of whose
    /// beats are denied (`denied[i]`; empty when none is) or not served here: each
    /// shard gets its beats, denied beats are answered `not_authorized`, beats of
    /// groups not served here `not_coordinator` or `coordinator_loading`, and one
    /// answer goes back once every part is answered.
    pub(super) fn split_heartbeats(
        &mut self,
        correlation_id: u32,
        request: HeartbeatsRequest,
        received: Instant,
        denied: &[bool],
    ) -> Option<Exit> {
        let shards = self.ctx.shards.len();
        let beats = request.beats.len();
        // Each beat's shard (`shards` for a beat answered here), then parts of exactly
        // their size: grown by pushes, they moved every beat already in them on each
        // doubling.
        let single = self.ctx.directory.is_single();
        let to: Vec<usize> = request
            .beats
            .iter()
            .enumerate()
            .map(|(i, beat)| match denied.get(i) {
                Some(true) => shards,
                _ if !single && !self.ctx.directory.is_here(&beat.group) => shards,
                _ => shard_of(&beat.group, shards),
            })
            .collect();
        let mut sizes = vec![0usize; shards + 1];
        for &shard in &to {
            sizes[shard] += 1;
        }
        if let Some(full) = (0..shards).find(|&s| sizes[s] > 0 && self.ctx.shards[s].is_full()) {
            let request = routing::Held::Split(request, denied.to_vec());
            self.hold(full, correlation_id, received, request);
            return None;
        }
        let mut parts: Vec<(Vec<usize>, Vec<_>)> = sizes[..shards]
            .iter()
            .map(|&n| (Vec::with_capacity(n), Vec::with_capacity(n)))
            .collect();
        let mut refused = Vec::with_capacity(sizes[shards]);
        let mut results = Vec::with_capacity(sizes[shards]);
        for ((i, beat), shard) in request.beats.into_iter().enumerate().zip(to) {
            if shard == shards {
                let answer = match denied.get(i) {
                    Some(true) => access::not_authorized(ApiKey::Heartbeats),
                    _ => self
                        .gate(ApiKey::Heartbeats, &beat.group)
                        // Served here after all: moved in since it was looked up. The
                        // client sends it again.
                        .unwrap_or_else(|| {
                            Response::error(
                                ApiKey::Heartbeats as u16,
                                ErrorCode::CoordinatorLoading,
                                "the group's coordinator changed; retry",
                            )
                        }),
                };
                refused.push(i);
                results.push(HeartbeatResult::from_response(answer));
                continue;
            }
            let part = &mut parts[shard];
            part.0.push(i);
            part.1.push(beat);
        }
        let used =
            parts.iter().filter(|p| !p.0.is_empty()).count() + usize::from(!refused.is_empty());
        let joiner = Joiner::new(
            self.handle.clone(),
            correlation_id,
            received,
            beats,
            used,
            self.last_joiner.take(),
        );
        self.last_joiner = Some(joiner.clone());
        if !refused.is_empty() {
            Reply::Part {
                joiner: joiner.clone(),
                indices: refused,
            }
            .deliver(
                Response::Heartbeats(HeartbeatsResponse { results }),
                &self.ctx.metrics,
                true,
            );
        }
        let mut exit = None;
        for (shard, (indices, beats)) in parts.into_iter().enumerate() {
            if indices.is_empty() {
                continue;
            }
            let reply = Reply::Part {
                joiner: joiner.clone(),
                indices,
            };
            let request = Request::Heartbeats(HeartbeatsRequest { beats });
            if let Some(e) = self.hand_to_shard(shard, request, reply) {
                exit = Some(e);
            }
        }
        exit
    }
}
