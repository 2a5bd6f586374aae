//! The writing half of a connection: drains its queue of encoded frames into the
//! socket, many frames per flush, and closes it gracefully (waiting a bounded time for
//! the writer, then lingering so the peer reads the last answer before the reset).

use super::*;

/// Writes queued frames (already encoded), up to `batch_limit` before each flush. Ends
/// when every sender is gone (after writing what was queued) or the connection is
/// killed. A frame's bytes leave the queue's count once handed to the socket.
pub(super) async fn write_loop(
    mut queue: mpsc::Receiver<Bytes>,
    mut sink: BufWriter<OwnedWriteHalf>,
    state: Arc<ConnState>,
    batch_limit: usize,
) {
    let mut batch = Vec::with_capacity(batch_limit);
    loop {
        let received = tokio::select! {
            biased;
            () = state.kill.cancelled() => return,
            n = queue.recv_many(&mut batch, batch_limit) => n,
        };
        if received == 0 {
            break;
        }
        let bytes: usize = batch.iter().map(Bytes::len).sum();
        let written = tokio::select! {
            biased;
            () = state.kill.cancelled() => return,
            written = write_batch(&mut sink, &mut batch) => written,
        };
        state.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
        if let Err(e) = written {
            debug!(error = %e, "write failed; closing connection");
            state.kill.cancel();
            return;
        }
    }
    let _ = tokio::select! {
        () = state.kill.cancelled() => Ok(()),
        closed = sink.shutdown() => closed,
    };
}

pub(super) async fn write_batch(
    sink: &mut BufWriter<OwnedWriteHalf>,
    batch: &mut Vec<Bytes>,
) -> std::io::Result<()> {
    for frame in batch.drain(..) {
        sink.write_all(&frame).await?;
    }
    sink.flush().await
}

/// Waits for the writer to drain and close, at most `limit`; then kills it.
pub(super) async fn finish_writer(writer: JoinHandle<()>, state: &ConnState, limit: Duration) {
    let abort = writer.abort_handle();
    if tokio::time::timeout(limit, writer).await.is_err() {
        state.kill.cancel();
        abort.abort();
    }
}

/// Reads and discards input until the peer closes or [`LINGER`] passes, so the peer
/// reads our last frames before it sees the connection go.
pub(super) async fn linger(mut read: OwnedReadHalf) {
    let mut scratch = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        loop {
            match read.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
}
