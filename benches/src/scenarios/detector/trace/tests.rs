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

#[test]
fn a_group_trace_is_read_for_one_member() {
    let text = "time_s,member_id\n0.5,a\n0.6,b\n1.5,a\n0.4,b\n2.5,a\n";
    let read = |member: Option<&str>| {
        let mut r =
            CsvReader::new(text.as_bytes(), "t.csv".into()).with_member(member.map(str::to_owned));
        let mut times = Vec::new();
        while let Some(line) = r.next_line().unwrap() {
            if let Line::Arrival(t) = line {
                times.push(t);
            }
        }
        times
    };
    assert_eq!(read(None), vec![0.5, 1.5, 2.5]);
    assert_eq!(read(Some("a")), vec![0.5, 1.5, 2.5]);
    // b's own arrivals out of order are an error, but not a's.
    let mut r = CsvReader::new(text.as_bytes(), "t.csv".into()).with_member(Some("b".into()));
    let mut result = Ok(None);
    for _ in 0..10 {
        result = r.next_line();
        if !matches!(result, Ok(Some(_))) {
            break;
        }
    }
    let e = result.unwrap_err();
    assert_eq!(e.line, 5, "{e:?}");
}

#[test]
fn csv_lines_headers_comments_and_crash() {
    let lines = read("time\n# a comment\n0.5\n\n1.5\r\n1.5\ncrash,3\n2.25\n").expect("valid");
    assert_eq!(
        lines,
        vec![
            Line::Arrival(0.5),
            Line::Arrival(1.5),
            Line::Arrival(1.5),
            Line::Crash(3.0),
            Line::Arrival(2.25),
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
        ("1,a,b\n", 1, "expected one arrival time"),
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
    assert_eq!(r.next_line(), Ok(Some(Line::Arrival(1.0))));
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
    let arrivals: Vec<f64> = p.generate(1).collect();
    // Beats 1..=99, the ones held by the pause arriving as one.
    assert!((95..=99).contains(&arrivals.len()), "{}", arrivals.len());
    assert!(arrivals.windows(2).all(|w| w[1] > w[0]));
    let longest = arrivals.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    assert!((3.4..4.7).contains(&longest), "{longest}");
    // The same seed, the same trace; another seed, another.
    assert_eq!(arrivals, p.generate(1).collect::<Vec<_>>());
    assert_ne!(arrivals, p.generate(2).collect::<Vec<_>>());
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
        let arrivals: Vec<f64> = p.generate(7).collect();
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
