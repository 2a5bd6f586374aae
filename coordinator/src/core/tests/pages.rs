//! Paged answers: ListGroups version 1, FetchOffsets version 1 and DescribeGroup version
//! 2 list everything exactly once, in order, each page within the answer size.

use rollcall_protocol::{
    CommitOffsetsRequest, DescribeGroupRequest, FetchOffsetsRequest, Frame, ListGroupsRequest,
    OffsetCommit, OffsetCursor, Page, Request, Response,
};

use super::TestContext;
use crate::core::CoreConfig;

/// The answer's frame size, length prefix excluded.
fn frame_len(response: &Response) -> usize {
    let mut buf = bytes::BytesMut::new();
    Frame::response(1, response.clone())
        .encode(&mut buf, usize::MAX)
        .expect("encodes");
    buf.len() - rollcall_protocol::LENGTH_PREFIX_SIZE
}

fn small(max_answer_bytes: usize) -> TestContext {
    TestContext::with_config(CoreConfig {
        max_answer_bytes,
        ..CoreConfig::default()
    })
}

fn list_page(t: &mut TestContext, after: Option<String>, limit: u32) -> (Vec<String>, bool) {
    let request = Request::ListGroups(ListGroupsRequest {
        page: Some(Page { after, limit }),
    });
    let response = t.request(0, request);
    assert!(frame_len(&response) <= t.core.config().max_answer_bytes);
    match response {
        Response::ListGroups(l) => (
            l.groups.into_iter().map(|g| g.group).collect(),
            l.more.expect("a page says whether more follow"),
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn list_groups_pages_list_every_group_once_in_order() {
    let mut t = small(200);
    let mut names: Vec<String> = (0..40).map(|i| format!("group-{i:03}")).collect();
    for name in &names {
        t.join(1, name, &[("t", 1)]);
    }
    names.sort();
    for limit in [0, 1, 3, 7, 100] {
        let mut seen = Vec::new();
        let mut after = None;
        let mut pages = 0;
        loop {
            let (page, more) = list_page(&mut t, after.clone(), limit);
            pages += 1;
            assert!(!page.is_empty() || !more);
            if limit > 0 {
                assert!(page.len() <= limit as usize);
            }
            seen.extend(page);
            after = seen.last().cloned();
            if !more {
                break;
            }
        }
        assert_eq!(seen, names, "limit {limit}");
        // 40 listings of 20 bytes do not fit one 200-byte answer.
        assert!(pages >= 5, "limit {limit}: {pages} pages");
    }
    // A cursor past the end: an empty last page.
    assert_eq!(list_page(&mut t, Some("zzz".into()), 0), (vec![], false));
    // Version 0 still answers everything at once.
    match t.request(0, Request::ListGroups(ListGroupsRequest::default())) {
        Response::ListGroups(l) => {
            assert_eq!(l.groups.len(), 40);
            assert_eq!(l.more, None);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn fetch_offsets_pages_list_every_offset_once_in_order() {
    let mut t = small(300);
    let offsets: Vec<OffsetCommit> = ["a", "b", "c"]
        .iter()
        .flat_map(|topic| {
            (0..15).map(move |p| OffsetCommit {
                topic: (*topic).into(),
                partition: p,
                offset: i64::from(p) * 10,
                metadata: "meta".into(),
            })
        })
        .collect();
    let r = t.request(
        9,
        Request::CommitOffsets(CommitOffsetsRequest {
            group: "g".into(),
            member_id: None,
            generation: 0,
            offsets,
        }),
    );
    assert!(matches!(r, Response::CommitOffsets(_)), "{r:?}");
    for (topics, expected) in [(vec![], 45), (vec!["b".to_owned(), "c".to_owned()], 30)] {
        let mut seen: Vec<(String, u32)> = Vec::new();
        let mut after: Option<OffsetCursor> = None;
        loop {
            let response = t.request(
                0,
                Request::FetchOffsets(FetchOffsetsRequest {
                    group: "g".into(),
                    topics: topics.clone(),
                    page: Some(Page { after, limit: 0 }),
                }),
            );
            assert!(frame_len(&response) <= 300);
            let Response::FetchOffsets(f) = response else {
                panic!("{response:?}");
            };
            seen.extend(f.offsets.iter().map(|o| (o.topic.clone(), o.partition)));
            after = f.offsets.last().map(|o| OffsetCursor {
                topic: o.topic.clone(),
                partition: o.partition,
            });
            if !f.more.expect("paged") {
                break;
            }
        }
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(seen, sorted, "in order, each once");
        assert_eq!(seen.len(), expected);
    }
    // An unknown group: one empty last page.
    let r = t.request(
        0,
        Request::FetchOffsets(FetchOffsetsRequest {
            group: "none".into(),
            topics: vec![],
            page: Some(Page::default()),
        }),
    );
    assert!(
        matches!(&r, Response::FetchOffsets(f) if f.offsets.is_empty() && f.more == Some(false)),
        "{r:?}"
    );
}

#[test]
fn describe_pages_describe_every_member_once_with_detection() {
    let mut t = small(1_000);
    for _ in 0..25 {
        t.join(1, "g", &[("t", 50)]);
    }
    t.advance(std::time::Duration::from_millis(300));
    let whole = t.describe("g");
    assert_eq!(whole.members.len(), 25);
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let response = t.request(
            0,
            Request::DescribeGroup(DescribeGroupRequest {
                operator: false,
                group: "g".into(),
                detection: true,
                page: Some(Page { after, limit: 0 }),
                summary: false,
            }),
        );
        assert!(frame_len(&response) <= 1_000);
        let Response::DescribeGroup(d) = response else {
            panic!("{response:?}");
        };
        assert!(d.detection.is_some());
        assert!(!d.members.is_empty());
        assert!(d.members.iter().all(|m| m.detection.is_some()));
        seen.extend(d.members);
        after = seen.last().map(|m| m.member_id.clone());
        if !d.more.expect("paged") {
            break;
        }
    }
    let ids: Vec<&str> = seen.iter().map(|m| m.member_id.as_str()).collect();
    let expected: Vec<&str> = whole.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, expected);
    assert_eq!(seen, whole.members);
}

#[test]
fn describe_pages_at_version_3_carry_the_summary_and_every_expel_basis() {
    let mut t = small(1_000);
    for _ in 0..25 {
        t.join(1, "g", &[("t", 50)]);
    }
    t.advance(std::time::Duration::from_millis(300));
    let mut seen = 0;
    let mut after = None;
    loop {
        let response = t.request(
            0,
            Request::DescribeGroup(DescribeGroupRequest {
                operator: false,
                group: "g".into(),
                detection: true,
                page: Some(Page { after, limit: 0 }),
                summary: true,
            }),
        );
        // The summary and the expel basis count in the page's size.
        assert!(frame_len(&response) <= 1_000);
        let Response::DescribeGroup(d) = response else {
            panic!("{response:?}");
        };
        let summary = d.detection.as_ref().and_then(|g| g.summary.as_ref());
        assert!(summary.is_some(), "{d:?}");
        assert!(d
            .members
            .iter()
            .all(|m| m.detection.is_some_and(|x| x.expel_basis.is_some())));
        seen += d.members.len();
        after = d.members.last().map(|m| m.member_id.clone());
        if !d.more.expect("paged") {
            break;
        }
    }
    assert_eq!(seen, 25);
    // Without a page, a summary is not asked for: the answer is version 1's.
    let response = t.request(
        0,
        Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: "g".into(),
            detection: true,
            page: None,
            summary: true,
        }),
    );
    let Response::DescribeGroup(d) = response else {
        panic!("{response:?}");
    };
    assert!(d.detection.is_some_and(|g| g.summary.is_none()));
}

/// A member whose description alone exceeds the answer size still gets a page of its
/// own: a page always makes progress (the server's configuration keeps one member
/// within the frame).
#[test]
fn a_page_always_holds_at_least_one_entry() {
    let mut t = small(100);
    t.join(1, "g", &[("t", 200)]);
    t.join(1, "g", &[("t", 200)]);
    let response = t.request(
        0,
        Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: "g".into(),
            detection: true,
            page: Some(Page::default()),
            summary: false,
        }),
    );
    let Response::DescribeGroup(d) = response else {
        panic!("{response:?}");
    };
    assert_eq!((d.members.len(), d.more), (1, Some(true)));
}
