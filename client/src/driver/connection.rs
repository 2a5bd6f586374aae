//! One connection: connecting, the version handshake, the writer task, and reading
//! the next frame or learning that the connection is gone.

use super::*;

/// An established, handshaken connection.
pub(crate) struct Connection {
    pub(super) stream: SplitStream<Transport>,
    pub(super) writer: mpsc::UnboundedSender<Frame>,
    pub(super) writer_task: JoinHandle<Result<(), FrameError>>,
    pub(super) max_frame_size: usize,
    /// What the coordinator supports beyond version 0.
    pub(super) features: Features,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.writer_task.abort();
    }
}

/// Connects to `addr` (over TLS if configured) and performs the version handshake,
/// within the connect timeout, through [`crate::raw::open`]; then checks what the
/// coordinator supports.
pub(crate) async fn open(addr: &str, config: &ClientConfig) -> Result<Connection, ConnectError> {
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
    };
    let max_frame_size = match usize::try_from(versions.max_frame_size) {
        Ok(0) | Err(_) => config.max_frame_size,
        Ok(n) => n,
    };
    let (sink, stream) = transport.split();
    let (writer, rx) = mpsc::unbounded_channel();
    let writer_task = tokio::spawn(write_loop(sink, rx));
    Ok(Connection {
        stream,
        writer,
        writer_task,
        max_frame_size,
        features,
    })
}

pub(super) async fn write_loop(
    mut sink: SplitSink<Transport, Frame>,
    mut rx: mpsc::UnboundedReceiver<Frame>,
) -> Result<(), FrameError> {
    while let Some(frame) = rx.recv().await {
        sink.feed(frame).await?;
        while let Ok(frame) = rx.try_recv() {
            sink.feed(frame).await?;
        }
        sink.flush().await?;
    }
    Ok(())
}

pub(super) enum ConnEvent {
    Frame(Frame),
    Lost(String),
}

/// The next frame from the connection, or why it is gone; never resolves without one.
pub(super) async fn conn_event(conn: &mut Option<Connection>) -> ConnEvent {
    let Some(c) = conn else {
        return std::future::pending().await;
    };
    tokio::select! {
        frame = c.stream.next() => match frame {
            Some(Ok(frame)) => ConnEvent::Frame(frame),
            Some(Err(e)) => ConnEvent::Lost(format!("read failed: {e}")),
            None => ConnEvent::Lost("closed by the coordinator".to_owned()),
        },
        result = &mut c.writer_task => ConnEvent::Lost(match result {
            Ok(Err(e)) => format!("write failed: {e}"),
            _ => "writer stopped".to_owned(),
        }),
    }
}

pub(super) async fn join_connect(
    task: &mut Option<JoinHandle<Result<Connection, ConnectError>>>,
) -> Result<Result<Connection, ConnectError>, tokio::task::JoinError> {
    match task {
        Some(t) => t.await,
        None => std::future::pending().await,
    }
}
