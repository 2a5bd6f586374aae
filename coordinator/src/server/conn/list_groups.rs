//! ListGroups across shards: every shard lists its own groups, and the answer merges
//! them.

use rollcall_protocol::PageFit;

use super::*;

impl Connection {
    /// Asks every shard for its groups and answers with all of them, or with a page
    /// (version 1): each shard gives its own page after the cursor, and the answer is
    /// their first groups in order, up to the first group some shard may have left out,
    /// the limit and the frame.
    pub(super) fn list_groups(
        &mut self,
        correlation_id: u32,
        request: ListGroupsRequest,
        received: Instant,
    ) {
        let mut groups = Vec::new();
        let mut failure = None;
        // The last group of each shard that has more after it: a group past the first
        // of them may come after groups that shard has not listed yet.
        let mut cut: Option<String> = None;
        for shard in &self.ctx.shards {
            match shard.list_groups(self.id, request.clone()) {
                Response::ListGroups(part) => {
                    if part.more == Some(true) {
                        if let Some(last) = part.groups.last() {
                            if cut.as_ref().is_none_or(|c| last.group < *c) {
                                cut = Some(last.group.clone());
                            }
                        }
                    }
                    groups.extend(part.groups);
                }
                other => failure = Some(other),
            }
        }
        groups.sort_by(|a, b| a.group.cmp(&b.group));
        if let Some(auth) = &mut self.auth {
            // Groups the principal may not describe are not shown: not even their names.
            groups.retain(|g| auth.allows(Operation::Describe, &g.group));
        }
        let response = match (failure, request.page) {
            (Some(failure), _) => failure,
            (None, None) => Response::ListGroups(ListGroupsResponse { groups, more: None }),
            (None, Some(page)) => {
                let mut more = cut.is_some();
                if let Some(cut) = &cut {
                    groups.retain(|g| g.group <= *cut);
                }
                let mut fit = PageFit::new(
                    page.limit,
                    self.ctx.codec.max_frame_size(),
                    ListGroupsResponse {
                        groups: Vec::new(),
                        more: Some(false),
                    }
                    .encoded_len(),
                );
                let kept = groups
                    .iter()
                    .take_while(|g| fit.take(g.encoded_len()))
                    .count();
                more |= kept < groups.len();
                groups.truncate(kept);
                Response::ListGroups(ListGroupsResponse {
                    groups,
                    more: Some(more),
                })
            }
        };
        self.reply(correlation_id, response, ApiKey::ListGroups, received);
    }
}
