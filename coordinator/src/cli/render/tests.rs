use super::*;
use rollcall_protocol::{GroupDetection, GroupState, Liveness, MemberDescription, TailCount};

fn member(id: &str, p50: u32, p99: u32, p999: u32, max: u32) -> MemberDescription {
    MemberDescription {
        operator: None,
        member_id: id.into(),
        instance_id: None,
        client_id: "c".into(),
        liveness: Liveness::Alive,
        since_heartbeat_ms: 10,
        since_progress_ms: 10,
        owned: Vec::new(),
        pending_revoke: Vec::new(),
        pending_grant: Vec::new(),
        detection: Some(MemberDetection {
            in_state_ms: 1,
            phi_centi: 0,
            suspect_after_ms: 5_000,
            expel_after_ms: 10_000,
            gaps: 5_000,
            beats_lost: 0,
            beats_late: 0,
            gap_p50_ms: p50,
            gap_p99_ms: p99,
            gap_p999_ms: p999,
            gap_max_ms: max,
            expel_basis: None,
        }),
    }
}

fn described(members: Vec<MemberDescription>) -> DescribeGroupResponse {
    with_summary(members, None)
}

fn with_summary(
    members: Vec<MemberDescription>,
    summary: Option<DetectionSummary>,
) -> DescribeGroupResponse {
    DescribeGroupResponse {
        operator: None,
        group: "g".into(),
        state: GroupState::Stable,
        generation: 3,
        assignor: "sticky".into(),
        members,
        detection: Some(Box::new(GroupDetection {
            detector: "fixed".into(),
            shadow: None,
            summary,
        })),
        more: None,
    }
}

/// Twenty members beating every 100 ms, over `span_s` seconds, none slower than 130 ms.
fn loopback(span_s: u64) -> (Vec<MemberDescription>, DetectionSummary) {
    let members = (0..20)
        .map(|i| {
            let mut m = member(&format!("m{i:02}"), 100, 110, 120, 130);
            if let Some(d) = m.detection.as_mut() {
                d.expel_basis = Some(ExpelBasis::Session);
            }
            m
        })
        .collect();
    let pooled = 20 * span_s * 10 - 20;
    let summary = DetectionSummary {
        pooled_gaps: pooled,
        span_ms: span_s * 1000,
        clean_gaps: pooled,
        gap_median_ms: 100,
        gap_longest_ms: 130,
        longest_centi: 130,
        tail_gaps: pooled,
        threshold_centi: 150,
        tail: vec![TailCount {
            over_centi: 120,
            gaps: pooled / 100,
        }],
        ..DetectionSummary::default()
    };
    (members, summary)
}

#[test]
fn twenty_members_for_18s_on_loopback_are_told_there_is_no_advice_yet() {
    let (members, summary) = loopback(18);
    let r = with_summary(members, Some(summary));
    let text = render_describe(&r, false, 1.0, DEFAULT_PAUSE_FLOOR);
    assert!(
        text.contains(
            "advice: no advice yet: 3,580 gaps over 18.00s; the advisor needs 3,000 gaps and \
             10m00s\n"
        ),
        "{text}"
    );
    assert!(!text.contains("session timeout of"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&render_describe(&r, true, 1.0, DEFAULT_PAUSE_FLOOR)).unwrap();
    assert_eq!(json["advice"]["status"], "not_yet");
    assert_eq!(json["advice"]["pooled_gaps"], 3_580);
    assert_eq!(json["advice"]["needs_span_ms"], 600_000);
    assert_eq!(json["summary"]["pooled_gaps"], 3_580);
}

#[test]
fn after_ten_minutes_the_advice_states_what_its_data_supports() {
    let (members, summary) = loopback(600);
    let r = with_summary(members, Some(summary));
    let text = render_describe(&r, false, 1.0, DEFAULT_PAUSE_FLOOR);
    for said in [
        "advice: a session timeout of 3.10s (the pause floor); no timeout the data supports \
         keeps false expulsions under 1 a year across these 20 members",
        "the data bounds a gap longer than 3.10s at ≤ 2.5e-5 (95%, 119,980 gaps over 10m00s, \
         the longest 130ms), so ≤ 1.6e5 false expulsions a year",
        "fewer only if no member pauses longer than 3.10s, which none has shown (the floor: \
         the median gap + 3.00s)",
        "assumes gaps independent",
        "gaps:       119,980 pooled over 10m00s",
        "BASIS",
        "session",
    ] {
        assert!(text.contains(said), "{said:?} not in\n{text}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&render_describe(&r, true, 1.0, DEFAULT_PAUSE_FLOOR)).unwrap();
    let advice = &json["advice"];
    assert_eq!(advice["status"], "timeout");
    assert_eq!(advice["session_timeout_ms"], 3_100);
    assert_eq!(advice["basis"], "pause_floor");
    assert_eq!(advice["gaps"], 119_980);
    assert_eq!(advice["confidence"], 0.95);
    assert!(advice["promise_per_year"].as_f64().unwrap() > 1e5);
    assert_eq!(json["members"][0]["detection"]["expel_basis"], "session");
    // A longer pause floor raises the timeout with it.
    let json: serde_json::Value =
        serde_json::from_str(&render_describe(&r, true, 1.0, Duration::from_secs(10))).unwrap();
    assert_eq!(json["advice"]["session_timeout_ms"], 10_100);
}

#[test]
fn a_coordinator_without_the_summary_gets_no_advice_and_says_why() {
    let r = described(vec![member("a", 1_000, 1_100, 1_200, 1_300)]);
    let text = render_describe(&r, false, 1.0, DEFAULT_PAUSE_FLOOR);
    assert!(
        text.contains("advice: none: the coordinator does not report the group's pooled gaps"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&render_describe(&r, true, 1.0, DEFAULT_PAUSE_FLOOR)).unwrap();
    assert_eq!(json["advice"]["status"], "unavailable");
    // Without the detection details (version 0) there is nothing to say at all.
    let mut old = described(vec![]);
    old.detection = None;
    let json = render_describe(&old, true, 1.0, DEFAULT_PAUSE_FLOOR);
    assert!(!json.contains("advice"), "{json}");
}

#[test]
fn describe_shows_what_an_operator_steered_and_nothing_for_a_group_nobody_did() {
    use rollcall_protocol::{GroupOperator, MemberOperator, Reservation};
    // Version 4 with everything at its default: the output is version 3's.
    let plain = described(vec![member("a", 100, 110, 120, 130)]);
    let mut v4 = plain.clone();
    v4.operator = Some(Box::new(GroupOperator {
        config: default_settings(),
        ..GroupOperator::default()
    }));
    for m in &mut v4.members {
        m.operator = Some(MemberOperator::default());
    }
    let text = |r: &DescribeGroupResponse| render_describe(r, false, 1.0, DEFAULT_PAUSE_FLOOR);
    assert_eq!(text(&plain), text(&v4));

    let mut steered = v4.clone();
    let op = steered.operator.as_mut().unwrap();
    op.config.departure_delay_ms = 30_000;
    op.config.max_revoking = 200;
    op.config.balance = 1;
    op.drained_labels = vec!["host-1".into()];
    op.reservations = vec![Reservation {
        instance_id: "w-3".into(),
        member_id: "m3".into(),
        partitions: 12,
        remaining_ms: 4_500,
    }];
    steered.members[0].operator = Some(MemberOperator {
        label: "host-1".into(),
        rack: "eu-1a".into(),
        capacity: 4,
        drained: true,
        load: 12.5,
    });
    let out = text(&steered);
    for said in [
        "settings:   departure delay 30s, max revoking 200, per member no cap, balance load, \
         churn budget 10%, imbalance 10%",
        "drained:    label host-1",
        "reserved:   12 partitions for instance w-3 (was m3), 4.50s left",
        "MEMBER  LABEL   RACK   CAPACITY  DRAINED  LOAD",
        "a       host-1  eu-1a  4         yes      12.50",
    ] {
        assert!(out.contains(said), "{said:?} not in\n{out}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&render_describe(&steered, true, 1.0, DEFAULT_PAUSE_FLOOR)).unwrap();
    assert_eq!(json["config"]["departure_delay_ms"], 30_000);
    assert_eq!(json["config"]["balance"], "load");
    assert_eq!(json["drained_labels"][0], "host-1");
    assert_eq!(json["reservations"][0]["remaining_ms"], 4_500);
    assert_eq!(json["members"][0]["rack"], "eu-1a");
    assert_eq!(json["members"][0]["drained"], true);
    assert_eq!(json["members"][0]["load"], 12.5);
}

#[test]
fn config_renders_every_setting_as_it_is_given() {
    let c = GroupSettings {
        departure_delay_ms: 90_000,
        max_revoking: 0,
        max_revoking_per_member: 3,
        balance: 0,
        churn_budget_permille: 125,
        imbalance_permille: 100,
    };
    let out = render_config("g", &c, false);
    for said in [
        "departure delay          90s",
        "max revoking             no cap",
        "max revoking per member  3",
        "balance                  count",
        "churn budget             12.5%",
        "imbalance                10%",
    ] {
        assert!(out.contains(said), "{said:?} not in\n{out}");
    }
    let off = render_config("g", &default_settings(), false);
    assert!(off.contains("departure delay          off"), "{off}");
}

#[test]
fn percentages_parse_to_per_mille_with_clear_errors() {
    use super::super::admin::permille;
    assert_eq!(permille("10%"), Ok(100));
    assert_eq!(permille("12.5%"), Ok(125));
    assert_eq!(permille("0"), Ok(0));
    assert_eq!(permille("100%"), Ok(1000));
    for (bad, says) in [
        ("101%", "at most 100%"),
        ("12.25%", "at most one decimal"),
        ("ten", "expected a share such as 10%"),
        ("-5%", "expected a share"),
        ("%", "expected a share"),
        ("99999999999%", "expected a share"),
    ] {
        let e = permille(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}
