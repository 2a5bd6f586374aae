//! The echo server of `floor` (the hidden `floor-server` subcommand): a tokio
//! runtime of its own, one task per connection, answering each heartbeat frame with a
//! canned answer given the request's correlation id.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rollcall_protocol::{
    Body, Codec, Frame, HeartbeatResponse, HeartbeatResult, HeartbeatsRequest, HeartbeatsResponse,
    Request, Response, DEFAULT_MAX_FRAME_SIZE, LENGTH_PREFIX_SIZE,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;

use super::{FloorServerArgs, READ_ROOM};

/// Where an encoded frame's correlation id starts: after the length prefix, the kind
/// (1 byte), the API key (2) and the API version (2).
const CORRELATION_AT: usize = LENGTH_PREFIX_SIZE + 5;

/// The generation and session timeout the canned answers carry (any values do: they
/// only give them the size of rollcall's), in a Heartbeat response or in each result of
/// a Heartbeats response.
pub(super) const CANNED: HeartbeatResponse = HeartbeatResponse {
    generation: 1,
    session_timeout_ms: 10_000,
};

/// The answer to every heartbeat, length prefix included, correlation id 0.
pub(super) fn canned_answer() -> Result<Bytes, String> {
    encode_answer(Response::Heartbeat(CANNED))
}

/// The answer to every Heartbeats request of `beats` beats: as many results, each the
/// OK result rollcall gives (the Heartbeat answer's generation and session timeout);
/// length prefix included, correlation id 0.
pub(super) fn canned_batch_answer(beats: usize) -> Result<Bytes, String> {
    let ok = HeartbeatResult::from_response(Response::Heartbeat(CANNED));
    encode_answer(Response::Heartbeats(HeartbeatsResponse {
        results: vec![ok; beats],
    }))
}

fn encode_answer(response: Response) -> Result<Bytes, String> {
    let mut buf = BytesMut::new();
    Frame::response(0, response)
        .encode(&mut buf, DEFAULT_MAX_FRAME_SIZE)
        .map_err(|e| format!("cannot encode the answer: {e}"))?;
    Ok(buf.freeze())
}

/// Appends `answer` to `out` with `correlation_id` in place of its own.
pub(super) fn put_answer(out: &mut BytesMut, answer: &[u8], correlation_id: u32) {
    let at = out.len() + CORRELATION_AT;
    out.extend_from_slice(answer);
    out[at..at + 4].copy_from_slice(&correlation_id.to_be_bytes());
}

/// The `floor-server` subcommand: runs on a runtime of its own (not the generator's),
/// built here.
pub(crate) fn serve(args: &FloorServerArgs) -> ExitCode {
    match serve_until_told(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rollcall-bench floor-server: {e}");
            ExitCode::from(2)
        }
    }
}

fn serve_until_told(args: &FloorServerArgs) -> Result<(), String> {
    if !args.listen.ip().is_loopback() {
        return Err(format!(
            "--listen {} is not a loopback address: the floor is measured on 127.0.0.1 only",
            args.listen
        ));
    }
    let answer = canned_answer()?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    match args.server_threads {
        Some(0) => return Err("--server-threads must be at least 1".to_owned()),
        Some(n) => {
            builder.worker_threads(n);
        }
        None => {}
    }
    let runtime = builder
        .enable_all()
        .thread_name("floor-server")
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let stop = CancellationToken::new();
    {
        // Stdin closed: the generator is done (or gone).
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("floor-stdin".into())
            .spawn(move || {
                let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
                stop.cancel();
            })
            .map_err(|e| format!("stdin thread: {e}"))?;
    }
    let lifetime = args.lifetime;
    let listen = args.listen;
    let result = runtime.block_on(async move {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{addr}")
                .and_then(|()| out.flush())
                .map_err(|e| format!("cannot print the address: {e}"))?;
        }
        let end = tokio::time::sleep(lifetime);
        tokio::pin!(end);
        let mut accept_errors = 0u64;
        // Bounded by the lifetime.
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = &mut end => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        tokio::spawn(echo(stream, answer.clone()));
                    }
                    Err(e) => {
                        // Out of files, most likely: say so once, and let a close make room.
                        accept_errors += 1;
                        if accept_errors == 1 {
                            eprintln!("rollcall-bench floor-server: accept failed: {e}");
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
            }
        }
        Ok(())
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// One connection: every Heartbeat request answered with `answer`, every Heartbeats
/// request with the canned answer of its beat count (encoded when the connection first
/// sees that count, kept while the count stays the same), each given the request's
/// correlation id; whatever one read brought is answered in one write.
async fn echo(mut stream: TcpStream, answer: Bytes) {
    let _ = stream.set_nodelay(true);
    let mut codec = Codec::default();
    let mut read = BytesMut::new();
    let mut write = BytesMut::new();
    let mut batch_answer: Option<(usize, Bytes)> = None;
    let mut room = READ_ROOM;
    // Bounded by the peer: ends when it closes, fails or sends anything else.
    loop {
        // Reclaims the room of the frames already decoded (they are dropped by now).
        read.reserve(room);
        match stream.read_buf(&mut read).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        // Bounded: each turn takes a frame out of what was read.
        loop {
            let before = read.len();
            match codec.decode(&mut read) {
                Ok(Some(Frame {
                    correlation_id,
                    body: Body::Request(Request::Heartbeat(_)),
                })) => put_answer(&mut write, &answer, correlation_id),
                Ok(Some(Frame {
                    correlation_id,
                    body: Body::Request(Request::Heartbeats(HeartbeatsRequest { beats })),
                })) => {
                    let n = beats.len();
                    if batch_answer.as_ref().is_none_or(|(count, _)| *count != n) {
                        match canned_batch_answer(n) {
                            Ok(canned) => batch_answer = Some((n, canned)),
                            Err(_) => return,
                        }
                    }
                    if let Some((_, canned)) = &batch_answer {
                        put_answer(&mut write, canned, correlation_id);
                    }
                    // The next frame of this size is read whole in one read, with room to
                    // spare: a read that fills the buffer leaves the socket marked readable,
                    // and the next read would be one more system call, failing.
                    room = room.max(before - read.len() + READ_ROOM);
                }
                Ok(None) => break,
                // The floor speaks nothing but heartbeats.
                Ok(Some(_)) | Err(_) => return,
            }
        }
        if !write.is_empty() {
            if stream.write_all(&write).await.is_err() {
                return;
            }
            write.clear();
        }
    }
}
