use super::csv::CsvError;
use super::*;

fn read(text: &str) -> Result<Vec<Line>, CsvError> {
    let mut r = CsvReader::new(text.as_bytes(), "t.csv".into());
    let mut out = Vec::new();
    for _ in 0..1000 {
        match r.next_line()? {
            Some(l) => out.push(l),
            None => return Ok(out),
        }
    }
    panic!("the reader did not end");
}

/// The arrival times of member `member` among `lines`.
fn times_of(lines: &[Line], member: usize) -> Vec<f64> {
    lines
        .iter()
        .filter_map(|l| match l {
            Line::Input(Input::Beat { t, member: m, .. }) if *m == member => Some(*t),
            _ => None,
        })
        .collect()
}

fn beat(t: f64, member: usize, seq: u64) -> Line {
    Line::Input(Input::Beat { t, member, seq })
}

/// A group's trace is read for every member, numbered as first seen (the one asked
/// for first); a member's own arrivals out of order are an error naming the line.
#[test]
fn a_group_trace_is_read_for_every_member() {
    let text = "time_s,member_id\n0.5,a\n0.6,b\n1.5,a\n2.5,a\n";
    let read_as = |member: Option<&str>| {
        let mut r =
            CsvReader::new(text.as_bytes(), "t.csv".into()).with_member(member.map(str::to_owned));
        let mut lines = Vec::new();
        while let Some(line) = r.next_line().unwrap() {
            lines.push(line);
        }
        lines
    };
    let lines = read_as(None);
    assert_eq!(times_of(&lines, 0), vec![0.5, 1.5, 2.5]);
    assert_eq!(times_of(&lines, 1), vec![0.6]);
    // Without sequence numbers, each member's beats are numbered 1, 2, 3…
    assert_eq!(lines[2], beat(1.5, 0, 2));
    let lines = read_as(Some("b"));
    assert_eq!(times_of(&lines, 0), vec![0.6], "b is member 0");
    assert_eq!(times_of(&lines, 1), vec![0.5, 1.5, 2.5]);
    // b's own arrivals out of order are an error.
    let e = read("t,m\n0.5,a\n0.6,b\n1.5,a\n0.4,b\n").unwrap_err();
    assert_eq!(e.line, 5, "{e:?}");
    assert!(e.message.contains("must be in order"), "{e}");
}

/// Three columns: the heartbeat's sequence number, losses included; the coordinator's
/// event lines; a crash line.
#[test]
fn sequence_numbers_and_event_lines() {
    let text = "t,member,seq\n\
                1.0,a,1\n1.1,b,7\n2.0,a,2\n5.0,a,5\n\
                closed,5.5,a\nopened,6.0,a\n6.0,a,6\n\
                pause,8.0,1.5\nlag,8.2,0.25\nsilent,9.0,0.75\ncrash,10\n";
    let lines = read(text).expect("valid");
    assert_eq!(
        lines,
        vec![
            beat(1.0, 0, 1),
            beat(1.1, 1, 7),
            beat(2.0, 0, 2),
            beat(5.0, 0, 5),
            Line::Input(Input::Closed { t: 5.5, member: 0 }),
            Line::Input(Input::Opened { t: 6.0, member: 0 }),
            beat(6.0, 0, 6),
            Line::Input(Input::Pause { t: 8.0, dur: 1.5 }),
            Line::Input(Input::Lag { t: 8.2, dur: 0.25 }),
            Line::Input(Input::Silent { t: 9.0, dur: 0.75 }),
            Line::Crash(10.0),
        ]
    );
}

#[test]
fn csv_lines_headers_comments_and_crash() {
    let lines = read("time\n# a comment\n0.5\n\n1.5\r\n1.5\ncrash,3\n2.25\n").expect("valid");
    assert_eq!(
        lines,
        vec![
            beat(0.5, 0, 1),
            beat(1.5, 0, 2),
            beat(1.5, 0, 3),
            Line::Crash(3.0),
            beat(2.25, 0, 4),
        ]
    );
    assert_eq!(read("").expect("empty"), vec![]);
}

#[test]
fn csv_bad_lines_are_errors_with_their_line_number() {
    let cases = [
        ("1\n2\nabc\n4\n", 3, "not a valid arrival time"),
        ("time\nsecs\n", 2, "not a valid arrival time"),
        ("1\n2,3\n", 2, "2 fields where the first arrival line had 1"),
        ("1,a,b\n", 1, "not a valid sequence number"),
        ("1,a,2,3\n", 1, "expected an arrival"),
        ("1,,2\n", 1, "an empty member id"),
        (
            "closed,1\n",
            1,
            "a connection line is 'closed,<seconds>,<member>'",
        ),
        ("pause,1,x\n", 1, "not a valid duration"),
        ("silent,1\n", 1, "a coordinator event is"),
        ("1,a\n2,a\nopened,1.5,a\n", 3, "must be in order"),
        ("1\n0.5\n", 2, "must be in order"),
        ("1\n-2\n", 2, "at least 0"),
        ("1\nNaN\n", 2, "finite"),
        ("1\ninf\n", 2, "finite"),
        ("crash\n", 1, "crash line is"),
        ("crash,x\n", 1, "not a valid crash time"),
        (
            "crash,1\n\ncrash,2\n",
            3,
            "second crash line (the first is line 1)",
        ),
    ];
    for (text, line, what) in cases {
        let e = read(text).expect_err(text);
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.message.contains(what), "{text:?}: {e}");
        assert!(e.to_string().starts_with(&format!("t.csv:{line}: ")), "{e}");
    }
    // Invalid UTF-8 is a read error, not a panic.
    let mut r = CsvReader::new(&b"1\n\xff\xfe\n"[..], "t.csv".into());
    assert_eq!(r.next_line(), Ok(Some(beat(1.0, 0, 1))));
    let e = r.next_line().expect_err("invalid UTF-8");
    assert_eq!(e.line, 2, "{e}");
    assert!(e.message.contains("cannot read"), "{e}");
}

#[test]
fn times_parse_with_units() {
    assert_eq!(seconds("1.5"), Ok(1.5));
    assert_eq!(seconds("1.5s"), Ok(1.5));
    assert_eq!(seconds("250ms"), Ok(0.25));
    assert_eq!(seconds("2m"), Ok(120.0));
    assert!(seconds("-1").is_err());
    assert!(seconds("fast").is_err());
    assert_eq!(number(" 8"), Ok(8.0));
    assert!(number("NaN").is_err());
}

/// The seed 002 preset is the trace of the coordinator's replay tests.
#[test]
fn seed002_is_the_coordinators_trace() {
    let p = Params::new(Preset::Seed002, &[]).expect("defaults");
    assert_eq!(p.crash(), 100.0);
    let arrivals: Vec<f64> = p.generate(1).map(|(t, _)| t).collect();
    // Beats 1..=99, the ones held by the pause arriving as one.
    assert!((95..=99).contains(&arrivals.len()), "{}", arrivals.len());
    assert!(arrivals.windows(2).all(|w| w[1] > w[0]));
    let longest = arrivals.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    assert!((3.4..4.7).contains(&longest), "{longest}");
    // The same seed, the same trace; another seed, another.
    let times = |seed| p.generate(seed).map(|(t, _)| t).collect::<Vec<_>>();
    assert_eq!(arrivals, times(1));
    assert_ne!(arrivals, times(2));
}

#[test]
fn every_preset_generates_an_ordered_bounded_trace() {
    for preset in [
        Preset::Seed002,
        Preset::NoisyThenCalm,
        Preset::HeavyTail,
        Preset::BurstLoss,
        Preset::Drift,
    ] {
        let p = Params::new(preset, &[(Param::Duration, 300.0)]).expect("valid");
        let arrivals: Vec<f64> = p.generate(7).map(|(t, _)| t).collect();
        assert!(arrivals.len() > 100, "{preset:?}: {}", arrivals.len());
        assert!(arrivals.len() <= 300, "{preset:?}: {}", arrivals.len());
        assert!(arrivals.windows(2).all(|w| w[1] >= w[0]), "{preset:?}");
        assert!(*arrivals.last().unwrap() <= p.crash() + 1.0, "{preset:?}");
    }
    assert_eq!(
        Params::new(Preset::NoisyThenCalm, &[])
            .expect("defaults")
            .crash(),
        1800.5
    );
    let e = Params::new(Preset::Drift, &[(Param::Loss, 0.1)]).expect_err("not drift's");
    assert!(e.contains("--loss does not apply to preset drift"), "{e}");
    assert!(Params::new(Preset::Seed002, &[(Param::Interval, 0.0)]).is_err());
}

/// The generator numbers every beat sent: lost beats leave gaps (burst-loss), beats a
/// pause holds back do not (heavy-tail); each member of a group has its own trace, the
/// first one the coordinator's replay tests' own.
#[test]
fn generated_sequence_numbers_count_the_beats_sent() {
    let p = Params::new(Preset::BurstLoss, &[(Param::Loss, 0.2)]).expect("valid");
    let beats: Vec<(f64, u64)> = p.generate(3).collect();
    assert!(beats.windows(2).all(|w| w[1].1 > w[0].1));
    let jumps = beats.windows(2).filter(|w| w[1].1 > w[0].1 + 1).count();
    assert!(jumps > 100, "{jumps} runs of lost beats");
    let p = Params::new(Preset::HeavyTail, &[(Param::PauseRate, 0.2)]).expect("valid");
    let beats: Vec<(f64, u64)> = p.generate(3).collect();
    assert!(beats.windows(2).all(|w| w[1].1 == w[0].1 + 1));
    assert!(beats.windows(2).any(|w| w[1].0 - w[0].0 > 1.5), "pauses");
    // Members: member 0 is the preset's own trace; another member another; until a
    // later instant when asked.
    let times = |m: u64, until: Option<f64>| {
        p.generate_member(3, m, until)
            .map(|(t, _)| t)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        times(0, None),
        p.generate(3).map(|(t, _)| t).collect::<Vec<_>>()
    );
    assert_ne!(times(1, None), times(0, None));
    assert!(times(1, Some(4000.0)).last().unwrap() > &3600.0);
}
