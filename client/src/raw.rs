//! The protocol one level below [`Client`](crate::Client): a framed connection with the
//! version handshake done, for tools that send requests by hand (the `rollcall` admin
//! commands, load generators, end-to-end tests). The client's own driver opens its
//! connections through [`handshake`] too, so there is one copy of the handshake.
//!
//! ```no_run
//! use std::time::Duration;
//! use rollcall_client::raw::Connection;
//! use rollcall_protocol::Request;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let mut conn = Connection::connect("127.0.0.1:7070", "my-tool/1", Duration::from_secs(5)).await?;
//! let groups = conn.request(Request::ListGroups(Default::default())).await?;
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rollcall_protocol::{
    supported_versions, ApiVersionsRequest, ApiVersionsResponse, Body, Codec, Frame, FrameError,
    Request, Response,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio_util::codec::Framed;

use crate::error::ConnectError;

/// A TCP connection speaking rollcall frames.
pub type Transport = Framed<TcpStream, Codec>;

/// Sends `ApiVersions` under `correlation_id` and waits for its answer, skipping any
/// push that arrives first. A refusal is [`ConnectError::Refused`]; a closed connection,
/// an undecodable frame or an answer of the wrong kind is [`ConnectError::Protocol`].
///
/// Whether the versions offered suit the caller is the caller's judgement: the answer is
/// returned as it came.
pub async fn handshake<T>(
    transport: &mut Framed<T, Codec>,
    correlation_id: u32,
    client_software: &str,
) -> Result<ApiVersionsResponse, ConnectError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let hello = Request::ApiVersions(ApiVersionsRequest {
        client_software: client_software.to_owned(),
        versions: supported_versions(),
    });
    transport
        .send(Frame::request(correlation_id, hello))
        .await
        .map_err(frame_error)?;
    let answer = loop {
        match transport.next().await {
            None => return Err(ConnectError::Protocol("connection closed".into())),
            Some(Err(e)) => return Err(frame_error(e)),
            Some(Ok(frame)) => match frame.body {
                Body::Push(_) => continue,
                Body::Response(r) if frame.correlation_id == correlation_id => break r,
                other => {
                    return Err(ConnectError::Protocol(format!(
                        "unexpected frame during the handshake: {other:?}"
                    )))
                }
            },
        }
    };
    match answer {
        Response::ApiVersions(v) => Ok(v),
        Response::Error(e) => Err(ConnectError::Refused {
            code: e.code,
            message: e.message,
        }),
        other => Err(ConnectError::Protocol(format!(
            "unexpected handshake answer: {other:?}"
        ))),
    }
}

/// The largest frame [`connect`] reads, whatever the coordinator announces.
const MAX_READ_FRAME: usize = 64 << 20;

/// Connects to `addr` with Nagle's algorithm off and handshakes (correlation id 0), all
/// within `timeout`.
pub async fn connect(
    addr: impl ToSocketAddrs,
    client_software: &str,
    timeout: Duration,
) -> Result<(Transport, ApiVersionsResponse), ConnectError> {
    let attempt = async {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let mut transport = Framed::new(stream, Codec::default());
        let versions = handshake(&mut transport, 0, client_software).await?;
        // The coordinator's answers (pages of a listing) may be as large as its frames.
        let announced = usize::try_from(versions.max_frame_size).unwrap_or(usize::MAX);
        if announced > transport.codec().max_frame_size() {
            *transport.codec_mut() = Codec::new(announced.min(MAX_READ_FRAME));
        }
        Ok((transport, versions))
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or(Err(ConnectError::Timeout))
}

/// A handshaken connection that sends one request at a time and waits for its answer.
/// Pushes and stray responses that arrive meanwhile are dropped: use
/// [`Connection::into_transport`] for a connection that also listens.
#[derive(Debug)]
pub struct Connection {
    transport: Transport,
    versions: ApiVersionsResponse,
    next_id: u32,
    timeout: Duration,
}

impl Connection {
    /// Connects and handshakes within `timeout`; each later request must also be answered
    /// within `timeout`.
    pub async fn connect(
        addr: impl ToSocketAddrs,
        client_software: &str,
        timeout: Duration,
    ) -> Result<Self, ConnectError> {
        let (transport, versions) = connect(addr, client_software, timeout).await?;
        Ok(Self {
            transport,
            versions,
            next_id: 1,
            timeout,
        })
    }

    /// The coordinator's answer to the handshake.
    pub fn versions(&self) -> &ApiVersionsResponse {
        &self.versions
    }

    /// Sends `request` and returns its answer (which may be [`Response::Error`]).
    pub async fn request(&mut self, request: Request) -> Result<Response, ConnectError> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let exchange = async {
            self.transport
                .send(Frame::request(id, request))
                .await
                .map_err(frame_error)?;
            loop {
                match self.transport.next().await {
                    None => return Err(ConnectError::Protocol("connection closed".into())),
                    Some(Err(e)) => return Err(frame_error(e)),
                    Some(Ok(Frame {
                        correlation_id,
                        body: Body::Response(r),
                    })) if correlation_id == id => return Ok(r),
                    Some(Ok(_)) => {}
                }
            }
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or(Err(ConnectError::Timeout))
    }

    /// The framed connection, for a caller that pipelines requests or reads pushes.
    pub fn into_transport(self) -> Transport {
        self.transport
    }
}

/// A frame error as a connection failure: I/O stays I/O, the rest is a protocol error.
pub(crate) fn frame_error(e: FrameError) -> ConnectError {
    match e {
        FrameError::Io(e) => ConnectError::Io(e),
        other => ConnectError::Protocol(other.to_string()),
    }
}
