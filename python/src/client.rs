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

/// The keyword arguments `join` and `join_async` share (all but `join`'s `timeout`):
/// declared once, parsed once, turned into a `MemberConfig` once.
#[derive(Debug, Default)]
struct MemberOptions {
    instance_id: Option<String>,
    client_id: Option<String>,
    session_timeout: Option<f64>,
    heartbeat_interval: Option<f64>,
    progress_timeout: Option<f64>,
    rebalance_timeout: Option<f64>,
    lease_timeout: Option<f64>,
    lease_margin: Option<f64>,
    detector: Option<String>,
    label: Option<String>,
    rack: Option<String>,
    capacity: Option<u32>,
    topic_racks: Vec<(String, Vec<String>)>,
}

impl MemberOptions {
    /// Every keyword argument, in the order the stubs list them.
    const NAMES: [&'static str; 13] = [
        "instance_id",
        "client_id",
        "session_timeout",
        "heartbeat_interval",
        "progress_timeout",
        "rebalance_timeout",
        "lease_timeout",
        "lease_margin",
        "detector",
        "label",
        "rack",
        "capacity",
        "topic_racks",
    ];

    /// The options among `kwargs` of `method`; an unknown keyword is a `TypeError`, as
    /// Python's own would be. `None` values are left at their defaults.
    fn parse(method: &str, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut o = Self::default();
        let Some(kwargs) = kwargs else {
            return Ok(o);
        };
        for (key, value) in kwargs.iter() {
            let key: String = key.extract()?;
            if value.is_none() {
                if !Self::NAMES.contains(&key.as_str()) {
                    return Err(unexpected(method, &key));
                }
                continue;
            }
            let typed = |expected: &str| {
                PyTypeError::new_err(format!("{method}(): {key}: expected {expected}"))
            };
            let string = || value.extract::<String>().map_err(|_| typed("a string"));
            let number = || {
                value
                    .extract::<f64>()
                    .map_err(|_| typed("a number of seconds"))
            };
            match key.as_str() {
                "instance_id" => o.instance_id = Some(string()?),
                "client_id" => o.client_id = Some(string()?),
                "session_timeout" => o.session_timeout = Some(number()?),
                "heartbeat_interval" => o.heartbeat_interval = Some(number()?),
                "progress_timeout" => o.progress_timeout = Some(number()?),
                "rebalance_timeout" => o.rebalance_timeout = Some(number()?),
                "lease_timeout" => o.lease_timeout = Some(number()?),
                "lease_margin" => o.lease_margin = Some(number()?),
                "detector" => o.detector = Some(string()?),
                "label" => o.label = Some(string()?),
                "rack" => o.rack = Some(string()?),
                "capacity" => {
                    o.capacity = Some(
                        value
                            .extract::<u32>()
                            .map_err(|_| typed("a whole number from 1 to 4294967295"))?,
                    );
                }
                "topic_racks" => o.topic_racks = topic_racks(&value).map_err(|_| {
                    typed("a mapping of topic names to sequences of racks (str, or None for none)")
                })?,
                _ => return Err(unexpected(method, &key)),
            }
        }
        Ok(o)
    }

    /// The member configuration for `group` and `topics`, checked before anything is
    /// sent.
    fn config(
        self,
        py: Python<'_>,
        group: String,
        topics: &Bound<'_, PyAny>,
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
                self.session_timeout,
                MemberConfig::with_session_timeout,
            ),
            (
                "heartbeat_interval",
                self.heartbeat_interval,
                MemberConfig::with_heartbeat_interval,
            ),
            (
                "progress_timeout",
                self.progress_timeout,
                MemberConfig::with_progress_timeout,
            ),
            (
                "rebalance_timeout",
                self.rebalance_timeout,
                MemberConfig::with_rebalance_timeout,
            ),
            (
                "lease_timeout",
                self.lease_timeout,
                MemberConfig::with_lease_timeout,
            ),
            (
                "lease_margin",
                self.lease_margin,
                MemberConfig::with_lease_margin,
            ),
        ];
        for (what, value, set) in durations {
            if let Some(value) = value {
                config = set(config, seconds(what, value).map_err(|e| e.into_py(py))?);
            }
        }
        if let Some(id) = self.instance_id {
            config = config.with_instance_id(id);
        }
        if let Some(id) = self.client_id {
            config = config.with_client_id(id);
        }
        if let Some(d) = self.detector {
            config = config.with_detector(d);
        }
        if let Some(label) = self.label {
            config = config.with_label(label);
        }
        if let Some(rack) = self.rack {
            config = config.with_rack(rack);
        }
        if let Some(capacity) = self.capacity {
            config = config.with_capacity(capacity);
        }
        config.topic_racks = self.topic_racks;
        config
            .validate()
            .map_err(|e| Failure::from(e).into_py(py))?;
        Ok(config)
    }
}

fn unexpected(method: &str, key: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "{method}() got an unexpected keyword argument '{key}'"
    ))
}

/// `{topic: [rack of partition 0, ...]}` (a rack may be None or "" for none).
fn topic_racks(value: &Bound<'_, PyAny>) -> PyResult<Vec<(String, Vec<String>)>> {
    let mapping = value.cast::<PyMapping>()?;
    mapping
        .items()?
        .iter()
        .map(|item| {
            let (topic, racks): (String, Bound<'_, PyAny>) = item.extract()?;
            if racks.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err("a sequence of racks, not a string"));
            }
            let racks = racks
                .try_iter()?
                .map(|r| Ok(r?.extract::<Option<String>>()?.unwrap_or_default()))
                .collect::<PyResult<Vec<String>>>()?;
            Ok((topic, racks))
        })
        .collect()
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

impl Client {
    fn drain_request(
        &self,
        py: Python<'_>,
        group: String,
        member_id: Option<String>,
        label: Option<String>,
        drained: bool,
        timeout: Option<f64>,
    ) -> PyResult<Vec<String>> {
        let timeout = timeout
            .map(|t| seconds("timeout", t))
            .transpose()
            .map_err(|e| e.into_py(py))?;
        let client = self.inner.clone();
        let drain = async move {
            match (member_id, label) {
                (Some(m), None) if drained => client.drain(group, m).await,
                (Some(m), None) => client.undrain(group, m).await,
                (None, Some(l)) if drained => client.drain_label(group, l).await,
                (None, Some(l)) => client.undrain_label(group, l).await,
                _ => Err(rollcall_client::RequestError::Refused {
                    code: rollcall_client::ErrorCode::InvalidRequest,
                    message: "give either a member id or a label".to_owned(),
                }),
            }
        };
        block_on(py, drain, timeout)
            .map_err(|e| e.into_py(py))?
            .map_err(|e| Failure::from(e).into_py(py))
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
    /// seconds). The keyword arguments are `MemberOptions`' (see the stubs).
    #[pyo3(signature = (group, topics, *, timeout = None, **options))]
    fn join(
        &self,
        py: Python<'_>,
        group: String,
        topics: &Bound<'_, PyAny>,
        timeout: Option<f64>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Member> {
        let config = MemberOptions::parse("join", options)?.config(py, group, topics)?;
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

    /// Joins a group; an awaitable of the `Member`. The same keyword arguments as
    /// `join`, but `timeout`.
    #[pyo3(signature = (group, topics, **options))]
    fn join_async<'py>(
        &self,
        py: Python<'py>,
        group: String,
        topics: &Bound<'py, PyAny>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let config = MemberOptions::parse("join_async", options)?.config(py, group, topics)?;
        init_asyncio_runtime();
        let client = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let member = client.join(config).await.map_err(to_py)?;
            Ok(Member::new(client, Arc::new(member)))
        })
    }

    /// Drains a member of `group` (`member_id`), or every member with `label` now and
    /// later: they stay in the group, are given nothing new, and their partitions move
    /// to the others. Blocking; returns the member ids whose state changed.
    #[pyo3(signature = (group, member_id = None, *, label = None, timeout = None))]
    fn drain(
        &self,
        py: Python<'_>,
        group: String,
        member_id: Option<String>,
        label: Option<String>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<String>> {
        self.drain_request(py, group, member_id, label, true, timeout)
    }

    /// Undoes `drain` (the same arguments).
    #[pyo3(signature = (group, member_id = None, *, label = None, timeout = None))]
    fn undrain(
        &self,
        py: Python<'_>,
        group: String,
        member_id: Option<String>,
        label: Option<String>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<String>> {
        self.drain_request(py, group, member_id, label, false, timeout)
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
