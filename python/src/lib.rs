//! The `rollcall` Python package's native module, `rollcall._rollcall`: the client crate
//! behind Python classes.
//!
//! Two tokio runtimes serve it. The *client runtime* runs every connection task: the
//! heartbeats, reconnections and pushes of every member, which never touch Python, so
//! they keep running while Python code holds the GIL (a computation that does not yield,
//! say). The blocking API drives its futures from the calling thread with the GIL
//! released. The *asyncio runtime* (pyo3-async-runtimes') runs the futures behind the
//! awaitables of the asyncio API; its threads take the GIL to hand results to the event
//! loop, and may wait for it, which is why the connection tasks live elsewhere.

mod client;
mod convert;
mod errors;
mod member;
mod runtime;

use pyo3::prelude::*;

/// The native module. `rollcall/__init__.py` re-exports it with the exceptions, which are
/// Python classes (`rollcall/_errors.py`) so that they can also derive from the builtin
/// exception each one is a case of (`ValueError`, `TimeoutError`, ...).
#[pymodule]
fn _rollcall(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<client::Client>()?;
    m.add_class::<client::TlsConfig>()?;
    m.add_class::<member::Member>()?;
    m.add_class::<member::Events>()?;
    convert::register(m)?;
    Ok(())
}
