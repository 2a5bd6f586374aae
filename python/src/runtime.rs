//! The two runtimes (see the crate documentation) and the blocking driver.

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors::Failure;

/// How often a blocking call wakes to let Python handle signals (Ctrl-C).
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// The runtime that runs every connection task. One worker thread serves any number of
/// members: a heartbeat is a few microseconds of work.
pub(crate) fn client_runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rollcall-client")
            .enable_all()
            .build()
            .expect("the client runtime starts")
    })
}

/// Sets up the asyncio bridge's runtime (once): one worker thread, named for the
/// process's thread listings.
pub(crate) fn init_asyncio_runtime() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder
            .worker_threads(1)
            .thread_name("rollcall-asyncio")
            .enable_all();
        pyo3_async_runtimes::tokio::init(builder);
    });
}

/// Runs `future` to completion on the client runtime from a Python thread, with the GIL
/// released while it waits. Wakes every [`SIGNAL_CHECK`] to run Python's signal
/// handlers, so Ctrl-C interrupts it (the future is then dropped). `timeout`, if given,
/// bounds the wait: [`Failure::Timeout`] when it passes.
pub(crate) fn block_on<F, T>(
    py: Python<'_>,
    future: F,
    timeout: Option<Duration>,
) -> Result<T, BlockError>
where
    F: Future<Output = T> + Send,
    T: Send,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(BlockError::Python(
            pyo3::exceptions::PyRuntimeError::new_err(
                "a blocking rollcall call cannot run on the package's runtime threads \
             (from a callback of an asyncio call): use the *_async variant",
            ),
        ));
    }
    let runtime = client_runtime();
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut future = std::pin::pin!(future);
    loop {
        let slice = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(BlockError::Failure(Failure::Timeout));
                }
                left.min(SIGNAL_CHECK)
            }
            None => SIGNAL_CHECK,
        };
        let polled = py.detach(|| {
            runtime.block_on(async { tokio::time::timeout(slice, future.as_mut()).await.ok() })
        });
        if let Some(value) = polled {
            return Ok(value);
        }
        py.check_signals().map_err(BlockError::Python)?;
    }
}

/// Why [`block_on`] returned without a value.
#[derive(Debug)]
pub(crate) enum BlockError {
    /// A signal handler raised (KeyboardInterrupt).
    Python(PyErr),
    /// The timeout passed.
    Failure(Failure),
}

impl BlockError {
    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Self::Python(e) => e,
            Self::Failure(f) => f.into_py(py),
        }
    }
}
