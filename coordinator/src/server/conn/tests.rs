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

/// A shard whose open batch is full holds the requests for it, and nothing more is
/// read behind them on their connection; a connection that sends nothing to that
/// shard is served on. (Every connection used to stop reading while any shard's open
/// batch was full.)
#[tokio::test]
async fn a_full_shard_stalls_only_the_connections_that_use_it() {
    use futures_util::{SinkExt, StreamExt};
    use rollcall_protocol::{
        ApiVersionsRequest, CommitOffsetsRequest, DescribeGroupRequest, OffsetCommit,
    };

    use crate::core::{Coordinator, CoreConfig};
    use crate::server::shard::ShardContext;
    use crate::store::memory::MemoryStore;
    use crate::store::{GroupCommitter, Store};

    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let registry = Arc::new(Registry::default());
    let shard_ctx = Arc::new(ShardContext {
        committer: Arc::new(GroupCommitter::new(store).expect("committer")),
        registry: registry.clone(),
        metrics: Arc::new(Metrics::new()),
        stats_interval: Duration::from_secs(60),
        fatal: CancellationToken::new(),
        failed: AtomicBool::new(false),
        directory: crate::server::Directory::single(),
        on_store_failure: None,
    });
    let shards: Vec<_> = (0..2)
        .map(|i| {
            Shard::new(
                i,
                Coordinator::new(CoreConfig::default()),
                shard_ctx.clone(),
            )
        })
        .collect();
    let group_of = |shard: usize| {
        (0..)
            .map(|i| format!("g{i}"))
            .find(|g| shard_of(g, 2) == shard)
            .expect("a group")
    };
    let (full, free) = (group_of(0), group_of(1));

    // Shard 0's open batch fills with commits no sender stage takes.
    let ctx = Arc::new(ConnContext::new(
        shards.clone(),
        registry,
        Arc::new(Metrics::new()),
        &super::super::ServerConfig::default(),
        None,
        None,
        None,
    ));
    let (filler, _filler_state) = ConnHandle::new(ctx.limits.clone());
    let commit = || {
        Request::CommitOffsets(CommitOffsetsRequest {
            group: full.clone(),
            member_id: None,
            generation: 0,
            offsets: vec![OffsetCommit {
                topic: "t".into(),
                partition: 0,
                offset: 1,
                metadata: String::new(),
            }],
        })
    };
    let mut sent = 0;
    while !shards[0].is_full() {
        let reply = Reply::Frame {
            to: filler.clone(),
            correlation_id: 1,
            api: ApiKey::CommitOffsets,
            received: Instant::now(),
        };
        assert!(matches!(
            shards[0].request(0, commit(), reply),
            Handled::Staged
        ));
        sent += 1;
        assert!(sent <= 1 << 20, "the open batch never filled");
    }
    assert!(!shards[1].is_full());

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = |stream: TcpStream, peer: SocketAddr, id: ConnId| {
        let (reading, _done) = mpsc::channel(1);
        let connection = Connection::new(ctx.clone(), id, peer, Transport::Plain);
        tokio::spawn(async move {
            let _done = _done;
            connection.serve(stream, reading).await;
        })
    };
    let mut clients = Vec::new();
    for id in [10, 11] {
        let client = TcpStream::connect(addr).await.unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let _task = serve(stream, peer, id);
        let mut framed = Framed::new(client, Codec::default());
        let hello = Request::ApiVersions(ApiVersionsRequest {
            client_software: "test".into(),
            versions: supported_versions(),
        });
        framed.send(Frame::request(1, hello)).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), framed.next())
            .await
            .expect("a connection that has not used the full shard is served")
            .expect("answer")
            .expect("frame");
        clients.push(framed);
    }
    let describe = |group: &str| {
        Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: group.into(),
            detection: false,
            page: None,
            summary: false,
        })
    };
    // The first connection asks the full shard; the second, the other one.
    clients[0]
        .send(Frame::request(2, describe(&full)))
        .await
        .unwrap();
    clients[1]
        .send(Frame::request(2, describe(&free)))
        .await
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), clients[1].next())
        .await
        .expect("the connection using the other shard is served")
        .expect("answer")
        .expect("frame");
    assert_eq!(answer.correlation_id, 2);
    // The held request is not answered while its shard is full, and what follows it
    // on its connection is not read.
    clients[0]
        .send(Frame::request(3, describe(&free)))
        .await
        .unwrap();
    let held = tokio::time::timeout(Duration::from_millis(300), clients[0].next()).await;
    assert!(held.is_err(), "answered while its shard was full: {held:?}");
}
