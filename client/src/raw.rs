//! The protocol one level below [`Client`](crate::Client): a framed connection with the
//! version handshake done, for tools that send requests by hand (the `rollcall` admin
//! commands, load generators, end-to-end tests).
//!
//! Every connection this crate makes, the client's own included, is opened by [`open`]
//! (or, plain TCP to an address of any form, [`connect`]): TCP, then TLS if asked for,
//! then the version handshake. There is one copy of each step.
//!
//! ```no_run
//! use std::time::Duration;
//! use rollcall_client::raw::{ConnectOptions, Connection};
//! use rollcall_client::TlsConfig;
//! use rollcall_protocol::Request;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let mut conn = Connection::connect("127.0.0.1:7070", "my-tool/1", Duration::from_secs(5)).await?;
//! let groups = conn.request(Request::ListGroups(Default::default())).await?;
//!
//! // The same over TLS, trusting the coordinator's CA.
//! let options = ConnectOptions::new("my-tool/1").with_tls(TlsConfig::from_files("ca.pem", None));
//! let mut conn = Connection::connect_with("localhost:7070", &options).await?;
//! # Ok(())
//! # }
//! ```

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rollcall_protocol::{
    scram, supported_versions, ApiVersionsRequest, ApiVersionsResponse, AuthenticateRequest,
    AuthenticateResponse, Body, Codec, Frame, FrameError, Request, Response,
    DEFAULT_MAX_FRAME_SIZE,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio_util::codec::Framed;

use crate::config::Credentials;
use crate::error::ConnectError;
use crate::tls::TlsConfig;

/// A connection speaking rollcall frames, over TCP or TLS.
pub type Transport = Framed<Stream, Codec>;

/// The bytes under a [`Transport`]: a TCP connection, or a TLS session over one.
#[derive(Debug)]
pub enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(s) => s.get_ref().0,
        }
    }

    /// Whether the connection is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(_))
    }

    /// The TCP connection of a plain stream; `None` over TLS, whose bytes belong to the
    /// session.
    pub fn into_plain(self) -> Option<TcpStream> {
        match self {
            Self::Plain(s) => Some(s),
            Self::Tls(_) => None,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

/// How [`open`] connects.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// Sent in the version handshake, for the coordinator's logs.
    pub client_software: String,
    /// Bounds the whole attempt: TCP connect, TLS handshake and version handshake.
    /// Default 5 s.
    pub timeout: Duration,
    /// TLS, if the coordinator's listener speaks it; `None` (the default): plain TCP.
    pub tls: Option<TlsConfig>,
    /// The largest frame accepted from the coordinator, bytes. Default 1 MiB.
    pub max_frame_size: usize,
    /// Authenticate as this user (SCRAM-SHA-256) after the version handshake; `None`
    /// (the default): no authentication.
    pub credentials: Option<Credentials>,
}

impl ConnectOptions {
    /// Plain TCP, a 5 s timeout and 1 MiB frames, for `client_software`.
    pub fn new(client_software: impl Into<String>) -> Self {
        Self {
            client_software: client_software.into(),
            timeout: Duration::from_secs(5),
            tls: None,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            credentials: None,
        }
    }

    /// Sets the timeout of the whole attempt.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Connects over TLS.
    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets the largest frame accepted from the coordinator.
    pub fn with_max_frame_size(mut self, max_frame_size: usize) -> Self {
        self.max_frame_size = max_frame_size;
        self
    }

    /// Authenticates as `credentials` after the version handshake.
    pub fn with_credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }
}

impl Default for ConnectOptions {
    /// [`ConnectOptions::new`] with this crate's name and version as the software.
    fn default() -> Self {
        Self::new(concat!("rollcall-client/", env!("CARGO_PKG_VERSION")))
    }
}

/// The correlation id of the version handshake on every connection: 1, as the
/// protocol asks (0 is what the coordinator answers frames it cannot read with).
pub const HANDSHAKE_CORRELATION_ID: u32 = 1;

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
    match round_trip(transport, correlation_id, hello, "the handshake").await? {
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

/// The largest frame a raw connection reads, whatever the coordinator announces.
const MAX_READ_FRAME: usize = 64 << 20;

/// Authenticates the connection as `credentials` (SCRAM-SHA-256, two Authenticate
/// requests under `correlation_id` and the one after it), skipping any push that
/// arrives meanwhile. Returns the principal the coordinator gave the connection.
///
/// The coordinator's last message is checked too: a coordinator that does not hold the
/// user's credential (an impostor) fails here even if it would accept the client.
pub async fn authenticate<T>(
    transport: &mut Framed<T, Codec>,
    correlation_id: u32,
    credentials: &Credentials,
) -> Result<String, ConnectError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let failed = |e: scram::ScramError| ConnectError::Authentication(e.to_string());
    let client =
        scram::ScramClient::new(&credentials.username, credentials.password()).map_err(failed)?;
    let first = exchange(transport, correlation_id, client.client_first()).await?;
    if first.complete {
        return Err(ConnectError::Authentication(
            "the coordinator ended the exchange after one step".into(),
        ));
    }
    let (client, last) = client.handle_server_first(&first.payload).map_err(failed)?;
    let done = exchange(transport, correlation_id.wrapping_add(1), last).await?;
    if !done.complete {
        return Err(ConnectError::Authentication(
            "the coordinator did not end the exchange".into(),
        ));
    }
    client.verify(&done.payload).map_err(failed)?;
    Ok(done.principal)
}

/// One Authenticate step: sends `payload`, returns the coordinator's answer.
async fn exchange<T>(
    transport: &mut Framed<T, Codec>,
    correlation_id: u32,
    payload: String,
) -> Result<AuthenticateResponse, ConnectError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let request = Request::Authenticate(AuthenticateRequest {
        mechanism: scram::MECHANISM.to_owned(),
        payload,
    });
    match round_trip(transport, correlation_id, request, "authentication").await? {
        Response::Authenticate(a) => Ok(a),
        Response::Error(e) => Err(ConnectError::Authentication(format!(
            "{}: {}",
            e.code, e.message
        ))),
        other => Err(ConnectError::Protocol(format!(
            "unexpected answer to Authenticate: {other:?}"
        ))),
    }
}

/// Sends `request` under `correlation_id` and waits for the answer to it, skipping any
/// push that arrives first; `during` names the step in errors. A frame length that is
/// really the start of a TLS record says the coordinator speaks TLS.
async fn round_trip<T>(
    transport: &mut Framed<T, Codec>,
    correlation_id: u32,
    request: Request,
    during: &str,
) -> Result<Response, ConnectError>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    transport
        .send(Frame::request(correlation_id, request))
        .await
        .map_err(frame_error)?;
    loop {
        match transport.next().await {
            None => return Err(ConnectError::Protocol("connection closed".into())),
            Some(Err(FrameError::TooLarge { declared, .. })) if looks_like_tls(declared) => {
                return Err(ConnectError::Protocol(
                    "the coordinator answered in TLS: connect with TLS".into(),
                ))
            }
            Some(Err(e)) => return Err(frame_error(e)),
            Some(Ok(frame)) => match frame.body {
                Body::Push(_) => continue,
                Body::Response(r) if frame.correlation_id == correlation_id => return Ok(r),
                other => {
                    return Err(ConnectError::Protocol(format!(
                        "unexpected frame during {during}: {other:?}"
                    )))
                }
            },
        }
    }
}

/// Whether a length prefix is the start of a TLS record (an alert or a handshake
/// message, version 3.x): a TLS listener's answer to a frame.
fn looks_like_tls(declared: usize) -> bool {
    let content_type = (declared >> 24) & 0xff;
    let major = (declared >> 16) & 0xff;
    matches!(content_type, 0x15 | 0x16) && major == 0x03
}

/// Opens a connection to `addr` (`host:port`): TCP with Nagle's algorithm off, then
/// TLS if `options.tls` is set (checking the coordinator's certificate against the
/// host, or the name the TLS configuration gives), then the version handshake
/// (correlation id [`HANDSHAKE_CORRELATION_ID`]) and, with `options.credentials`,
/// authentication, all within `options.timeout`.
///
/// This is how the client, the admin commands and the tools connect; whatever a
/// connection must do before its first request is done in [`establish`], which this
/// calls.
pub async fn open(
    addr: &str,
    options: &ConnectOptions,
) -> Result<(Transport, ApiVersionsResponse), ConnectError> {
    let attempt = async {
        let tcp = TcpStream::connect(addr).await?;
        establish(tcp, crate::tls::host_of(addr), options).await
    };
    tokio::time::timeout(options.timeout, attempt)
        .await
        .unwrap_or(Err(ConnectError::Timeout))
}

/// Makes a connected TCP stream ready for requests: Nagle's algorithm off, the TLS
/// handshake if `options.tls` is set (the coordinator's certificate checked against
/// `host` unless the TLS configuration names another), then the version handshake,
/// then authentication if `options.credentials` is set.
/// No timeout of its own: the caller bounds it.
pub async fn establish(
    tcp: TcpStream,
    host: &str,
    options: &ConnectOptions,
) -> Result<(Transport, ApiVersionsResponse), ConnectError> {
    tcp.set_nodelay(true)?;
    let stream = match &options.tls {
        None => Stream::Plain(tcp),
        Some(tls) => {
            let connector = tls.connector()?;
            let name = tls.name_for(host)?;
            let session = connector.connect(name, tcp).await.map_err(tls_error)?;
            Stream::Tls(Box::new(session))
        }
    };
    let mut transport = Framed::new(stream, Codec::new(options.max_frame_size));
    let versions = handshake(
        &mut transport,
        HANDSHAKE_CORRELATION_ID,
        &options.client_software,
    )
    .await?;
    if let Some(credentials) = &options.credentials {
        // The handshake's answer is in: its correlation id is free again.
        authenticate(&mut transport, HANDSHAKE_CORRELATION_ID, credentials).await?;
    }
    Ok((transport, versions))
}

/// Lets a raw connection read frames as large as the coordinator says it sends (pages
/// of a listing may be), up to [`MAX_READ_FRAME`].
fn read_announced_frames(transport: &mut Transport, versions: &ApiVersionsResponse) {
    let announced = usize::try_from(versions.max_frame_size).unwrap_or(usize::MAX);
    if announced > transport.codec().max_frame_size() {
        *transport.codec_mut() = Codec::new(announced.min(MAX_READ_FRAME));
    }
}

/// An I/O error of the TLS handshake: what rustls said in words, a close during the
/// handshake as such, anything else as I/O.
fn tls_error(e: io::Error) -> ConnectError {
    if let Some(message) = crate::tls::from_io(&e) {
        return ConnectError::Tls(message);
    }
    if e.kind() == io::ErrorKind::UnexpectedEof {
        return ConnectError::Tls(
            "the coordinator closed the connection during the TLS handshake".into(),
        );
    }
    ConnectError::Io(e)
}

/// Connects to `addr` over plain TCP with Nagle's algorithm off and handshakes
/// (correlation id [`HANDSHAKE_CORRELATION_ID`]), all within `timeout`: [`open`] for an
/// address of any form, without TLS.
pub async fn connect(
    addr: impl ToSocketAddrs,
    client_software: &str,
    timeout: Duration,
) -> Result<(Transport, ApiVersionsResponse), ConnectError> {
    let options = ConnectOptions::new(client_software).with_timeout(timeout);
    let attempt = async {
        let tcp = TcpStream::connect(addr).await?;
        let (mut transport, versions) = establish(tcp, "", &options).await?;
        read_announced_frames(&mut transport, &versions);
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
    /// Connects over plain TCP and handshakes within `timeout`; each later request must
    /// also be answered within `timeout`.
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

    /// Opens a connection with [`open`] (over TLS if `options` say so); each later
    /// request must be answered within `options.timeout`.
    pub async fn connect_with(addr: &str, options: &ConnectOptions) -> Result<Self, ConnectError> {
        let (mut transport, versions) = open(addr, options).await?;
        read_announced_frames(&mut transport, &versions);
        Ok(Self {
            transport,
            versions,
            next_id: 1,
            timeout: options.timeout,
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

/// A frame error as a connection failure: a TLS failure (such as the coordinator
/// refusing the client's certificate, which TLS 1.3 reports after the handshake) is
/// [`ConnectError::Tls`], other I/O stays I/O, the rest is a protocol error.
pub(crate) fn frame_error(e: FrameError) -> ConnectError {
    match e {
        FrameError::Io(e) => match crate::tls::from_io(&e) {
            Some(message) => ConnectError::Tls(message),
            None => ConnectError::Io(e),
        },
        other => ConnectError::Protocol(other.to_string()),
    }
}
