//! The timeout advice and the group's summary of its gaps, as tables or JSON.

use rollcall_protocol::{DescribeGroupResponse, DetectionSummary};
use serde::Serialize;
use std::time::Duration;

use super::format_ms;
use crate::core::liveness::advice::{
    advise, Advice, Basis, Target, CAP, CONFIDENCE, MIN_EXCEEDANCES, MIN_POOLED_GAPS, MIN_SPAN,
};

/// What the detector has learned from the group's pooled gaps (DescribeGroup version 3).
#[derive(Debug, Serialize)]
pub(super) struct SummaryJson {
    pooled_gaps: u64,
    span_ms: u64,
    clean_gaps: u64,
    gap_median_ms: u32,
    gap_longest_ms: u32,
    longest_normalised: f64,
    tail_gaps: u64,
    threshold_normalised: f64,
    exceedances: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scale_normalised: Option<f64>,
    loss_runs: u64,
    lost_beats: u64,
    tail: Vec<TailJson>,
}

#[derive(Debug, Serialize)]
pub(super) struct TailJson {
    over_normalised: f64,
    gaps: u64,
}

impl From<&DetectionSummary> for SummaryJson {
    fn from(s: &DetectionSummary) -> Self {
        let fitted = s.scale_centi > 0 && s.exceedances >= MIN_EXCEEDANCES;
        Self {
            pooled_gaps: s.pooled_gaps,
            span_ms: s.span_ms,
            clean_gaps: s.clean_gaps,
            gap_median_ms: s.gap_median_ms,
            gap_longest_ms: s.gap_longest_ms,
            longest_normalised: f64::from(s.longest_centi) / 100.0,
            tail_gaps: s.tail_gaps,
            threshold_normalised: f64::from(s.threshold_centi) / 100.0,
            exceedances: s.exceedances,
            shape: fitted.then(|| f64::from(s.shape_milli) / 1000.0),
            scale_normalised: fitted.then(|| f64::from(s.scale_centi) / 100.0),
            loss_runs: s.loss_runs,
            lost_beats: s.lost_beats,
            tail: s
                .tail
                .iter()
                .map(|t| TailJson {
                    over_normalised: f64::from(t.over_centi) / 100.0,
                    gaps: t.gaps,
                })
                .collect(),
        }
    }
}

/// The advised session timeout and what it rests on, or why there is none.
#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(super) enum AdviceJson {
    /// The coordinator does not report its group's pooled gaps (DescribeGroup below
    /// version 3).
    Unavailable,
    /// Too little history.
    NotYet {
        pooled_gaps: u64,
        span_ms: u64,
        needs_gaps: u64,
        needs_span_ms: u64,
    },
    /// A timeout.
    Timeout {
        session_timeout_ms: u64,
        basis: &'static str,
        false_expulsions_per_year: f64,
        members: usize,
        /// At most `false_expulsions_per_year` when the basis reaches the target.
        promise_per_year: f64,
        /// The chance per gap the target allows.
        allowed_per_gap: f64,
        /// The upper bound on the chance that a gap exceeds the timeout.
        bound_per_gap: f64,
        confidence: f64,
        gaps: u64,
        pooled_gaps: u64,
        span_ms: u64,
        longest_gap_ms: u64,
        pause_floor_ms: u64,
        floored: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        shape_upper: Option<f64>,
        assumptions: &'static str,
    },
}

pub(super) const ADVICE_ASSUMPTIONS: &str = "gaps independent, the members of one rhythm and the \
     record representative of what comes; a pause that hits many members at once \
     expels them together";

/// The group's advice, from the summary of its pooled gaps (DescribeGroup version 3).
pub(super) fn group_advice(
    r: &DescribeGroupResponse,
    target: &Target,
) -> Option<(AdviceJson, Advice)> {
    let d = r.detection.as_ref()?;
    let Some(summary) = &d.summary else {
        return Some((
            AdviceJson::Unavailable,
            Advice::NotYet {
                gaps: 0,
                span: Duration::ZERO,
            },
        ));
    };
    let advice = advise(summary, target);
    let json = match &advice {
        Advice::NotYet { gaps, span } => AdviceJson::NotYet {
            pooled_gaps: *gaps,
            span_ms: span.as_millis() as u64,
            needs_gaps: MIN_POOLED_GAPS,
            needs_span_ms: MIN_SPAN.as_millis() as u64,
        },
        Advice::Timeout(t) => AdviceJson::Timeout {
            session_timeout_ms: t.timeout_ms,
            basis: t.basis.as_str(),
            false_expulsions_per_year: target.per_year,
            members: target.members,
            promise_per_year: t.promise_per_year,
            allowed_per_gap: t.allowed,
            bound_per_gap: t.bound,
            confidence: CONFIDENCE,
            gaps: t.gaps,
            pooled_gaps: t.pooled,
            span_ms: t.span.as_millis() as u64,
            longest_gap_ms: t.longest_ms,
            pause_floor_ms: t.pause_floor_ms,
            floored: t.floored,
            shape_upper: t.shape_upper,
            assumptions: ADVICE_ASSUMPTIONS,
        },
    };
    Some((json, advice))
}

/// `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate a year, shortly: `0.31`, `12`, `1.6e5`.
fn per_year(rate: f64) -> String {
    if rate < 1.0 {
        format!("{rate:.2}")
    } else if rate < 10_000.0 {
        format!("{rate:.0}")
    } else {
        format!("{rate:.1e}")
    }
}

/// The advice as text: the timeout, then what the data supports, with its gaps, span,
/// confidence, basis and assumptions.
pub(super) fn advice_text(advice: &Advice, summary: bool, target: &Target) -> String {
    let t = match advice {
        _ if !summary => {
            return "advice: none: the coordinator does not report the group's pooled gaps \
                    (DescribeGroup version 3)\n"
                .into()
        }
        Advice::NotYet { gaps, span } => {
            return format!(
                "advice: no advice yet: {} gaps over {}; the advisor needs {} gaps and {}\n",
                thousands(*gaps),
                format_ms(span.as_millis() as u64),
                thousands(MIN_POOLED_GAPS),
                format_ms(MIN_SPAN.as_millis() as u64),
            )
        }
        Advice::Timeout(t) => t,
    };
    let asked = per_year(target.per_year);
    let timeout = format_ms(t.timeout_ms);
    let mut out = match t.basis {
        Basis::Observed | Basis::Tail => format!(
            "advice: a session timeout of {timeout} keeps false expulsions under {asked} a \
             year across these {} members ({} basis)\n",
            target.members,
            t.basis.as_str()
        ),
        Basis::PauseFloor => format!(
            "advice: a session timeout of {timeout} (the pause floor); no timeout the data \
             supports keeps false expulsions under {asked} a year across these {} members\n",
            target.members
        ),
        Basis::Unreachable => format!(
            "advice: no timeout under {} keeps false expulsions under {asked} a year across \
             these {} members: the group's long gaps are {}; a session timeout of {timeout} \
             (the pause floor)\n",
            format_ms(CAP.as_millis() as u64),
            target.members,
            match t.shape_upper {
                Some(xi) if xi.is_finite() => format!("heavy-tailed (ξ ≤ {xi:.2})"),
                _ => "too heavy-tailed to bound (ξ̂ ≥ 0.5)".to_owned(),
            }
        ),
    };
    out.push_str(&format!(
        "        the data bounds a gap longer than {timeout} at ≤ {:.1e} ({:.0}%, {} gaps over \
         {}, the longest {}), so ≤ {} false expulsions a year\n",
        t.bound,
        CONFIDENCE * 100.0,
        thousands(t.gaps),
        format_ms(t.span.as_millis() as u64),
        format_ms(t.longest_ms),
        per_year(t.promise_per_year),
    ));
    if let Some(xi) = t.shape_upper.filter(|_| t.basis == Basis::Tail) {
        out.push_str(&format!(
            "        beyond the gaps counted, from a generalised Pareto fit of the long gaps \
             with shape ξ ≤ {xi:.2} (never lighter than exponential)\n"
        ));
    }
    let shown = if t.longest_ms < t.timeout_ms {
        "which none has shown"
    } else {
        "which some have come close to"
    };
    out.push_str(&format!(
        "        fewer only if no member pauses longer than {timeout}, {shown} (the floor: \
         the median gap + {})\n        assumes {ADVICE_ASSUMPTIONS}\n",
        format_ms(target.pause_floor.as_millis() as u64),
    ));
    out
}

/// The group's pooled gaps, as text.
pub(super) fn summary_text(s: &DetectionSummary) -> String {
    let fit = if s.scale_centi > 0 && s.exceedances >= MIN_EXCEEDANCES {
        format!(
            "ξ {:.2}, σ {:.2}× the mean",
            f64::from(s.shape_milli) / 1000.0,
            f64::from(s.scale_centi) / 100.0
        )
    } else {
        format!("no fit below {MIN_EXCEEDANCES} exceedances")
    };
    format!(
        "gaps:       {} pooled over {} ({} since the last long gap), median {}, longest {} \
         ({:.2}× its member's mean)\ntail:       {} of {} over {:.2}× the mean ({fit}); \
         {} beats lost in {} runs\n",
        thousands(s.pooled_gaps),
        format_ms(s.span_ms),
        thousands(s.clean_gaps),
        format_ms(u64::from(s.gap_median_ms)),
        format_ms(u64::from(s.gap_longest_ms)),
        f64::from(s.longest_centi) / 100.0,
        thousands(s.exceedances),
        thousands(s.tail_gaps),
        f64::from(s.threshold_centi) / 100.0,
        thousands(s.lost_beats),
        thousands(s.loss_runs),
    )
}
