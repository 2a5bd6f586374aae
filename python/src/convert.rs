//! Values between Python and the client crate: partitions, offsets, durations, and the
//! events as Python classes.

use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyFrozenSet, PyMapping, PyTuple};
use rollcall_client::{Event, LostReason, PartitionSet};

use crate::errors::Failure;

/// One partition of one topic. Hashable and ordered (by topic, then partition); where a
/// partition is expected, a `(topic, partition)` tuple does too.
#[pyclass(module = "rollcall", frozen, eq, hash, ord, from_py_object)]
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct TopicPartition {
    /// The topic.
    #[pyo3(get)]
    topic: String,
    /// The partition index.
    #[pyo3(get)]
    partition: u32,
}

#[pymethods]
impl TopicPartition {
    #[new]
    fn new(topic: String, partition: u32) -> Self {
        Self { topic, partition }
    }

    fn __repr__(&self) -> String {
        format!("TopicPartition({:?}, {})", self.topic, self.partition)
    }

    fn __str__(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    #[classattr]
    fn __match_args__() -> (&'static str, &'static str) {
        ("topic", "partition")
    }
}

impl From<&rollcall_client::TopicPartition> for TopicPartition {
    fn from(tp: &rollcall_client::TopicPartition) -> Self {
        Self {
            topic: tp.topic.clone(),
            partition: tp.partition,
        }
    }
}

/// A Python `TopicPartition`.
pub(crate) fn topic_partition<'py>(
    py: Python<'py>,
    tp: &rollcall_client::TopicPartition,
) -> PyResult<Bound<'py, TopicPartition>> {
    Bound::new(py, TopicPartition::from(tp))
}

/// A partition from a `TopicPartition` or a `(topic, partition)` tuple.
pub(crate) fn extract_partition(
    value: &Bound<'_, PyAny>,
) -> PyResult<rollcall_client::TopicPartition> {
    if let Ok(tp) = value.cast::<TopicPartition>() {
        let tp = tp.get();
        return Ok(rollcall_client::TopicPartition::new(
            tp.topic.clone(),
            tp.partition,
        ));
    }
    if let Ok(tuple) = value.cast::<PyTuple>() {
        if let Ok((topic, partition)) = tuple.extract::<(String, u32)>() {
            return Ok(rollcall_client::TopicPartition::new(topic, partition));
        }
    }
    Err(PyTypeError::new_err(format!(
        "expected a TopicPartition or a (topic, partition) tuple, got {}",
        value.repr()?
    )))
}

/// A `frozenset` of Python `TopicPartition`s.
fn partition_set<'py>(py: Python<'py>, set: &PartitionSet) -> PyResult<Bound<'py, PyFrozenSet>> {
    let items = set
        .iter()
        .map(|tp| topic_partition(py, tp))
        .collect::<PyResult<Vec<_>>>()?;
    PyFrozenSet::new(py, items)
}

/// An offset to commit: the partition, the offset (by convention the next record to
/// process) and free-form metadata.
#[pyclass(module = "rollcall", frozen, eq)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Offset {
    #[pyo3(get)]
    partition: TopicPartition,
    #[pyo3(get)]
    offset: i64,
    #[pyo3(get)]
    metadata: String,
}

#[pymethods]
impl Offset {
    #[new]
    #[pyo3(signature = (partition, offset, metadata = String::new()))]
    fn new(partition: &Bound<'_, PyAny>, offset: i64, metadata: String) -> PyResult<Self> {
        let tp = extract_partition(partition)?;
        Ok(Self {
            partition: TopicPartition::from(&tp),
            offset,
            metadata,
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Offset({}, {}, {:?})",
            self.partition.__repr__(),
            self.offset,
            self.metadata
        )
    }
}

/// Offsets to commit: a mapping of partitions (or `(topic, partition)` tuples) to
/// offsets, or an iterable of `Offset`s.
pub(crate) fn extract_offsets(value: &Bound<'_, PyAny>) -> PyResult<Vec<rollcall_client::Offset>> {
    let mut out = Vec::new();
    if let Ok(mapping) = value.cast::<PyMapping>() {
        for item in mapping.items()?.iter() {
            let (key, offset): (Bound<'_, PyAny>, i64) = item.extract()?;
            out.push(rollcall_client::Offset::new(
                extract_partition(&key)?,
                offset,
            ));
        }
        return Ok(out);
    }
    for item in value.try_iter()? {
        let item = item?;
        let offset = item.cast::<Offset>().map_err(|_| {
            PyTypeError::new_err(
                "offsets: expected a mapping of partitions to offsets or an iterable of Offset",
            )
        })?;
        let o = offset.get();
        let mut offset = rollcall_client::Offset::new(
            rollcall_client::TopicPartition::new(o.partition.topic.clone(), o.partition.partition),
            o.offset,
        );
        offset.metadata = o.metadata.clone();
        out.push(offset);
    }
    Ok(out)
}

/// An offset as committed, with its metadata.
#[pyclass(module = "rollcall", frozen, eq)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Committed {
    #[pyo3(get)]
    offset: i64,
    #[pyo3(get)]
    metadata: String,
}

#[pymethods]
impl Committed {
    fn __repr__(&self) -> String {
        format!("Committed({}, {:?})", self.offset, self.metadata)
    }
}

impl From<&rollcall_client::Committed> for Committed {
    fn from(c: &rollcall_client::Committed) -> Self {
        Self {
            offset: c.offset,
            metadata: c.metadata.clone(),
        }
    }
}

/// A member's assignment as its connection task knows it (it can run ahead of the
/// events not yet taken).
#[pyclass(module = "rollcall", frozen)]
#[derive(Debug)]
pub(crate) struct Assignment {
    #[pyo3(get)]
    generation: u32,
    #[pyo3(get)]
    partitions: Py<PyFrozenSet>,
    #[pyo3(get)]
    revoking: Py<PyFrozenSet>,
}

#[pymethods]
impl Assignment {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Assignment(generation={}, partitions={}, revoking={})",
            self.generation,
            self.partitions.bind(py).repr()?,
            self.revoking.bind(py).repr()?
        ))
    }
}

pub(crate) fn assignment(
    py: Python<'_>,
    a: &rollcall_client::Assignment,
) -> PyResult<Py<Assignment>> {
    Py::new(
        py,
        Assignment {
            generation: a.generation,
            partitions: partition_set(py, &a.partitions)?.unbind(),
            revoking: partition_set(py, &a.revoking)?.unbind(),
        },
    )
}

/// A number of seconds (an `int` or a `float`) as a duration; `what` names it in the
/// error.
pub(crate) fn seconds(what: &str, value: f64) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        Failure::config(format!(
            "{what} must be a finite, non-negative number of seconds, got {value}"
        ))
    })
}

/// The base of every event class: something the application must act on, in the order
/// it happened.
#[pyclass(module = "rollcall", name = "Event", frozen, subclass)]
#[derive(Debug)]
pub(crate) struct EventBase;

macro_rules! partitions_event {
    ($(#[$doc:meta])* $name:ident, $pyname:literal) => {
        $(#[$doc])*
        #[pyclass(module = "rollcall", name = $pyname, frozen, extends = EventBase)]
        #[derive(Debug)]
        pub(crate) struct $name {
            #[pyo3(get)]
            partitions: Py<PyFrozenSet>,
        }

        #[pymethods]
        impl $name {
            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                Ok(format!(concat!($pyname, "(partitions={})"), sorted(py, &self.partitions)?))
            }

            #[classattr]
            fn __match_args__() -> (&'static str,) {
                ("partitions",)
            }
        }
    };
}

macro_rules! generation_event {
    ($(#[$doc:meta])* $name:ident, $pyname:literal) => {
        $(#[$doc])*
        #[pyclass(module = "rollcall", name = $pyname, frozen, extends = EventBase)]
        #[derive(Debug)]
        pub(crate) struct $name {
            #[pyo3(get)]
            partitions: Py<PyFrozenSet>,
            #[pyo3(get)]
            generation: u32,
        }

        #[pymethods]
        impl $name {
            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                Ok(format!(
                    concat!($pyname, "(partitions={}, generation={})"),
                    sorted(py, &self.partitions)?,
                    self.generation
                ))
            }

            #[classattr]
            fn __match_args__() -> (&'static str, &'static str) {
                ("partitions", "generation")
            }
        }
    };
}

generation_event!(
    /// The member now owns these partitions in addition to those it had.
    Assigned,
    "Assigned"
);
generation_event!(
    /// The coordinator asks for these partitions back: finish, commit, then
    /// `ack_revocation`.
    RevokeRequested,
    "RevokeRequested"
);
partitions_event!(
    /// The lease ran out or the connection dropped: stop acting on every partition
    /// until `Resumed` (or a `Lost` that ends the membership).
    Suspended,
    "Suspended"
);
partitions_event!(
    /// The coordinator answered again after a suspension: act on these again.
    Resumed,
    "Resumed"
);

/// These partitions are no longer the member's: stop working on them at once.
#[pyclass(module = "rollcall", name = "Lost", frozen, extends = EventBase)]
#[derive(Debug)]
pub(crate) struct Lost {
    #[pyo3(get)]
    partitions: Py<PyFrozenSet>,
    /// `expelled`, `fenced`, `lease_expired`, `membership_gone`, `reassigned`, `left`.
    #[pyo3(get)]
    reason: &'static str,
    /// With `reason == "expelled"`, why: `session_expired`, `progress_expired`,
    /// `rebalance_timeout`, `fenced`, `left`.
    #[pyo3(get)]
    expel_reason: Option<&'static str>,
}

#[pymethods]
impl Lost {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Lost(partitions={}, reason={:?}, expel_reason={})",
            sorted(py, &self.partitions)?,
            self.reason,
            self.expel_reason
                .map_or_else(|| "None".to_owned(), |r| format!("{r:?}"))
        ))
    }

    /// Whether the membership ended (every reason but `reassigned`).
    #[getter]
    fn ends_membership(&self) -> bool {
        self.reason != "reassigned"
    }

    #[classattr]
    fn __match_args__() -> (&'static str, &'static str) {
        ("partitions", "reason")
    }
}

/// The member cannot continue; no further events follow. `error` is the exception
/// that says why (a `FencedInstanceError`, or the code that refused the join).
#[pyclass(module = "rollcall", name = "Fatal", frozen, extends = EventBase)]
#[derive(Debug)]
pub(crate) struct Fatal {
    #[pyo3(get)]
    error: Py<PyAny>,
}

#[pymethods]
impl Fatal {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Fatal({})", self.error.bind(py).repr()?))
    }

    #[classattr]
    fn __match_args__() -> (&'static str,) {
        ("error",)
    }
}

/// A set's repr in its natural order, for the events' reprs.
fn sorted(py: Python<'_>, set: &Py<PyFrozenSet>) -> PyResult<String> {
    let builtins = py.import("builtins")?;
    let list = builtins.getattr("sorted")?.call1((set.bind(py),))?;
    Ok(format!("frozenset({})", list.repr()?))
}

fn lost_reason(reason: LostReason) -> (&'static str, Option<&'static str>) {
    match reason {
        LostReason::Expelled(r) => ("expelled", Some(r.as_str())),
        LostReason::Fenced => ("fenced", None),
        LostReason::LeaseExpired => ("lease_expired", None),
        LostReason::MembershipGone => ("membership_gone", None),
        LostReason::Reassigned => ("reassigned", None),
        LostReason::Left => ("left", None),
        _ => ("unknown", None),
    }
}

/// An event as an instance of its Python class.
pub(crate) fn event(py: Python<'_>, event: Event) -> PyResult<Py<PyAny>> {
    let base = PyClassInitializer::from(EventBase);
    let object = match event {
        Event::Assigned {
            partitions,
            generation,
        } => {
            let partitions = partition_set(py, &partitions)?.unbind();
            Py::new(
                py,
                base.add_subclass(Assigned {
                    partitions,
                    generation,
                }),
            )?
            .into_any()
        }
        Event::RevokeRequested {
            partitions,
            generation,
        } => {
            let partitions = partition_set(py, &partitions)?.unbind();
            Py::new(
                py,
                base.add_subclass(RevokeRequested {
                    partitions,
                    generation,
                }),
            )?
            .into_any()
        }
        Event::Lost { partitions, reason } => {
            let partitions = partition_set(py, &partitions)?.unbind();
            let (reason, expel_reason) = lost_reason(reason);
            Py::new(
                py,
                base.add_subclass(Lost {
                    partitions,
                    reason,
                    expel_reason,
                }),
            )?
            .into_any()
        }
        Event::Suspended { partitions } => {
            let partitions = partition_set(py, &partitions)?.unbind();
            Py::new(py, base.add_subclass(Suspended { partitions }))?.into_any()
        }
        Event::Resumed { partitions } => {
            let partitions = partition_set(py, &partitions)?.unbind();
            Py::new(py, base.add_subclass(Resumed { partitions }))?.into_any()
        }
        Event::Fatal(error) => {
            let error = Failure::from(error).into_py(py).into_value(py).into_any();
            Py::new(py, base.add_subclass(Fatal { error }))?.into_any()
        }
        other => {
            return Err(PyTypeError::new_err(format!(
                "an event this package does not know: {other:?}"
            )))
        }
    };
    Ok(object)
}

/// An event handed from a runtime thread to Python (converted there, under the GIL).
#[derive(Debug)]
pub(crate) struct EventOut(pub(crate) Event);

impl<'py> IntoPyObject<'py> for EventOut {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        Ok(event(py, self.0)?.into_bound(py))
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TopicPartition>()?;
    m.add_class::<Offset>()?;
    m.add_class::<Committed>()?;
    m.add_class::<Assignment>()?;
    m.add_class::<EventBase>()?;
    m.add_class::<Assigned>()?;
    m.add_class::<RevokeRequested>()?;
    m.add_class::<Lost>()?;
    m.add_class::<Suspended>()?;
    m.add_class::<Resumed>()?;
    m.add_class::<Fatal>()?;
    Ok(())
}
