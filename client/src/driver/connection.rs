//! One connection: connecting, the version handshake, and the reader and writer tasks
//! that move its frames between the socket and the connection task.

use super::*;

/// A connection opened and handshaken, not yet started.
pub(crate) struct Opened {
    transport: Transport,
    max_frame_size: usize,
    features: Features,
}

/// An established, handshaken connection of one link.
pub(super) struct Connection {
    pub(super) writer: mpsc::UnboundedSender<Frame>,
    tasks: [JoinHandle<()>; 2],
    pub(super) max_frame_size: usize,
    /// What the coordinator supports beyond version 0.
    pub(super) features: Features,
}

impl Drop for Connection {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What a link's tasks report to the connection task, tagged with the link and the
/// attempt (`epoch`) they belong to: reports of an earlier attempt are ignored.
pub(super) struct Inbound {
    pub(super) link: LinkId,
    pub(super) epoch: u64,
    pub(super) event: ConnEvent,
}

pub(super) enum ConnEvent {
    /// A connection attempt ended.
    Opened(Box<Result<Opened, ConnectError>>),
    Frame(Frame),
    Lost(String),
}

/// Connects to `addr` (over TLS if configured) and performs the version handshake,
/// within the connect timeout, through [`crate::raw::open`]; then checks what the
/// coordinator supports.
pub(crate) async fn open(addr: &str, config: &ClientConfig) -> Result<Opened, ConnectError> {
    let (transport, versions) = crate::raw::open(addr, &config.connect_options()).await?;
    let needed = [
        (ApiKey::Join as u16, "join"),
        (ApiKey::Heartbeat as u16, "heartbeat"),
        (ApiKey::Leave as u16, "leave"),
        (ApiKey::CommitOffsets as u16, "commit_offsets"),
        (ApiKey::FetchOffsets as u16, "fetch_offsets"),
        (PushKey::Assignment as u16, "assignment push"),
        (PushKey::Revoke as u16, "revoke push"),
        (PushKey::Expelled as u16, "expelled push"),
    ];
    for (key, api) in needed {
        let ok = versions.versions.iter().any(|r| {
            r.api_key == key && (r.min_version..=r.max_version).contains(&CURRENT_VERSION)
        });
        if !ok {
            return Err(ConnectError::Unsupported { api });
        }
    }
    // Optional: without them the member falls back to session-long leases, to
    // letting held partitions wait for the lease, and to one Heartbeat per member.
    let supports = |key: ApiKey, version: u16| {
        versions
            .versions
            .iter()
            .any(|r| r.api_key == key as u16 && (r.min_version..=r.max_version).contains(&version))
    };
    let features = Features {
        lease_timeout: supports(ApiKey::Join, 1),
        relinquish: supports(ApiKey::Relinquish, CURRENT_VERSION),
        join_detector: supports(ApiKey::Join, 2),
        heartbeats: supports(ApiKey::Heartbeats, CURRENT_VERSION),
        paged_fetch: supports(ApiKey::FetchOffsets, 1),
        join_placement: supports(ApiKey::Join, 3),
        // Loads ride on lone and batched beats alike.
        loads: supports(ApiKey::Heartbeat, 1)
            && (!supports(ApiKey::Heartbeats, CURRENT_VERSION) || supports(ApiKey::Heartbeats, 1)),
    };
    let max_frame_size = match usize::try_from(versions.max_frame_size) {
        Ok(0) | Err(_) => config.max_frame_size,
        Ok(n) => n,
    };
    Ok(Opened {
        transport,
        max_frame_size,
        features,
    })
}

impl Connection {
    /// Starts the reader and writer of `opened`, which report to `inbound` as `link`'s
    /// attempt `epoch`.
    pub(super) fn start(
        opened: Opened,
        inbound: &mpsc::UnboundedSender<Inbound>,
        link: LinkId,
        epoch: u64,
    ) -> Self {
        let (sink, stream) = opened.transport.split();
        let (writer, rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_loop(stream, inbound.clone(), link, epoch));
        let writer_task = tokio::spawn(write_loop(sink, rx, inbound.clone(), link, epoch));
        Self {
            writer,
            tasks: [reader, writer_task],
            max_frame_size: opened.max_frame_size,
            features: opened.features,
        }
    }
}

/// Hands every frame read to the connection task, then why the connection ended.
async fn read_loop(
    mut stream: SplitStream<Transport>,
    inbound: mpsc::UnboundedSender<Inbound>,
    link: LinkId,
    epoch: u64,
) {
    loop {
        let event = match stream.next().await {
            Some(Ok(frame)) => ConnEvent::Frame(frame),
            Some(Err(e)) => ConnEvent::Lost(format!("read failed: {e}")),
            None => ConnEvent::Lost("closed by the coordinator".to_owned()),
        };
        let last = matches!(event, ConnEvent::Lost(_));
        if inbound.send(Inbound { link, epoch, event }).is_err() || last {
            return;
        }
    }
}

/// Writes what the connection task queues, as much as is queued per flush; reports a
/// failed write.
async fn write_loop(
    mut sink: SplitSink<Transport, Frame>,
    mut rx: mpsc::UnboundedReceiver<Frame>,
    inbound: mpsc::UnboundedSender<Inbound>,
    link: LinkId,
    epoch: u64,
) {
    let result: Result<(), FrameError> = async {
        while let Some(frame) = rx.recv().await {
            sink.feed(frame).await?;
            while let Ok(frame) = rx.try_recv() {
                sink.feed(frame).await?;
            }
            sink.flush().await?;
        }
        Ok(())
    }
    .await;
    let reason = match result {
        Err(e) => format!("write failed: {e}"),
        Ok(()) => "writer stopped".to_owned(),
    };
    let _ = inbound.send(Inbound {
        link,
        epoch,
        event: ConnEvent::Lost(reason),
    });
}

/// Opens a connection to `addr` for `link`'s attempt `epoch`, reporting the outcome
/// to `inbound`.
pub(super) fn spawn_open(
    addr: String,
    config: ClientConfig,
    inbound: mpsc::UnboundedSender<Inbound>,
    link: LinkId,
    epoch: u64,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let result = open(&addr, &config).await;
        let _ = inbound.send(Inbound {
            link,
            epoch,
            event: ConnEvent::Opened(Box::new(result)),
        });
    })
}
