//! What the application asks of the connection task: its commands, and the fetch of
//! committed offsets a page at a time.

use super::*;

/// A request from the application to the task.
#[derive(Debug)]
pub(crate) enum Command {
    Join {
        key: u64,
        settings: Box<Settings>,
        shared: Arc<MemberShared>,
        events: mpsc::UnboundedSender<Delivery>,
        reply: oneshot::Sender<Result<(), FatalError>>,
    },
    /// The application asked for the event after the one that carried `ticket`: it has
    /// stopped acting on what that event said was lost.
    Taken {
        key: u64,
        ticket: Ticket,
    },
    Commit {
        key: u64,
        offsets: Vec<Offset>,
        reply: oneshot::Sender<Result<(), CommitError>>,
    },
    /// The application released these partitions, each answering the
    /// `RevokeRequested` of the generation given with it.
    Ack {
        key: u64,
        partitions: Vec<(TopicPartition, u32)>,
    },
    Leave {
        key: u64,
        timeout: Duration,
        reply: oneshot::Sender<Result<(), LeaveError>>,
    },
    Drop {
        key: u64,
    },
    /// Loads for the member's next heartbeat.
    Load {
        key: u64,
        loads: Vec<(TopicPartition, f64)>,
    },
    /// A Drain (`drained`) or undrain of the member itself, on its own connection.
    DrainSelf {
        key: u64,
        drained: bool,
        reply: oneshot::Sender<Result<Response, RequestError>>,
    },
    /// An operator's request about `group`: sent where a member of the group lives,
    /// or else on the bootstrap connection; the answer as it comes.
    Admin {
        group: String,
        request: Request,
        reply: oneshot::Sender<Result<Response, RequestError>>,
    },
    Fetch {
        group: String,
        topics: Vec<String>,
        reply: oneshot::Sender<Result<BTreeMap<TopicPartition, Committed>, RequestError>>,
    },
}

/// A fetch of committed offsets under way: a page at a time where the coordinator
/// reads them so (FetchOffsets version 1), in one answer otherwise.
pub(super) struct FetchPages {
    pub(super) reply: oneshot::Sender<Result<BTreeMap<TopicPartition, Committed>, RequestError>>,
    pub(super) group: String,
    topics: Vec<String>,
    pub(super) got: BTreeMap<TopicPartition, Committed>,
    /// The last offset of the last page received: where the next page starts.
    pub(super) after: Option<OffsetCursor>,
    /// How many times it went looking for its group's coordinator (`fetching.rs`),
    /// and since when.
    pub(super) follows: u32,
    pub(super) following_since: Option<Instant>,
    pub(super) search: Search,
}

impl FetchPages {
    /// The request for the page after `after` (the first page if `None`), or the whole
    /// answer at version 0.
    pub(super) fn request(&self, paged: bool, after: Option<OffsetCursor>) -> Request {
        Request::FetchOffsets(FetchOffsetsRequest {
            group: self.group.clone(),
            topics: self.topics.clone(),
            page: paged.then_some(Page { after, limit: 0 }),
        })
    }
}

impl Driver {
    pub(super) fn on_command(&mut self, command: Command, now: Instant) {
        let std_now = now.into_std();
        match command {
            Command::Join {
                key,
                settings,
                shared,
                events,
                reply,
            } => {
                let backoff = BackoffConfig {
                    base: self.config.reconnect_base,
                    max: self.config.reconnect_max,
                };
                let mut m = Membership::new(*settings, backoff, self.rng.gen(), std_now);
                // A new membership starts on the bootstrap link; the coordinator there
                // serves the group, or says where to find the one that does.
                let bootstrap = self.links.get(&BOOTSTRAP);
                if let Some(conn) = bootstrap.and_then(|l| l.conn.as_ref()) {
                    m.handle_connected(std_now, conn.features);
                }
                let mut search = Search::new(
                    self.config.reconnect_base,
                    self.config.reconnect_max,
                    std_now,
                );
                search.placed(std_now);
                self.slots.insert(
                    key,
                    Slot {
                        m,
                        link: Some(BOOTSTRAP),
                        search,
                        shared,
                        events,
                        join_reply: Some(reply),
                        leave_replies: Vec::new(),
                        commits: HashMap::new(),
                    },
                );
            }
            Command::Commit {
                key,
                offsets,
                reply,
            } => {
                let Some(slot) = self.slots.get_mut(&key) else {
                    let _ = reply.send(Err(CommitError::Closed));
                    return;
                };
                if offsets.is_empty() {
                    let _ = reply.send(Ok(()));
                    return;
                }
                match slot.m.commit(offsets, std_now) {
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                    Ok((id, request)) => {
                        let link = slot.link.unwrap_or(BOOTSTRAP);
                        let max = self
                            .links
                            .get(&link)
                            .map_or(usize::MAX, Link::max_frame_size);
                        let frame = Frame::request(0, request);
                        if let Err(e) = frame.encode(&mut BytesMut::new(), max) {
                            slot.m.forget(id);
                            let _ = reply.send(Err(CommitError::Rejected {
                                code: ErrorCode::InvalidRequest,
                                message: format!("the commit cannot be sent: {e}"),
                            }));
                            return;
                        }
                        let Body::Request(request) = frame.body else {
                            return;
                        };
                        slot.commits.insert(id, reply);
                        self.send(link, Pending::Commit { key, id }, request);
                    }
                }
            }
            Command::Load { key, loads } => {
                if let Some(slot) = self.slots.get_mut(&key) {
                    slot.m.report_load(loads);
                }
            }
            Command::DrainSelf {
                key,
                drained,
                reply,
            } => {
                let Some(slot) = self.slots.get_mut(&key) else {
                    let _ = reply.send(Err(RequestError::Closed));
                    return;
                };
                match (slot.m.drain_request(drained), slot.link) {
                    (Err(e), _) => {
                        let _ = reply.send(Err(e));
                    }
                    (Ok(_), None) => {
                        let _ = reply.send(Err(RequestError::Unavailable {
                            reason: "looking for the group's coordinator".to_owned(),
                        }));
                    }
                    (Ok(request), Some(link)) => {
                        self.send(link, Pending::Ask(reply), request);
                    }
                }
            }
            Command::Admin {
                group,
                request,
                reply,
            } => {
                let link = self
                    .slots
                    .values()
                    .filter(|s| s.m.group() == group)
                    .find_map(|s| s.link)
                    .unwrap_or(BOOTSTRAP);
                let connected = self.links.get(&link).is_some_and(|l| l.conn.is_some());
                if !connected {
                    let _ = reply.send(Err(RequestError::Unavailable {
                        reason: "not connected to the coordinator".to_owned(),
                    }));
                    return;
                }
                self.send(link, Pending::Ask(reply), request);
            }
            Command::Taken { key, ticket } => {
                // Handled before the `Drop` the same handle may send next (one channel,
                // in order), and the Relinquish it makes due goes out with the `drive`
                // that follows every command.
                if let Some(slot) = self.slots.get_mut(&key) {
                    slot.m.handle_taken(ticket, std_now);
                }
            }
            Command::Ack { key, partitions } => {
                if let Some(slot) = self.slots.get_mut(&key) {
                    slot.m.ack(partitions, std_now);
                }
            }
            Command::Leave {
                key,
                timeout,
                reply,
            } => match self.slots.get_mut(&key) {
                Some(slot) => {
                    slot.leave_replies.push(reply);
                    slot.m.leave(timeout, std_now);
                }
                None => {
                    let _ = reply.send(Ok(()));
                }
            },
            Command::Drop { key } => {
                if let Some(slot) = self.slots.remove(&key) {
                    debug!(key, "member dropped without leaving");
                    if let (Some(leave), Some(link)) = (slot.m.abandon(), slot.link) {
                        self.send(link, Pending::Abandoned, leave);
                    }
                }
            }
            Command::Fetch {
                group,
                topics,
                reply,
            } => {
                // Where a member of the group lives, or else the bootstrap link.
                let link = self
                    .slots
                    .values()
                    .filter(|s| s.m.group() == group)
                    .find_map(|s| s.link)
                    .unwrap_or(BOOTSTRAP);
                let Some(conn) = self.links.get(&link).and_then(|l| l.conn.as_ref()) else {
                    let _ = reply.send(Err(RequestError::Unavailable {
                        reason: "not connected to the coordinator".into(),
                    }));
                    return;
                };
                let paged = conn.features.paged_fetch;
                let pages = Box::new(FetchPages {
                    reply,
                    group,
                    topics,
                    got: BTreeMap::new(),
                    after: None,
                    follows: 0,
                    following_since: None,
                    search: Search::new(
                        self.config.reconnect_base,
                        self.config.reconnect_max,
                        std_now,
                    ),
                });
                let request = pages.request(paged, None);
                self.send(link, Pending::Fetch(pages), request);
            }
        }
    }
}

pub(super) fn fetch_result(
    response: Response,
) -> Result<BTreeMap<TopicPartition, Committed>, RequestError> {
    match response {
        Response::FetchOffsets(r) => Ok(r
            .offsets
            .into_iter()
            .map(|o| {
                (
                    TopicPartition::new(o.topic, o.partition),
                    Committed {
                        offset: o.offset,
                        metadata: o.metadata,
                    },
                )
            })
            .collect()),
        Response::Error(e) => Err(match e.code.action() {
            ClientAction::Retry | ClientAction::FindCoordinator => RequestError::Unavailable {
                reason: format!("{}: {}", e.code, e.message),
            },
            _ => RequestError::Refused {
                code: e.code,
                message: e.message,
            },
        }),
        other => Err(RequestError::Unavailable {
            reason: format!("unexpected answer (api key {})", other.api_key()),
        }),
    }
}
