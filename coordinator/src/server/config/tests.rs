use super::*;
use crate::server::tls::ClientAuth;

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
    assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
    assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
    assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    for bad in ["", "10", "s", "10x", "1.5s", "-1s", "99999999999999999999d"] {
        assert!(parse_duration(bad).is_err(), "{bad}");
    }
}

#[test]
fn durations_format_round_trip() {
    for text in ["500ms", "10s", "5m", "2h", "7d", "1500ms", "0"] {
        let d = parse_duration(text).unwrap();
        assert_eq!(format_duration(d), text);
    }
}

#[test]
fn sizes_parse() {
    assert_eq!(parse_size("1048576"), Ok(1 << 20));
    assert_eq!(parse_size("1MiB"), Ok(1 << 20));
    assert_eq!(parse_size("64KiB"), Ok(64 << 10));
    assert!(parse_size("1GiB").is_err());
    assert!(parse_size("MiB").is_err());
}

#[test]
fn default_config_is_valid() {
    ServerConfig::default().validate().unwrap();
    let mut c = ServerConfig::default();
    c.core.min_session_timeout = c.core.max_session_timeout * 2;
    assert_eq!(c.validate().unwrap_err().option, "min-session-timeout");
}

#[test]
fn partition_limit_must_fit_the_frame() {
    use rollcall_protocol::{
        AssignmentPush, DescribeGroupResponse, Frame, GroupDetection, GroupState, Liveness,
        MemberDescription, MemberDetection, Push, Response, TopicPartitions,
    };
    let c = ServerConfig::default();
    let fits = max_partitions_for(c.max_frame_size);
    assert!(u64::from(DEFAULT_MAX_PARTITIONS_PER_GROUP) <= fits);

    // The bound holds for real encodings with every name at its longest.
    let p = u32::try_from(fits).unwrap();
    let name = |c: char| c.to_string().repeat(crate::core::MAX_NAME_BYTES);
    let all = vec![TopicPartitions {
        topic: name('t'),
        partitions: (0..p).collect(),
    }];
    let half = vec![TopicPartitions {
        topic: name('t'),
        partitions: (0..p / 2).collect(),
    }];
    let describe = Frame::response(
        1,
        Response::DescribeGroup(DescribeGroupResponse {
            operator: None,
            group: name('g'),
            state: GroupState::Reconciling,
            generation: 7,
            assignor: name('a'),
            members: vec![MemberDescription {
                operator: None,
                member_id: "m".repeat(crate::core::MAX_MEMBER_ID_BYTES),
                instance_id: Some(name('i')),
                client_id: name('c'),
                liveness: Liveness::Suspect,
                since_heartbeat_ms: 1,
                since_progress_ms: 1,
                owned: all.clone(),
                pending_revoke: half.clone(),
                pending_grant: half,
                detection: Some(MemberDetection {
                    expel_basis: Some(rollcall_protocol::ExpelBasis::Tail),
                    ..MemberDetection::default()
                }),
            }],
            detection: Some(Box::new(GroupDetection {
                detector: "x".repeat(16),
                shadow: Some("x".repeat(16)),
                summary: Some(rollcall_protocol::DetectionSummary {
                    tail: vec![
                        rollcall_protocol::TailCount::default();
                        crate::core::liveness::advice::MAX_TAIL_COUNTS
                    ],
                    ..rollcall_protocol::DetectionSummary::default()
                }),
            })),
            // A page with the group's summary (version 3): the largest answer.
            more: Some(true),
        }),
    );
    let push = Frame::push(Push::Assignment(AssignmentPush {
        group: name('g'),
        member_id: "m".repeat(crate::core::MAX_MEMBER_ID_BYTES),
        generation: 7,
        partitions: all,
    }));
    for frame in [describe, push] {
        let mut buf = bytes::BytesMut::new();
        frame.encode(&mut buf, c.max_frame_size).unwrap();
        assert!(buf.len() - 4 <= largest_member_answer(fits) as usize);
    }

    let mut c = ServerConfig::default();
    c.core.max_partitions_per_group = u32::try_from(fits + 1).unwrap();
    assert_eq!(c.validate().unwrap_err().option, "max-partitions-per-group");
    // The limit the core had before: an Assignment push of more than ~262,000
    // partitions cannot be encoded within 1 MiB.
    c.core.max_partitions_per_group = 1_000_000;
    assert!(c.validate().is_err());
    c.max_frame_size = 8 << 20;
    c.send_buffer_bytes = 8 << 20;
    c.validate().unwrap();
}

#[test]
fn tls_options_are_checked_together() {
    let tls = |cert: bool, key: bool, ca: bool, auth: Option<ClientAuth>| ServerConfig {
        tls: TlsSettings {
            cert: cert.then(|| "cert.pem".into()),
            key: key.then(|| "key.pem".into()),
            client_ca: ca.then(|| "ca.pem".into()),
            client_auth: auth,
            ..TlsSettings::default()
        },
        ..ServerConfig::default()
    };
    let refused = |c: ServerConfig| c.validate().unwrap_err();
    tls(true, true, false, None).validate().unwrap();
    tls(true, true, true, None).validate().unwrap();
    tls(true, true, true, Some(ClientAuth::Optional))
        .validate()
        .unwrap();
    tls(true, true, true, Some(ClientAuth::Required))
        .validate()
        .unwrap();
    tls(true, true, false, Some(ClientAuth::None))
        .validate()
        .unwrap();

    let e = refused(tls(true, false, false, None));
    assert_eq!(e.option, "tls-key");
    assert!(e.to_string().contains("must be given with tls-cert"), "{e}");
    assert_eq!(refused(tls(false, true, false, None)).option, "tls-cert");
    let e = refused(tls(false, false, true, None));
    assert_eq!(e.option, "tls-client-ca");
    assert!(e.to_string().contains("needs tls-cert and tls-key"), "{e}");
    let e = refused(tls(false, false, false, Some(ClientAuth::Required)));
    assert_eq!(e.option, "tls-client-auth");
    let e = refused(tls(true, true, false, Some(ClientAuth::Required)));
    assert_eq!(e.option, "tls-client-auth");
    assert!(
        e.to_string().contains("(required) needs tls-client-ca"),
        "{e}"
    );
    assert_eq!(
        refused(tls(true, true, false, Some(ClientAuth::Optional))).option,
        "tls-client-auth"
    );
    let e = refused(tls(true, true, true, Some(ClientAuth::None)));
    assert!(e.to_string().contains("contradicts tls-client-ca"), "{e}");
    let mut c = tls(true, true, false, None);
    c.tls.reload_interval = Duration::ZERO;
    assert_eq!(refused(c).option, "tls-reload-interval");
}

#[test]
fn the_buffer_budget_must_hold_one_connection() {
    let mut c = ServerConfig::default();
    c.max_buffered_bytes = c.max_frame_size + c.send_buffer_bytes - 1;
    let e = c.validate().unwrap_err();
    assert_eq!(e.option, "max-buffered-bytes", "{e}");
    c.max_buffered_bytes += 1;
    c.validate().unwrap();
}

#[test]
fn quotas_are_checked() {
    let mut c = ServerConfig::default();
    c.core.max_groups = 0;
    assert_eq!(c.validate().unwrap_err().option, "max-groups");
    let mut c = ServerConfig::default();
    c.core.max_partitions = 0;
    assert_eq!(c.validate().unwrap_err().option, "max-partitions");
    let mut c = ServerConfig::default();
    c.core.max_metadata_bytes_per_group = c.core.max_metadata_bytes - 1;
    assert_eq!(
        c.validate().unwrap_err().option,
        "max-metadata-bytes-per-group"
    );
    // One offset with the largest metadata must fit a FetchOffsets answer.
    let mut c = ServerConfig::default();
    c.max_frame_size = 4096;
    c.send_buffer_bytes = c.max_frame_size;
    c.core.max_partitions_per_group = 100;
    let e = c.validate().unwrap_err();
    assert_eq!(e.option, "max-metadata-bytes", "{e}");
    c.core.max_metadata_bytes = 3000;
    c.validate().unwrap();
    assert!(largest_offset_answer(3000) <= 4096);
}

#[test]
fn deadlines_and_send_buffer_are_checked() {
    let mut c = ServerConfig::default();
    c.idle_timeout = c.core.max_session_timeout;
    assert_eq!(c.validate().unwrap_err().option, "idle-timeout");
    let c = ServerConfig {
        frame_timeout: Duration::ZERO,
        ..ServerConfig::default()
    };
    assert_eq!(c.validate().unwrap_err().option, "frame-timeout");
    let mut c = ServerConfig::default();
    c.send_buffer_bytes = c.max_frame_size - 1;
    assert_eq!(c.validate().unwrap_err().option, "send-buffer-bytes");
}
