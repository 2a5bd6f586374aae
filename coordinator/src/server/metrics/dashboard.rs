//! The Grafana dashboard (`dashboards/rollcall.json`) reads only what the coordinator
//! exports. Every query on it is checked against the text the metrics endpoint serves
//! ([`super::render_registered`]): its metrics, the labels it matches, groups and
//! names in legends, the label values it matches on, and whether it takes a `rate` of
//! counters only. The dashboard must also show every exported metric.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

const DASHBOARD: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../dashboards/rollcall.json"
));

/// Labels Prometheus adds to every series it scrapes.
const SCRAPE_LABELS: [&str; 2] = ["instance", "job"];

/// Functions that take a range of a counter.
const COUNTER_FUNCTIONS: [&str; 3] = ["rate", "irate", "increase"];

/// Functions that read which series exist, not their values: they may read a counter
/// as it is.
const SERIES_FUNCTIONS: [&str; 3] = ["label_values", "absent", "count"];

/// One series name as the endpoint serves it.
#[derive(Debug, Default)]
struct Series {
    /// A counter, or a part of a histogram (`_bucket`, `_sum`, `_count`, all counters).
    counter: bool,
    /// Each label name with every value it takes.
    labels: BTreeMap<String, BTreeSet<String>>,
}

/// Every series name the endpoint serves.
#[derive(Debug)]
struct Exported {
    series: BTreeMap<String, Series>,
}

impl Exported {
    fn new() -> Self {
        Self::parse(&super::render_registered())
    }

    /// Reads the Prometheus text format (as much of it as the exporter writes).
    fn parse(text: &str) -> Self {
        let mut types = BTreeMap::new();
        let mut series: BTreeMap<String, Series> = BTreeMap::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut words = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                    types.insert(name.to_owned(), kind.to_owned());
                }
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            let name = &line[..end];
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    let base = name.strip_suffix(s)?;
                    types.get(base).filter(|k| *k != "counter" && *k != "gauge")
                })
                .or_else(|| types.get(name));
            let entry = series.entry(name.to_owned()).or_default();
            entry.counter = family.is_some_and(|k| k != "gauge");
            if line[end..].starts_with('{') {
                let close = line.rfind('}').expect("a label set is closed");
                for (label, value) in parse_label_set(&line[end + 1..close]) {
                    entry.labels.entry(label).or_default().insert(value);
                }
            }
        }
        Self { series }
    }

    /// The metric a series belongs to: its name without a histogram's suffix.
    fn family(name: &str) -> &str {
        ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name)
    }

    fn has_label(&self, series: &str, label: &str) -> bool {
        SCRAPE_LABELS.contains(&label)
            || self
                .series
                .get(series)
                .is_some_and(|s| s.labels.contains_key(label))
    }
}

/// `a="x",b="y"` into pairs.
fn parse_label_set(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.trim().is_empty() {
            return pairs;
        }
        assert_eq!(chars.next(), Some('"'), "label {name} has a quoted value");
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.extend(chars.next()),
                '"' => break,
                c => value.push(c),
            }
        }
        pairs.push((name.trim().to_owned(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Str(String),
    /// A template variable, `$x` or `${x}`.
    Var,
    Number,
    /// A range or subquery, `[5m]`.
    Range,
    Punct(String),
}

impl Token {
    fn is(&self, p: &str) -> bool {
        matches!(self, Self::Punct(q) if q == p)
    }

    fn ident(&self) -> Option<&str> {
        match self {
            Self::Ident(s) => Some(s),
            _ => None,
        }
    }
}

/// Splits PromQL into tokens: enough of the language to find metrics, label matchers
/// and label lists, not to evaluate anything.
fn tokenize(expr: &str) -> Vec<Token> {
    let chars: Vec<char> = expr.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    let ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            // A comment runs to the end of the line.
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"' || c == '\'' || c == '`' {
            let mut value = String::new();
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' && c != '`' {
                    i += 1;
                }
                value.extend(chars.get(i));
                i += 1;
            }
            i += 1;
            tokens.push(Token::Str(value));
        } else if c == '$' {
            i += 1;
            if chars.get(i) == Some(&'{') {
                while i < chars.len() && chars[i] != '}' {
                    i += 1;
                }
                i += 1;
            } else {
                while i < chars.len() && ident_char(chars[i]) {
                    i += 1;
                }
            }
            tokens.push(Token::Var);
        } else if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
            tokens.push(Token::Range);
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            while i < chars.len() && (ident_char(chars[i]) || chars[i] == '.') {
                i += 1;
            }
            tokens.push(Token::Number);
        } else if ident_char(c) {
            let start = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else {
            let two: String = chars[i..chars.len().min(i + 2)].iter().collect();
            let len = if ["=~", "!=", "!~", "==", ">=", "<="].contains(&two.as_str()) {
                2
            } else {
                1
            };
            tokens.push(Token::Punct(chars[i..i + len].iter().collect()));
            i += len;
        }
    }
    tokens
}

/// For each `(`, the index of its `)` (the end, if it has none).
fn matching_parens(tokens: &[Token]) -> BTreeMap<usize, usize> {
    let mut open = Vec::new();
    let mut pairs = BTreeMap::new();
    for (i, t) in tokens.iter().enumerate() {
        if t.is("(") {
            open.push(i);
        } else if t.is(")") {
            if let Some(o) = open.pop() {
                pairs.insert(o, i);
            }
        }
    }
    for o in open {
        pairs.insert(o, tokens.len());
    }
    pairs
}

/// What is wrong with one query, given what is exported (empty if nothing is).
/// `legend` is the query's legend format, whose `{{label}}`s must be labels too.
fn check_expr(expr: &str, legend: &str, exported: &Exported) -> Vec<String> {
    let tokens = tokenize(expr);
    let parens = matching_parens(&tokens);
    let mut problems = Vec::new();

    // Every metric, with the index of its token.
    let metrics: Vec<(usize, &str)> = tokens
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((i, t.ident()?)))
        .filter(|(_, name)| name.starts_with("rollcall_"))
        .collect();
    if metrics.is_empty() {
        problems.push(format!("`{expr}` reads no rollcall metric"));
    }

    for &(i, name) in &metrics {
        let Some(series) = exported.series.get(name) else {
            problems.push(format!("`{name}` is not exported by the coordinator"));
            continue;
        };
        // Its label matchers.
        if tokens.get(i + 1).is_some_and(|t| t.is("{")) {
            let mut j = i + 2;
            while let (Some(Token::Ident(label)), Some(Token::Punct(op)), Some(value)) =
                (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
            {
                problems.extend(check_matcher(name, series, label, op, value));
                j += 3;
                if tokens.get(j).is_some_and(|t| t.is(",")) {
                    j += 1;
                }
            }
            if !tokens.get(j).is_some_and(|t| t.is("}")) {
                problems.push(format!(
                    "cannot read the label matchers of `{name}` in `{expr}`"
                ));
            }
        }
        // What reads it: a counter only through rate or increase, a gauge never.
        let function = parens
            .iter()
            .filter(|(o, c)| **o < i && i < **c)
            .max_by_key(|(o, _)| **o)
            .and_then(|(o, _)| tokens.get(o.checked_sub(1)?)?.ident());
        let through_rate = function.is_some_and(|f| COUNTER_FUNCTIONS.contains(&f));
        let series_only = function.is_some_and(|f| SERIES_FUNCTIONS.contains(&f));
        if series.counter && !through_rate && !series_only {
            problems.push(format!(
                "counter `{name}` is read without rate() or increase() in `{expr}`"
            ));
        }
        if !series.counter && through_rate {
            problems.push(format!(
                "gauge `{name}` is read through a counter function in `{expr}`"
            ));
        }
    }

    // Label lists: `by`/`without` name labels of every metric they aggregate,
    // `on`/`ignoring`/`group_*` labels of some metric of the query.
    for (i, t) in tokens.iter().enumerate() {
        let Some(keyword) = t.ident() else { continue };
        let grouping = ["by", "without"].contains(&keyword);
        let matching = ["on", "ignoring", "group_left", "group_right"].contains(&keyword);
        if !(grouping || matching) || !tokens.get(i + 1).is_some_and(|t| t.is("(")) {
            continue;
        }
        let close = parens[&(i + 1)];
        let labels: Vec<&str> = tokens[i + 2..close]
            .iter()
            .filter_map(Token::ident)
            .collect();
        // `sum by (x) (arg)` or `sum (arg) by (x)`.
        let argument = if tokens.get(close + 1).is_some_and(|t| t.is("(")) {
            Some((close + 1, parens[&(close + 1)]))
        } else if i > 0 && tokens[i - 1].is(")") {
            parens
                .iter()
                .find(|(_, c)| **c == i - 1)
                .map(|(o, c)| (*o, *c))
        } else {
            None
        };
        for label in labels {
            let known = if grouping {
                let aggregated: Vec<&str> = metrics
                    .iter()
                    .filter(|(m, _)| argument.is_some_and(|(o, c)| o < *m && *m < c))
                    .map(|(_, name)| *name)
                    .collect();
                aggregated.iter().all(|m| exported.has_label(m, label))
            } else {
                metrics.iter().any(|(_, m)| exported.has_label(m, label))
            };
            if !known {
                problems.push(format!(
                    "`{keyword} ({label})` names no label of the metrics in `{expr}`"
                ));
            }
        }
    }

    // `label_values(metric, label)`, in template variable queries.
    for (i, t) in tokens.iter().enumerate() {
        if t.ident() != Some("label_values") || !tokens.get(i + 1).is_some_and(|t| t.is("(")) {
            continue;
        }
        let close = parens[&(i + 1)];
        let Some(comma) = (i + 2..close).find(|j| tokens[*j].is(",")) else {
            continue;
        };
        let label = tokens
            .get(comma + 1)
            .and_then(Token::ident)
            .unwrap_or_default();
        for (_, m) in metrics.iter().filter(|(m, _)| i < *m && *m < comma) {
            if !exported.has_label(m, label) {
                problems.push(format!("`{m}` has no label `{label}` (in `{expr}`)"));
            }
        }
    }

    // `{{label}}` in the legend.
    for part in legend.split("{{").skip(1) {
        let label = part.split("}}").next().unwrap_or_default().trim();
        if !metrics.iter().any(|(_, m)| exported.has_label(m, label)) {
            problems.push(format!(
                "legend `{legend}` names `{label}`, no label of `{expr}`"
            ));
        }
    }
    problems
}

/// One `label op value` of a selector.
fn check_matcher(name: &str, series: &Series, label: &str, op: &str, value: &Token) -> Vec<String> {
    if SCRAPE_LABELS.contains(&label) {
        return Vec::new();
    }
    let Some(values) = series.labels.get(label) else {
        return vec![format!("`{name}` has no label `{label}`")];
    };
    let Token::Str(value) = value else {
        return vec![format!(
            "`{name}{{{label}{op}...}}` is not matched to a string"
        )];
    };
    if value.contains('$') {
        return Vec::new();
    }
    // A literal, or a regular expression that only lists values: every value it names
    // must be one the label takes. Anything fancier, or a template variable, is not
    // checked.
    let listed = match op {
        "=" | "!=" => vec![value.as_str()],
        "=~" | "!~"
            if value
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '|') =>
        {
            value.split('|').collect()
        }
        _ => Vec::new(),
    };
    listed
        .into_iter()
        .filter(|v| !values.contains(*v))
        .map(|v| format!("`{name}` never has `{label}=\"{v}\"` (it takes {values:?})"))
        .collect()
}

/// The elements of a JSON array; none if it is not one.
fn items(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// Every query of a dashboard: `(where, expr, legend)`, from panels (within rows,
/// collapsed or not) and template variables, and what is wrong with its structure.
fn queries(dashboard: &Value) -> (Vec<(String, String, String)>, Vec<String>) {
    fn walk(
        panels: &[Value],
        queries: &mut Vec<(String, String, String)>,
        problems: &mut Vec<String>,
    ) {
        for panel in panels {
            let title = panel["title"].as_str().unwrap_or("(untitled)");
            check_datasource(title, &panel["datasource"], problems);
            match panel["type"].as_str() {
                Some("row") => {
                    walk(items(&panel["panels"]), queries, problems);
                    continue;
                }
                Some("text") => continue,
                _ => {}
            }
            let mut found = false;
            for target in items(&panel["targets"]) {
                check_datasource(title, &target["datasource"], problems);
                if let Some(expr) = target["expr"].as_str().filter(|e| !e.trim().is_empty()) {
                    let legend = target["legendFormat"].as_str().unwrap_or_default();
                    queries.push((
                        format!("panel `{title}`"),
                        expr.to_owned(),
                        legend.to_owned(),
                    ));
                    found = true;
                }
            }
            if !found {
                problems.push(format!("panel `{title}` has no query"));
            }
        }
    }

    /// A datasource must be the dashboard's variable, so the dashboard imports anywhere.
    fn check_datasource(title: &str, datasource: &Value, problems: &mut Vec<String>) {
        let uid = &datasource["uid"];
        if !datasource.is_null() && uid != "${datasource}" {
            problems.push(format!(
                "`{title}` uses datasource {uid}, not `${{datasource}}`"
            ));
        }
    }

    let mut queries = Vec::new();
    let mut problems = Vec::new();
    match dashboard["panels"].as_array() {
        Some(panels) if !panels.is_empty() => walk(panels, &mut queries, &mut problems),
        _ => problems.push("the dashboard has no panels".to_owned()),
    }
    if queries.is_empty() {
        problems.push("the dashboard has no queries".to_owned());
    }
    for variable in items(&dashboard["templating"]["list"]) {
        if variable["type"] != "query" {
            continue;
        }
        let name = variable["name"].as_str().unwrap_or_default();
        check_datasource(name, &variable["datasource"], &mut problems);
        let query = &variable["query"];
        let expr = query["query"]
            .as_str()
            .or(query.as_str())
            .unwrap_or_default();
        queries.push((format!("variable `{name}`"), expr.to_owned(), String::new()));
    }
    (queries, problems)
}

/// Everything wrong with a dashboard, and the metrics (without histogram suffixes)
/// its queries read.
fn check_dashboard(json: &str, exported: &Exported) -> (Vec<String>, BTreeSet<String>) {
    let dashboard: Value = match serde_json::from_str(json) {
        Ok(d) => d,
        Err(e) => {
            return (
                vec![format!("the dashboard is not JSON: {e}")],
                BTreeSet::new(),
            )
        }
    };
    let (queries, mut problems) = queries(&dashboard);
    let mut read = BTreeSet::new();
    for (place, expr, legend) in &queries {
        problems.extend(
            check_expr(expr, legend, exported)
                .into_iter()
                .map(|p| format!("{place}: {p}")),
        );
        for token in tokenize(expr) {
            if let Some(name) = token.ident().filter(|n| n.starts_with("rollcall_")) {
                read.insert(Exported::family(name).to_owned());
            }
        }
    }
    (problems, read)
}

#[test]
fn the_dashboard_reads_only_what_is_exported() {
    let exported = Exported::new();
    assert!(
        exported.series.len() > 10,
        "the endpoint's text was read: {:?}",
        exported.series.keys()
    );
    let (problems, _) = check_dashboard(DASHBOARD, &exported);
    assert!(
        problems.is_empty(),
        "dashboards/rollcall.json:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_dashboard_shows_every_exported_metric() {
    let exported = Exported::new();
    let (_, read) = check_dashboard(DASHBOARD, &exported);
    let missing: Vec<&str> = exported
        .series
        .keys()
        .map(|s| Exported::family(s))
        .filter(|m| !read.contains(*m))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(
        missing.is_empty(),
        "exported but on no panel of dashboards/rollcall.json: {missing:?}"
    );
}

#[test]
fn the_check_accepts_good_queries() {
    let exported = Exported::new();
    for (expr, legend) in [
        (
            r#"histogram_quantile(0.99, sum by (le, api) (rate(rollcall_request_duration_seconds_bucket{instance=~"$instance", api=~"commit_offsets|heartbeat"}[$__rate_interval])))"#,
            "{{api}}",
        ),
        (
            r#"sum(rate(rollcall_guard_transitions_total{transition="held"}[5m])) by (guard)"#,
            "{{guard}}",
        ),
        ("sum without (instance) (rollcall_members)", "{{liveness}}"),
        ("label_values(rollcall_connections, instance)", ""),
        (
            "sum(increase(rollcall_commits_accepted_total[1h])) / sum(increase(rollcall_store_batches_total[1h]))",
            "",
        ),
    ] {
        assert_eq!(check_expr(expr, legend, &exported), Vec::<String>::new(), "{expr}");
    }
}

#[test]
fn the_check_finds_what_is_wrong() {
    let exported = Exported::new();
    let cases = [
        (
            "sum(rate(rollcall_heartbeat_total[5m]))",
            "",
            "`rollcall_heartbeat_total` is not exported",
        ),
        (
            "rollcall_request_duration_seconds",
            "",
            "`rollcall_request_duration_seconds` is not exported",
        ),
        (
            "sum by (api) (rate(rollcall_heartbeats_total[5m]))",
            "",
            "`by (api)` names no label",
        ),
        (
            "sum(rate(rollcall_expulsions_total[5m])) by (cause)",
            "",
            "`by (cause)` names no label",
        ),
        (
            r#"rate(rollcall_requests_total{method="join"}[5m])"#,
            "",
            "has no label `method`",
        ),
        (
            r#"rate(rollcall_requests_total{api="commit"}[5m])"#,
            "",
            r#"never has `api="commit"`"#,
        ),
        (
            r#"rate(rollcall_requests_total{api=~"join|sync"}[5m])"#,
            "",
            r#"never has `api="sync"`"#,
        ),
        (
            "rate(rollcall_connections[5m])",
            "",
            "gauge `rollcall_connections`",
        ),
        (
            "sum(rollcall_heartbeats_total)",
            "",
            "counter `rollcall_heartbeats_total` is read without",
        ),
        (
            "sum(rate(process_cpu_seconds_total[5m]))",
            "",
            "reads no rollcall metric",
        ),
        (
            "label_values(rollcall_members, api)",
            "",
            "has no label `api`",
        ),
        (
            "sum by (api) (rate(rollcall_requests_total[5m]))",
            "{{reason}}",
            "names `reason`",
        ),
    ];
    for (expr, legend, expected) in cases {
        let problems = check_expr(expr, legend, &exported);
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "`{expr}`: expected a problem containing {expected:?}, got {problems:?}"
        );
    }

    // Panels inside a collapsed row are read too; a dashboard needs panels.
    let nested = r#"{"panels": [{"type": "row", "title": "r", "collapsed": true, "panels": [
        {"type": "timeseries", "title": "p", "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "targets": [{"expr": "sum(rate(rollcall_bogus_total[5m]))", "refId": "A"}]}]}]}"#;
    let (problems, _) = check_dashboard(nested, &exported);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("panel `p`: `rollcall_bogus_total` is not exported")),
        "{problems:?}"
    );
    let (problems, _) = check_dashboard(r#"{"panels": []}"#, &exported);
    assert!(
        problems.iter().any(|p| p.contains("no panels")),
        "{problems:?}"
    );
    let fixed_uid = r#"{"panels": [{"type": "stat", "title": "s", "datasource": {"uid": "P1809F7CD0C75ACF3"},
         "targets": [{"expr": "sum(rollcall_connections)"}]}, {"type": "stat", "title": "empty"}]}"#;
    let (problems, _) = check_dashboard(fixed_uid, &exported);
    assert!(
        problems.iter().any(|p| p.contains("not `${datasource}`")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("panel `empty` has no query")),
        "{problems:?}"
    );
}
