use super::*;

/// Every connection's task holds its future for its whole life: what the future
/// keeps across its awaits (buffers, nested futures) is memory per connection.
#[tokio::test]
async fn a_connections_task_is_small() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (stream, peer) = listener.accept().await.unwrap();
    let ctx = Arc::new(ConnContext::new(
        Vec::new(),
        Arc::new(Registry::default()),
        Arc::new(Metrics::new()),
        &super::super::ServerConfig::default(),
        None,
        None,
        None,
    ));
    let (reading, _done) = mpsc::channel(1);
    let task = Connection::new(ctx, 1, peer, Transport::Plain).serve(stream, reading);
    let size = std::mem::size_of_val(&task);
    assert!(
        size <= 2048,
        "a connection's future is {size} bytes; keep buffers on the heap and only while used"
    );
    drop(client);
}
