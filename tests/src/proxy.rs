//! A TCP proxy for end-to-end tests. It sits on 127.0.0.1 between clients and a
//! coordinator and, at any moment, stages the network faults a test needs: it cuts every
//! connection, freezes connections (sockets open, nothing through, as when a process
//! is stopped) and thaws them, delays bytes, swallows them (a host gone with its
//! sockets open), refuses new connections, and points new connections at another
//! coordinator (a restart on another port).
//!
//! Faults that concern one direction of traffic take a [`Direction`]. The settings live
//! in one watch channel; each connection is one task whose two pumps read them as they
//! go. Every task of the proxy ends when the proxy is dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::{CancellationToken, DropGuard};

/// Which way traffic goes through the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the coordinator.
    ToUpstream,
    /// From the coordinator to the client.
    ToClient,
    /// Both ways.
    Both,
}

const UP: usize = 0;
const DOWN: usize = 1;

impl Direction {
    /// Indices into [`State::flows`].
    fn flows(self) -> &'static [usize] {
        match self {
            Self::ToUpstream => &[UP],
            Self::ToClient => &[DOWN],
            Self::Both => &[UP, DOWN],
        }
    }
}

/// What the proxy does now. Connections are numbered in the order they are accepted;
/// a cut or a freeze applies to the connections accepted before it, by number.
#[derive(Clone, Debug)]
struct State {
    upstream: SocketAddr,
    refusing: bool,
    /// Connections numbered below this have been cut.
    cut_below: u64,
    flows: [Flow; 2],
}

/// What the proxy does to one direction of traffic.
#[derive(Clone, Copy, Debug, Default)]
struct Flow {
    delay: Duration,
    blackhole: bool,
    /// Connections numbered below this are frozen in this direction.
    frozen_below: u64,
}

impl Flow {
    /// Whether connection `id` is frozen in this direction.
    fn frozen(&self, id: u64) -> bool {
        id < self.frozen_below
    }
}

#[derive(Debug)]
struct Shared {
    state: watch::Sender<State>,
    /// How many connections have been accepted (and numbered) so far.
    accepted: AtomicU64,
    /// When a byte was last written out, per direction.
    last_forwarded: Mutex<[Option<Instant>; 2]>,
}

/// A TCP proxy between clients and a coordinator that injects faults on demand.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Cancels every task of the proxy when dropped.
    _stop: DropGuard,
}

impl Proxy {
    /// Listens on an ephemeral loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy binds");
        let addr = listener.local_addr().expect("proxy address");
        let (state, _) = watch::channel(State {
            upstream,
            refusing: false,
            cut_below: 0,
            flows: [Flow::default(); 2],
        });
        let shared = Arc::new(Shared {
            state,
            accepted: AtomicU64::new(0),
            last_forwarded: Mutex::new([None; 2]),
        });
        let stop = CancellationToken::new();
        tokio::spawn(accept(listener, shared.clone(), stop.clone()));
        Self {
            addr,
            shared,
            _stop: stop.drop_guard(),
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections the proxy has accepted.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Closes every current connection, both sockets; new connections are accepted.
    pub fn cut(&self) {
        let accepted = self.shared.accepted.load(Ordering::SeqCst);
        self.shared
            .state
            .send_modify(|s| s.cut_below = s.cut_below.max(accepted));
    }

    /// Stops moving bytes in `direction` on every current connection, keeping its
    /// sockets open: nothing more is read, and what was already read is held. Later
    /// connections are not frozen.
    pub fn freeze(&self, direction: Direction) {
        let accepted = self.shared.accepted.load(Ordering::SeqCst);
        self.modify(direction, |f| f.frozen_below = accepted);
    }

    /// Lets frozen connections move bytes in `direction` again, held ones first.
    pub fn thaw(&self, direction: Direction) {
        self.modify(direction, |f| f.frozen_below = 0);
    }

    /// Holds each chunk of bytes read from now on for `delay` before writing it out.
    pub fn set_delay(&self, direction: Direction, delay: Duration) {
        self.modify(direction, |f| f.delay = delay);
    }

    /// While on, every connection, current or new, reads bytes in `direction` and
    /// drops them, including those read earlier and not yet written; a side closing its
    /// socket is not passed on either. Bytes read after it is off flow again.
    pub fn set_blackhole(&self, direction: Direction, on: bool) {
        self.modify(direction, |f| f.blackhole = on);
    }

    /// While on, new connections are accepted and closed at once.
    pub fn set_refusing(&self, on: bool) {
        self.shared.state.send_modify(|s| s.refusing = on);
    }

    /// Sends new connections to `upstream`. Current ones stay where they are; a
    /// [`cut`](Self::cut) makes their clients reconnect, to the new address.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        self.shared.state.send_modify(|s| s.upstream = upstream);
    }

    /// When a byte was last written out in `direction` (the later of the two for
    /// [`Direction::Both`]); `None` if none was. The peer cannot have read any byte
    /// through the proxy after that instant.
    pub fn last_forwarded(&self, direction: Direction) -> Option<Instant> {
        let last = self.shared.last_forwarded.lock();
        direction.flows().iter().filter_map(|&i| last[i]).max()
    }

    fn modify(&self, direction: Direction, change: impl Fn(&mut Flow)) {
        self.shared.state.send_modify(|s| {
            for &i in direction.flows() {
                change(&mut s.flows[i]);
            }
        });
    }
}

/// Accepts connections until the proxy is dropped.
async fn accept(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let client = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => client,
                Err(_) => return,
            },
        };
        let (refusing, upstream) = {
            let s = shared.state.borrow();
            (s.refusing, s.upstream)
        };
        if refusing {
            drop(client);
            continue;
        }
        let id = shared.accepted.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(connection(
            shared.clone(),
            id,
            client,
            upstream,
            stop.clone(),
        ));
    }
}

/// Runs connection `id` until both sides have closed it, it is cut or the proxy is
/// dropped; then both sockets close. A failed connection upstream closes the client's.
async fn connection(
    shared: Arc<Shared>,
    id: u64,
    client: TcpStream,
    upstream: SocketAddr,
    stop: CancellationToken,
) {
    let mut state = shared.state.subscribe();
    let run = async {
        let Ok(server) = TcpStream::connect(upstream).await else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (cr, cw) = client.into_split();
        let (sr, sw) = server.into_split();
        tokio::join!(
            pump(&shared, id, UP, cr, sw),
            pump(&shared, id, DOWN, sr, cw)
        );
    };
    tokio::select! {
        biased;
        () = stop.cancelled() => {}
        _ = state.wait_for(|s| id < s.cut_below) => {}
        () = run => {}
    }
}

/// Moves bytes one way on connection `id` as the settings of `flow` say, until the
/// reading side closes (which is then passed on) or the writing side fails.
async fn pump(
    shared: &Shared,
    id: u64,
    flow: usize,
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
) {
    // Chunks read, with the instant each may be written out.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut state = shared.state.subscribe();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            // Frozen, nothing is read: the sender's bytes wait in the socket.
            let _ = state.wait_for(|s| !s.flows[flow].frozen(id)).await;
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let settings = state.borrow().flows[flow];
            if settings.blackhole {
                continue;
            }
            if tx
                .send((Instant::now() + settings.delay, buf[..n].to_vec()))
                .is_err()
            {
                return;
            }
        }
    };
    let write = async move {
        let mut state = shared.state.subscribe();
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due.into()).await;
            let _ = state.wait_for(|s| !s.flows[flow].frozen(id)).await;
            if state.borrow().flows[flow].blackhole {
                continue;
            }
            if to.write_all(&bytes).await.is_err() {
                return;
            }
            shared.last_forwarded.lock()[flow] = Some(Instant::now());
        }
        // The reading side closed: pass that on once the direction lets anything through.
        let _ = state
            .wait_for(|s| !s.flows[flow].blackhole && !s.flows[flow].frozen(id))
            .await;
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounded;

    /// How long a test waits to be fairly sure nothing arrives.
    const QUIET: Duration = Duration::from_millis(150);

    /// A loopback server that greets each connection with `greeting`, then echoes.
    async fn echo_server(greeting: &'static [u8]) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = stream.split();
                    if w.write_all(greeting).await.is_ok() {
                        let _ = tokio::io::copy(&mut r, &mut w).await;
                    }
                });
            }
        });
        addr
    }

    async fn connect(addr: SocketAddr) -> TcpStream {
        bounded("connect", TcpStream::connect(addr))
            .await
            .expect("connects")
    }

    async fn read_n(stream: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        bounded("read", stream.read_exact(&mut buf))
            .await
            .expect("reads");
        buf
    }

    /// Asserts that nothing arrives, not even the end of the stream, for [`QUIET`].
    async fn assert_silent(stream: &mut TcpStream) {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(QUIET, stream.read(&mut buf)).await;
        assert!(read.is_err(), "expected silence, got {read:?}");
    }

    /// Reads until the stream ends or fails.
    async fn assert_closed(stream: &mut TcpStream) {
        bounded("closed", async {
            let mut buf = [0u8; 64];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
    }

    #[tokio::test]
    async fn forwards_both_ways_and_records_when() {
        let proxy = Proxy::start(echo_server(b"hi").await).await;
        assert_eq!(proxy.last_forwarded(Direction::Both), None);
        let mut c = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut c, 2).await, b"hi");
        assert_eq!(proxy.last_forwarded(Direction::ToUpstream), None);
        let before = Instant::now();
        c.write_all(b"ping").await.unwrap();
        assert_eq!(read_n(&mut c, 4).await, b"ping");
        let up = proxy
            .last_forwarded(Direction::ToUpstream)
            .expect("sent up");
        let down = proxy
            .last_forwarded(Direction::ToClient)
            .expect("sent down");
        assert!(before <= up && up <= down);
        assert_eq!(proxy.last_forwarded(Direction::Both), Some(down));
    }

    #[tokio::test]
    async fn a_freeze_holds_bytes_until_the_thaw_then_delivers_them_in_order() {
        let proxy = Proxy::start(echo_server(b"hi").await).await;
        let mut c = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut c, 2).await, b"hi");
        proxy.freeze(Direction::Both);
        for chunk in [&b"one"[..], b"two", b"three"] {
            c.write_all(chunk).await.unwrap();
        }
        assert_silent(&mut c).await;
        // Connections opened after the freeze flow.
        let mut later = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut later, 2).await, b"hi");
        proxy.thaw(Direction::Both);
        assert_eq!(read_n(&mut c, 11).await, b"onetwothree");
    }

    #[tokio::test]
    async fn a_freeze_of_one_direction_holds_only_that_one() {
        let proxy = Proxy::start(echo_server(b"").await).await;
        let mut c = connect(proxy.addr()).await;
        c.write_all(b"warm").await.unwrap();
        assert_eq!(read_n(&mut c, 4).await, b"warm");
        let sent_before = proxy.last_forwarded(Direction::ToUpstream);
        proxy.freeze(Direction::ToClient);
        c.write_all(b"held").await.unwrap();
        assert_silent(&mut c).await;
        // The request went through; only the echo is held.
        assert!(proxy.last_forwarded(Direction::ToUpstream) > sent_before);
        proxy.thaw(Direction::ToClient);
        assert_eq!(read_n(&mut c, 4).await, b"held");
    }

    #[tokio::test]
    async fn a_cut_closes_current_connections_and_new_ones_still_get_through() {
        let proxy = Proxy::start(echo_server(b"hi").await).await;
        let mut first = connect(proxy.addr()).await;
        let mut second = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut first, 2).await, b"hi");
        assert_eq!(read_n(&mut second, 2).await, b"hi");
        proxy.cut();
        assert_closed(&mut first).await;
        assert_closed(&mut second).await;
        let mut again = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut again, 2).await, b"hi");
        again.write_all(b"ok").await.unwrap();
        assert_eq!(read_n(&mut again, 2).await, b"ok");
    }

    #[tokio::test]
    async fn a_delay_holds_each_chunk_back() {
        let proxy = Proxy::start(echo_server(b"hi").await).await;
        let mut c = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut c, 2).await, b"hi");
        let delay = Duration::from_millis(100);
        proxy.set_delay(Direction::Both, delay);
        let sent = Instant::now();
        c.write_all(b"slow").await.unwrap();
        assert_eq!(read_n(&mut c, 4).await, b"slow");
        assert!(sent.elapsed() >= 2 * delay, "{:?}", sent.elapsed());
    }

    #[tokio::test]
    async fn a_blackhole_swallows_bytes_and_keeps_the_socket_open() {
        let proxy = Proxy::start(echo_server(b"hi").await).await;
        let mut c = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut c, 2).await, b"hi");
        proxy.set_blackhole(Direction::Both, true);
        c.write_all(b"lost").await.unwrap();
        assert_silent(&mut c).await;
        // New connections are accepted and answered with nothing.
        let mut later = connect(proxy.addr()).await;
        assert_silent(&mut later).await;
        proxy.set_blackhole(Direction::Both, false);
        c.write_all(b"kept").await.unwrap();
        assert_eq!(read_n(&mut c, 4).await, b"kept");
    }

    #[tokio::test]
    async fn switching_upstream_moves_new_connections_and_a_cut_moves_the_rest() {
        let first = echo_server(b"1").await;
        let second = echo_server(b"2").await;
        let proxy = Proxy::start(first).await;
        let mut old = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut old, 1).await, b"1");
        proxy.set_upstream(second);
        let mut new = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut new, 1).await, b"2");
        old.write_all(b"still").await.unwrap();
        assert_eq!(read_n(&mut old, 5).await, b"still");
        proxy.cut();
        assert_closed(&mut old).await;
        let mut moved = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut moved, 1).await, b"2");
    }

    #[tokio::test]
    async fn refusing_closes_new_connections_at_once() {
        let proxy = Proxy::start(echo_server(b"hi").await).await;
        let mut open = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut open, 2).await, b"hi");
        proxy.set_refusing(true);
        let mut refused = connect(proxy.addr()).await;
        assert_closed(&mut refused).await;
        open.write_all(b"up").await.unwrap();
        assert_eq!(read_n(&mut open, 2).await, b"up");
        proxy.set_refusing(false);
        let mut accepted = connect(proxy.addr()).await;
        assert_eq!(read_n(&mut accepted, 2).await, b"hi");
    }

    #[tokio::test]
    async fn dropping_the_proxy_closes_its_connections_and_its_port() {
        let proxy = Proxy::start(echo_server(b"hi").await).await;
        let addr = proxy.addr();
        let mut c = connect(addr).await;
        assert_eq!(read_n(&mut c, 2).await, b"hi");
        proxy.freeze(Direction::Both);
        drop(proxy);
        assert_closed(&mut c).await;
        bounded("the port closes", async {
            while TcpStream::connect(addr).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }
}
