//! `Client` (one connection, shared by its members) and `TlsConfig`.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyString};
use rollcall_client::{ClientConfig, MemberConfig};

use crate::convert::{seconds, Committed, TopicPartition};
use crate::errors::{to_py, Failure};
use crate::member::Member;
use crate::runtime::{block_on, client_runtime, init_asyncio_runtime};

/// TLS to the coordinator: the CA certificates (PEM file) that signed its certificate,
/// and the client's certificate chain and key (PEM files) if it asks for one.
#[pyclass(module = "rollcall", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct TlsConfig {
    inner: rollcall_client::TlsConfig,
}

#[pymethods]
impl TlsConfig {
    #[new]
    #[pyo3(signature = (ca, *, cert = None, key = None, server_name = None))]
    fn new(
        ca: PathBuf,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        server_name: Option<String>,
        py: Python<'_>,
    ) -> PyResult<Self> {
        let client = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(
                    Failure::config("TlsConfig: give both cert and key, or neither").into_py(py),
                )
            }
        };
        let mut inner = rollcall_client::TlsConfig::from_files(ca, client);
        if let Some(name) = server_name {
            inner = inner.with_server_name(name);
        }
        Ok(Self { inner })
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}

/// The coordinator's addresses: one `host:port` string, or several (a sequence).
fn addresses(value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let list: Vec<String> = if let Ok(s) = value.cast::<PyString>() {
        s.extract::<String>()?
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect()
    } else {
        value
            .try_iter()
            .map_err(|_| {
                PyTypeError::new_err("addresses: expected a string or a sequence of strings")
            })?
            .map(|a| a.and_then(|a| a.extract::<String>()))
            .collect::<PyResult<_>>()?
    };
    if list.is_empty() {
        return Err(Failure::config("no coordinator address given").into_py(value.py()));
    }
    Ok(list)
}

struct ConnectArgs {
    first: String,
    config: ClientConfig,
}

#[allow(clippy::too_many_arguments)]
fn connect_args(
    py: Python<'_>,
    addresses_: &Bound<'_, PyAny>,
    tls: Option<&TlsConfig>,
    username: Option<String>,
    password: Option<String>,
    connect_timeout: f64,
    client_software: Option<String>,
) -> PyResult<ConnectArgs> {
    let mut addrs = addresses(addresses_)?;
    let first = addrs.remove(0);
    let mut config = ClientConfig::default().with_bootstrap(addrs);
    config.connect_timeout =
        seconds("connect_timeout", connect_timeout).map_err(|f| f.into_py(py))?;
    if config.connect_timeout.is_zero() {
        return Err(Failure::config("connect_timeout must be positive").into_py(py));
    }
    if let Some(tls) = tls {
        config = config.with_tls(tls.inner.clone());
    }
    match (username, password) {
        (Some(u), Some(p)) => config = config.with_credentials(u, p),
        (None, None) => {}
        _ => {
            return Err(Failure::config("give both username and password, or neither").into_py(py))
        }
    }
    config.client_software = client_software
        .unwrap_or_else(|| concat!("rollcall-python/", env!("CARGO_PKG_VERSION")).to_owned());
    Ok(ConnectArgs { first, config })
}

async fn connect(args: ConnectArgs) -> Result<rollcall_client::Client, Failure> {
    // The connection task is spawned by `connect` onto the runtime it runs on: the
    // client runtime, whatever runtime awaits this.
    client_runtime()
        .spawn(rollcall_client::Client::connect(args.first, args.config))
        .await
        .map_err(|e| Failure::named("ClosedError", format!("the connection attempt failed: {e}")))?
        .map_err(Failure::from)
}

/// A connection to the coordinator, shared by any number of members. Its connection
/// task (heartbeats, reconnections) runs on the package's own thread, never waiting for
/// Python.
#[pyclass(module = "rollcall", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct Client {
    inner: rollcall_client::Client,
}

/// What `join` takes, checked before anything is sent.
#[allow(clippy::too_many_arguments)]
fn member_config(
    py: Python<'_>,
    group: String,
    topics: &Bound<'_, PyAny>,
    instance_id: Option<String>,
    client_id: Option<String>,
    session_timeout: Option<f64>,
    heartbeat_interval: Option<f64>,
    progress_timeout: Option<f64>,
    rebalance_timeout: Option<f64>,
    lease_timeout: Option<f64>,
    lease_margin: Option<f64>,
    detector: Option<String>,
) -> PyResult<MemberConfig> {
    let topics: Vec<(String, u32)> = if let Ok(mapping) = topics.cast::<PyMapping>() {
        mapping
            .items()?
            .iter()
            .map(|item| item.extract::<(String, u32)>())
            .collect::<PyResult<_>>()
    } else {
        topics
            .try_iter()
            .and_then(|items| items.map(|i| i?.extract::<(String, u32)>()).collect())
    }
    .map_err(|_| {
        Failure::config(
            "topics: expected a mapping of topic names to partition counts, \
             or (topic, partitions) pairs",
        )
        .into_py(py)
    })?;
    let mut config = MemberConfig::new(group, topics).with_client_id("rollcall-python");
    type Setter = fn(MemberConfig, std::time::Duration) -> MemberConfig;
    let durations: [(&str, Option<f64>, Setter); 6] = [
        (
            "session_timeout",
            session_timeout,
            MemberConfig::with_session_timeout,
        ),
        (
            "heartbeat_interval",
            heartbeat_interval,
            MemberConfig::with_heartbeat_interval,
        ),
        (
            "progress_timeout",
            progress_timeout,
            MemberConfig::with_progress_timeout,
        ),
        (
            "rebalance_timeout",
            rebalance_timeout,
            MemberConfig::with_rebalance_timeout,
        ),
        (
            "lease_timeout",
            lease_timeout,
            MemberConfig::with_lease_timeout,
        ),
        (
            "lease_margin",
            lease_margin,
            MemberConfig::with_lease_margin,
        ),
    ];
    for (what, value, set) in durations {
        if let Some(value) = value {
            config = set(config, seconds(what, value).map_err(|e| e.into_py(py))?);
        }
    }
    if let Some(id) = instance_id {
        config = config.with_instance_id(id);
    }
    if let Some(id) = client_id {
        config = config.with_client_id(id);
    }
    if let Some(d) = detector {
        config = config.with_detector(d);
    }
    config
        .validate()
        .map_err(|e| Failure::from(e).into_py(py))?;
    Ok(config)
}

fn committed_dict(py: Python<'_>, offsets: &CommittedMap) -> PyResult<Py<PyDict>> {
    let dict = PyDict::new(py);
    for (tp, c) in offsets {
        dict.set_item(TopicPartition::from(tp), Committed::from(c))?;
    }
    Ok(dict.unbind())
}

/// Committed offsets handed from a runtime thread to Python.
pub(crate) struct CommittedOut(pub(crate) CommittedMap);

/// Committed offsets as the client crate gives them.
type CommittedMap =
    std::collections::BTreeMap<rollcall_client::TopicPartition, rollcall_client::Committed>;

impl<'py> IntoPyObject<'py> for CommittedOut {
    type Target = PyDict;
    type Output = Bound<'py, PyDict>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        Ok(committed_dict(py, &self.0)?.into_bound(py))
    }
}

pub(crate) fn topics_arg(topics: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    match topics {
        None => Ok(Vec::new()),
        Some(t) if t.is_instance_of::<PyString>() => Ok(vec![t.extract()?]),
        Some(t) => t.try_iter()?.map(|i| i?.extract::<String>()).collect(),
    }
}

#[pymethods]
impl Client {
    /// Connects (blocking) to the first coordinator address that answers.
    #[staticmethod]
    #[pyo3(signature = (addresses, *, tls = None, username = None, password = None, connect_timeout = 5.0, client_software = None))]
    #[allow(clippy::too_many_arguments)]
    fn connect(
        py: Python<'_>,
        addresses: &Bound<'_, PyAny>,
        tls: Option<PyRef<'_, TlsConfig>>,
        username: Option<String>,
        password: Option<String>,
        connect_timeout: f64,
        client_software: Option<String>,
    ) -> PyResult<Self> {
        let args = connect_args(
            py,
            addresses,
            tls.as_deref(),
            username,
            password,
            connect_timeout,
            client_software,
        )?;
        let inner = block_on(py, connect(args), None)
            .map_err(|e| e.into_py(py))?
            .map_err(|e| e.into_py(py))?;
        Ok(Self { inner })
    }

    /// Connects; an awaitable of the `Client`.
    #[staticmethod]
    #[pyo3(signature = (addresses, *, tls = None, username = None, password = None, connect_timeout = 5.0, client_software = None))]
    #[allow(clippy::too_many_arguments)]
    fn connect_async<'py>(
        py: Python<'py>,
        addresses: &Bound<'py, PyAny>,
        tls: Option<PyRef<'py, TlsConfig>>,
        username: Option<String>,
        password: Option<String>,
        connect_timeout: f64,
        client_software: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = connect_args(
            py,
            addresses,
            tls.as_deref(),
            username,
            password,
            connect_timeout,
            client_software,
        )?;
        init_asyncio_runtime();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let inner = connect(args).await.map_err(to_py)?;
            Ok(Self { inner })
        })
    }

    /// Joins a group (blocking until the coordinator accepts the member, or `timeout`
    /// seconds).
    #[pyo3(signature = (group, topics, *, instance_id = None, client_id = None, session_timeout = None, heartbeat_interval = None, progress_timeout = None, rebalance_timeout = None, lease_timeout = None, lease_margin = None, detector = None, timeout = None))]
    #[allow(clippy::too_many_arguments)]
    fn join(
        &self,
        py: Python<'_>,
        group: String,
        topics: &Bound<'_, PyAny>,
        instance_id: Option<String>,
        client_id: Option<String>,
        session_timeout: Option<f64>,
        heartbeat_interval: Option<f64>,
        progress_timeout: Option<f64>,
        rebalance_timeout: Option<f64>,
        lease_timeout: Option<f64>,
        lease_margin: Option<f64>,
        detector: Option<String>,
        timeout: Option<f64>,
    ) -> PyResult<Member> {
        let config = member_config(
            py,
            group,
            topics,
            instance_id,
            client_id,
            session_timeout,
            heartbeat_interval,
            progress_timeout,
            rebalance_timeout,
            lease_timeout,
            lease_margin,
            detector,
        )?;
        let timeout = timeout
            .map(|t| seconds("timeout", t))
            .transpose()
            .map_err(|e| e.into_py(py))?;
        let client = self.inner.clone();
        let member = block_on(py, async move { client.join(config).await }, timeout)
            .map_err(|e| e.into_py(py))?
            .map_err(|e| Failure::from(e).into_py(py))?;
        Ok(Member::new(self.inner.clone(), Arc::new(member)))
    }

    /// Joins a group; an awaitable of the `Member`.
    #[pyo3(signature = (group, topics, *, instance_id = None, client_id = None, session_timeout = None, heartbeat_interval = None, progress_timeout = None, rebalance_timeout = None, lease_timeout = None, lease_margin = None, detector = None))]
    #[allow(clippy::too_many_arguments)]
    fn join_async<'py>(
        &self,
        py: Python<'py>,
        group: String,
        topics: &Bound<'py, PyAny>,
        instance_id: Option<String>,
        client_id: Option<String>,
        session_timeout: Option<f64>,
        heartbeat_interval: Option<f64>,
        progress_timeout: Option<f64>,
        rebalance_timeout: Option<f64>,
        lease_timeout: Option<f64>,
        lease_margin: Option<f64>,
        detector: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let config = member_config(
            py,
            group,
            topics,
            instance_id,
            client_id,
            session_timeout,
            heartbeat_interval,
            progress_timeout,
            rebalance_timeout,
            lease_timeout,
            lease_margin,
            detector,
        )?;
        init_asyncio_runtime();
        let client = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let member = client.join(config).await.map_err(to_py)?;
            Ok(Member::new(client, Arc::new(member)))
        })
    }

    /// The offsets committed in `group` for `topics` (every topic if none), blocking.
    #[pyo3(signature = (group, topics = None))]
    fn fetch_offsets(
        &self,
        py: Python<'_>,
        group: String,
        topics: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDict>> {
        let topics = topics_arg(topics)?;
        let client = self.inner.clone();
        let offsets = block_on(
            py,
            async move { client.fetch_offsets(group, topics).await },
            None,
        )
        .map_err(|e| e.into_py(py))?
        .map_err(|e| Failure::from(e).into_py(py))?;
        committed_dict(py, &offsets)
    }

    /// The offsets committed in `group`; an awaitable of the dict.
    #[pyo3(signature = (group, topics = None))]
    fn fetch_offsets_async<'py>(
        &self,
        py: Python<'py>,
        group: String,
        topics: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let topics = topics_arg(topics)?;
        init_asyncio_runtime();
        let client = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let offsets = client.fetch_offsets(group, topics).await.map_err(to_py)?;
            Ok(CommittedOut(offsets))
        })
    }

    fn __repr__(&self) -> &'static str {
        "Client(...)"
    }
}
