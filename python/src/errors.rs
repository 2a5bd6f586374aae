//! The client's errors as Python exceptions.
//!
//! The exception classes are Python's (`rollcall/_errors.py`): a base `RollcallError`,
//! one class per protocol error code named after it (`not_owner` is `NotOwnerError`),
//! and a few for what happens before or beside the protocol (`ConfigError`,
//! `ConnectError`, `ClosedError`, ...). A [`Failure`] is built without the GIL (on a
//! runtime thread) and becomes the exception when it reaches Python.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple};
use rollcall_client::{
    CommitError, ConfigError, ConnectError, ErrorCode, FatalError, JoinError, LeaveError,
    RequestError, TopicPartition,
};

use crate::convert::topic_partition;

/// An error on its way to Python: the exception class's name, its message, and what it
/// carries besides.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A class of `rollcall._errors` by name.
    Named {
        class: &'static str,
        message: String,
    },
    /// The class of a protocol error code.
    Code { code: ErrorCode, message: String },
    /// A code's class, with the partitions concerned.
    Partitions {
        code: ErrorCode,
        message: String,
        partitions: Vec<TopicPartition>,
    },
    /// Some partitions of a commit refused, each for its own reason.
    CommitRefused {
        message: String,
        refused: Vec<(TopicPartition, ErrorCode)>,
    },
    /// A blocking call's timeout passed.
    Timeout,
}

impl Failure {
    pub(crate) fn named(class: &'static str, message: impl Into<String>) -> Self {
        Self::Named {
            class,
            message: message.into(),
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Self::named("ConfigError", message)
    }

    /// The exception.
    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        match self.build(py) {
            Ok(e) => e,
            Err(e) => e,
        }
    }

    fn build(self, py: Python<'_>) -> PyResult<PyErr> {
        let errors = errors_module(py)?;
        let (class, message, attrs) = match self {
            Self::Named { class, message } => (errors.getattr(class)?, message, None),
            Self::Code { code, message } => (class_of(py, code)?, message, None),
            Self::Partitions {
                code,
                message,
                partitions,
            } => {
                let list = PyList::empty(py);
                for tp in &partitions {
                    list.append(topic_partition(py, tp)?)?;
                }
                let attrs = PyDict::new(py);
                attrs.set_item("partitions", list)?;
                (class_of(py, code)?, message, Some(attrs))
            }
            Self::CommitRefused { message, refused } => {
                let list = PyList::empty(py);
                for (tp, code) in &refused {
                    let item = PyTuple::new(
                        py,
                        [
                            topic_partition(py, tp)?.into_any(),
                            code.as_str().into_pyobject(py)?.into_any(),
                        ],
                    )?;
                    list.append(item)?;
                }
                let attrs = PyDict::new(py);
                attrs.set_item("refused", list)?;
                (errors.getattr("CommitRefusedError")?, message, Some(attrs))
            }
            Self::Timeout => (
                errors.getattr("OperationTimeoutError")?,
                "the operation did not complete within its timeout".to_owned(),
                None,
            ),
        };
        let exception = class.call1((message,))?;
        if let Some(attrs) = attrs {
            for (k, v) in attrs.iter() {
                exception.setattr(k.cast_into::<pyo3::types::PyString>()?, v)?;
            }
        }
        Ok(PyErr::from_value(exception))
    }
}

/// `rollcall._errors`, imported once.
fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || Ok(py.import("rollcall._errors")?.unbind()))
        .map(|m| m.bind(py))
}

/// The exception class of a protocol error code (`RollcallError` for a code it does not
/// know, from a newer coordinator).
fn class_of(py: Python<'_>, code: ErrorCode) -> PyResult<Bound<'_, PyAny>> {
    errors_module(py)?
        .getattr("class_of_code")?
        .call1((code.as_str(),))
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Self {
        Self::config(e.to_string())
    }
}

impl From<ConnectError> for Failure {
    fn from(e: ConnectError) -> Self {
        let message = e.to_string();
        match e {
            ConnectError::Timeout => Self::named("ConnectTimeoutError", message),
            ConnectError::Refused { code, .. } => Self::Code { code, message },
            ConnectError::Authentication(_) => Self::Code {
                code: ErrorCode::AuthenticationFailed,
                message,
            },
            ConnectError::Tls(_) => Self::named("TlsError", message),
            _ => Self::named("ConnectError", message),
        }
    }
}

impl From<FatalError> for Failure {
    fn from(e: FatalError) -> Self {
        let message = e.to_string();
        match e {
            FatalError::Fenced { .. } => Self::Code {
                code: ErrorCode::FencedInstance,
                message,
            },
            FatalError::Refused { code, .. } => Self::Code { code, message },
            _ => Self::named("RollcallError", message),
        }
    }
}

impl From<JoinError> for Failure {
    fn from(e: JoinError) -> Self {
        match e {
            JoinError::Config(e) => e.into(),
            JoinError::Fatal(e) => e.into(),
            other => Self::named("ClosedError", other.to_string()),
        }
    }
}

impl From<CommitError> for Failure {
    fn from(e: CommitError) -> Self {
        let message = e.to_string();
        let code = |code| Self::Code {
            code,
            message: message.clone(),
        };
        match e {
            CommitError::NotOwner { partitions } => Self::Partitions {
                code: ErrorCode::NotOwner,
                message,
                partitions,
            },
            CommitError::PartitionRevoked { partitions } => Self::Partitions {
                code: ErrorCode::PartitionRevoked,
                message,
                partitions,
            },
            CommitError::MetadataTooLarge { partitions } => Self::Partitions {
                code: ErrorCode::MetadataTooLarge,
                message,
                partitions,
            },
            CommitError::Refused { refused } => Self::CommitRefused { message, refused },
            CommitError::Fenced => code(ErrorCode::FencedInstance),
            CommitError::Expelled => code(ErrorCode::MemberExpelled),
            CommitError::UnknownMember => code(ErrorCode::UnknownMember),
            CommitError::UnknownGroup => code(ErrorCode::UnknownGroup),
            CommitError::Rejected { code: c, .. } => code(c),
            CommitError::LeaseExpired => Self::named("LeaseExpiredError", message),
            CommitError::NotMember => Self::named("NotMemberError", message),
            CommitError::Unavailable { .. } => Self::named("UnavailableError", message),
            _ => Self::named("ClosedError", message),
        }
    }
}

impl From<RequestError> for Failure {
    fn from(e: RequestError) -> Self {
        let message = e.to_string();
        match e {
            RequestError::Unavailable { .. } => Self::named("UnavailableError", message),
            RequestError::Refused { code, .. } => Self::Code { code, message },
            _ => Self::named("ClosedError", message),
        }
    }
}

impl From<LeaveError> for Failure {
    fn from(e: LeaveError) -> Self {
        let message = e.to_string();
        match e {
            LeaveError::Unconfirmed => Self::named("LeaveUnconfirmedError", message),
            _ => Self::named("ClosedError", message),
        }
    }
}

/// Converts a failure for a future's result, taking the GIL for it: on the asyncio
/// runtime's threads, which may wait for it.
pub(crate) fn to_py(failure: impl Into<Failure>) -> PyErr {
    let failure = failure.into();
    Python::attach(|py| failure.into_py(py))
}
