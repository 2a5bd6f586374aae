//! `Member` (one membership) and `Events` (its events, blocking or asyncio).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rollcall_client::Event;

use crate::client::{topics_arg, CommittedOut};
use crate::convert::{
    assignment, event, extract_offsets, extract_partition, seconds, Assignment, EventOut,
};
use crate::errors::{to_py, Failure};
use crate::runtime::{block_on, client_runtime, init_asyncio_runtime};

/// What a member handle shares with its `Events` iterators.
#[derive(Debug)]
struct Inner {
    member: Arc<rollcall_client::Member>,
    /// The membership is over and every event was taken.
    finished: AtomicBool,
}

impl Inner {
    async fn next(&self) -> Option<Event> {
        let event = self.member.next_event().await;
        if event.is_none() {
            self.finished.store(true, Ordering::Release);
        }
        event
    }
}

/// One membership in one group. Heartbeats run on the package's own thread: a
/// computation holding the GIL does not stop them (the progress timeout still bounds
/// how long the application may go without asking for an event or `mark_progress`).
///
/// Dropping the last reference without `leave` is an abrupt exit: the partitions move
/// once the member's lease has run out.
#[pyclass(module = "rollcall", frozen)]
#[derive(Debug)]
pub(crate) struct Member {
    inner: Arc<Inner>,
    // Keeps the connection task going for as long as the member lives.
    _client: rollcall_client::Client,
}

impl Member {
    pub(crate) fn new(
        client: rollcall_client::Client,
        member: Arc<rollcall_client::Member>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                member,
                finished: AtomicBool::new(false),
            }),
            _client: client,
        }
    }
}

/// What a blocking leave waits for next.
enum LeaveStep {
    Done(Result<(), rollcall_client::LeaveError>),
    Event(Option<Event>),
}

impl Member {
    fn drain_blocking(&self, py: Python<'_>, drained: bool, timeout: Option<f64>) -> PyResult<()> {
        let timeout = optional_timeout(py, timeout)?;
        let member = self.inner.member.clone();
        block_on(
            py,
            async move {
                if drained {
                    member.drain_self().await
                } else {
                    member.undrain_self().await
                }
            },
            timeout,
        )
        .map_err(|e| e.into_py(py))?
        .map_err(|e| Failure::from(e).into_py(py))
    }

    fn drain_awaitable<'py>(&self, py: Python<'py>, drained: bool) -> PyResult<Bound<'py, PyAny>> {
        init_asyncio_runtime();
        let member = self.inner.member.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            if drained {
                member.drain_self().await
            } else {
                member.undrain_self().await
            }
            .map_err(to_py)
        })
    }
}

fn optional_timeout(py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Duration>> {
    timeout
        .map(|t| seconds("timeout", t))
        .transpose()
        .map_err(|e| e.into_py(py))
}

#[pymethods]
impl Member {
    /// The member's events: iterate it (`for event in member.events()`, blocking, the
    /// GIL released while waiting) or asynchronously (`async for`). It ends when the
    /// membership does (left, or a `Fatal` event).
    fn events(&self) -> Events {
        Events {
            inner: self.inner.clone(),
        }
    }

    /// The next event, waiting at most `timeout` seconds (forever if `None`) with the GIL
    /// released; `None` if none came in time, or once the membership is over
    /// (`finished` then says so). Asking counts as progress.
    #[pyo3(signature = (timeout = None))]
    fn next_event(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyAny>>> {
        let timeout = optional_timeout(py, timeout)?;
        let inner = self.inner.clone();
        match block_on(py, async move { inner.next().await }, timeout) {
            Ok(Some(ev)) => Ok(Some(event(py, ev)?)),
            Ok(None) | Err(crate::runtime::BlockError::Failure(Failure::Timeout)) => Ok(None),
            Err(e) => Err(e.into_py(py)),
        }
    }

    /// The next event; an awaitable of it, or of `None` once the membership is over.
    fn next_event_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        init_asyncio_runtime();
        let inner = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            Ok(inner.next().await.map(EventOut))
        })
    }

    /// Whether the membership is over and every event was taken.
    #[getter]
    fn finished(&self) -> bool {
        self.inner.finished.load(Ordering::Acquire)
    }

    /// Records progress without asking for an event, for long stretches of work.
    fn mark_progress(&self) {
        self.inner.member.mark_progress();
    }

    /// Releases partitions a `RevokeRequested` asked back (commit them first). Takes
    /// `TopicPartition`s or `(topic, partition)` tuples.
    fn ack_revocation(&self, py: Python<'_>, partitions: &Bound<'_, PyAny>) -> PyResult<()> {
        let partitions = partitions
            .try_iter()?
            .map(|p| extract_partition(&p?))
            .collect::<PyResult<Vec<_>>>()?;
        self.inner
            .member
            .ack_revocation(partitions)
            .map_err(|e| Failure::from(e).into_py(py))
    }

    /// Reports the load of a partition the member owns (`TopicPartition` or `(topic,
    /// partition)`; an opaque number such as messages a second): sent with the next
    /// heartbeat, once. A negative or non-finite load is refused.
    fn report_load(&self, py: Python<'_>, partition: &Bound<'_, PyAny>, load: f64) -> PyResult<()> {
        let partition = extract_partition(partition)?;
        self.inner
            .member
            .report_load(partition, load)
            .map_err(|e| Failure::from(e).into_py(py))
    }

    /// Reports several loads at once: a mapping of partitions to loads.
    fn report_loads(&self, py: Python<'_>, loads: &Bound<'_, PyAny>) -> PyResult<()> {
        let mapping = loads.cast::<pyo3::types::PyMapping>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(
                "report_loads: expected a mapping of partitions to loads",
            )
        })?;
        let loads = mapping
            .items()?
            .iter()
            .map(|item| {
                let (p, load): (Bound<'_, PyAny>, f64) = item.extract()?;
                Ok((extract_partition(&p)?, load))
            })
            .collect::<PyResult<Vec<_>>>()?;
        self.inner
            .member
            .report_loads(loads)
            .map_err(|e| Failure::from(e).into_py(py))
    }

    /// Drains this member (a graceful scale-in), blocking until the coordinator has
    /// recorded it: the member stays in the group and keeps heartbeating, is given
    /// nothing new, and its partitions are revoked (`RevokeRequested`) and move to the
    /// others as they are acknowledged.
    #[pyo3(signature = (*, timeout = None))]
    fn drain(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        self.drain_blocking(py, true, timeout)
    }

    /// Undoes `drain`: the member may be given partitions again.
    #[pyo3(signature = (*, timeout = None))]
    fn undrain(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        self.drain_blocking(py, false, timeout)
    }

    /// Drains this member; an awaitable.
    fn drain_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.drain_awaitable(py, true)
    }

    /// Undrains this member; an awaitable.
    fn undrain_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.drain_awaitable(py, false)
    }

    /// Commits offsets (a mapping of partitions to offsets, or `Offset`s), blocking until
    /// the coordinator made them durable.
    #[pyo3(signature = (offsets, *, timeout = None))]
    fn commit(
        &self,
        py: Python<'_>,
        offsets: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        let offsets = extract_offsets(offsets)?;
        let timeout = optional_timeout(py, timeout)?;
        let member = self.inner.member.clone();
        block_on(py, async move { member.commit(offsets).await }, timeout)
            .map_err(|e| e.into_py(py))?
            .map_err(|e| Failure::from(e).into_py(py))
    }

    /// Commits offsets; an awaitable.
    fn commit_async<'py>(
        &self,
        py: Python<'py>,
        offsets: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let offsets = extract_offsets(offsets)?;
        init_asyncio_runtime();
        let member = self.inner.member.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            member.commit(offsets).await.map_err(to_py)
        })
    }

    /// The offsets committed in the member's group for `topics` (every topic if none):
    /// a dict of `TopicPartition` to `Committed`.
    #[pyo3(signature = (topics = None, *, timeout = None))]
    fn committed(
        &self,
        py: Python<'_>,
        topics: Option<&Bound<'_, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<Py<PyDict>> {
        let topics = topics_arg(topics)?;
        let timeout = optional_timeout(py, timeout)?;
        let member = self.inner.member.clone();
        let offsets = block_on(py, async move { member.committed(topics).await }, timeout)
            .map_err(|e| e.into_py(py))?
            .map_err(|e| Failure::from(e).into_py(py))?;
        CommittedOut(offsets).into_pyobject(py).map(Bound::unbind)
    }

    /// The committed offsets; an awaitable of the dict.
    #[pyo3(signature = (topics = None))]
    fn committed_async<'py>(
        &self,
        py: Python<'py>,
        topics: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let topics = topics_arg(topics)?;
        init_asyncio_runtime();
        let member = self.inner.member.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            Ok(CommittedOut(member.committed(topics).await.map_err(to_py)?))
        })
    }

    /// Until when no other member can own this member's partitions, on the
    /// `time.monotonic()` clock; `None` while not a member. Bound external writes by it.
    fn lease_deadline(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        let Some(deadline) = self.inner.member.lease_deadline() else {
            return Ok(None);
        };
        let monotonic: f64 = py
            .import("time")?
            .getattr("monotonic")?
            .call0()?
            .extract()?;
        let now = Instant::now();
        let offset = if deadline >= now {
            (deadline - now).as_secs_f64()
        } else {
            -(now - deadline).as_secs_f64()
        };
        Ok(Some(monotonic + offset))
    }

    /// Whether the member is suspended (stop acting on its partitions).
    #[getter]
    fn is_suspended(&self) -> bool {
        self.inner.member.is_suspended()
    }

    /// The member id the coordinator gave, while a member.
    #[getter]
    fn member_id(&self) -> Option<String> {
        self.inner.member.member_id()
    }

    /// The group.
    #[getter]
    fn group(&self) -> String {
        self.inner.member.group().to_owned()
    }

    /// The partitions held and the generation, as the connection task knows them.
    fn assignment(&self, py: Python<'_>) -> PyResult<Py<Assignment>> {
        assignment(py, &self.inner.member.assignment())
    }

    /// Leaves gracefully, blocking. Every partition still held is revoked: the events
    /// meanwhile go to `on_event` (called on this thread; it should commit, then
    /// `ack_revocation`), or without one the revocations are acknowledged at once.
    /// Partitions not released within `timeout` seconds are reported lost. A static
    /// member stands down instead.
    #[pyo3(signature = (timeout = 5.0, *, on_event = None))]
    fn leave(
        &self,
        py: Python<'_>,
        timeout: f64,
        on_event: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let timeout = seconds("timeout", timeout).map_err(|e| e.into_py(py))?;
        let member = self.inner.member.clone();
        let mut leave = client_runtime().spawn(async move { member.leave(timeout).await });
        loop {
            let inner = self.inner.clone();
            let pending = &mut leave;
            let step = block_on(
                py,
                async move {
                    tokio::select! {
                        result = pending => LeaveStep::Done(
                            result.unwrap_or(Err(rollcall_client::LeaveError::Closed)),
                        ),
                        next = inner.next() => LeaveStep::Event(next),
                    }
                },
                None,
            )
            .map_err(|e| e.into_py(py))?;
            match step {
                LeaveStep::Done(result) => {
                    return result.map_err(|e| Failure::from(e).into_py(py));
                }
                LeaveStep::Event(Some(ev)) => match &on_event {
                    Some(callback) => {
                        callback.call1((event(py, ev)?,))?;
                    }
                    None => {
                        if let Event::RevokeRequested { partitions, .. } = ev {
                            self.inner
                                .member
                                .ack_revocation(partitions)
                                .map_err(|e| Failure::from(e).into_py(py))?;
                        }
                    }
                },
                LeaveStep::Event(None) => {
                    let result = block_on(py, &mut leave, None).map_err(|e| e.into_py(py))?;
                    return result
                        .unwrap_or(Err(rollcall_client::LeaveError::Closed))
                        .map_err(|e| Failure::from(e).into_py(py));
                }
            }
        }
    }

    /// Leaves gracefully; an awaitable. Keep iterating the events meanwhile (another
    /// task's `async for`): every partition still held is revoked through them, to be
    /// committed and acknowledged; those not released within `timeout` seconds are
    /// reported lost. A static member stands down instead.
    #[pyo3(signature = (timeout = 5.0))]
    fn leave_async<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyAny>> {
        let timeout = seconds("timeout", timeout).map_err(|e| e.into_py(py))?;
        init_asyncio_runtime();
        let member = self.inner.member.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            member.leave(timeout).await.map_err(to_py)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Member(group={:?}, member_id={:?})",
            self.inner.member.group(),
            self.inner.member.member_id()
        )
    }
}

/// A member's events, as a blocking iterator and as an asynchronous one.
#[pyclass(module = "rollcall", frozen)]
#[derive(Debug)]
pub(crate) struct Events {
    inner: Arc<Inner>,
}

#[pymethods]
impl Events {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let inner = self.inner.clone();
        match block_on(py, async move { inner.next().await }, None).map_err(|e| e.into_py(py))? {
            Some(ev) => Ok(Some(event(py, ev)?)),
            None => Ok(None),
        }
    }

    fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        init_asyncio_runtime();
        let inner = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            match inner.next().await {
                Some(ev) => Ok(EventOut(ev)),
                None => Err(PyStopAsyncIteration::new_err(())),
            }
        })
    }
}
