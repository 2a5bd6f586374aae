//! TLS to the coordinator: the CA certificates trusted to sign its certificate, the
//! client certificate to present if it asks for one, and the name its certificate must
//! carry.
//!
//! Files are read on every connection attempt, so that certificates renewed on disk
//! are used from the next (re)connection on, and a file that cannot be read is a
//! [`ConnectError::Tls`] of that attempt.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError, RootCertStore};

use crate::error::ConnectError;

/// PEM text, in a file or in memory.
#[derive(Clone)]
enum Pem {
    File(PathBuf),
    Bytes(Arc<[u8]>),
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
            // Never the bytes: they may hold a private key.
            Self::Bytes(bytes) => write!(f, "Bytes({} bytes)", bytes.len()),
        }
    }
}

impl Pem {
    /// What the error messages call it.
    fn describe(&self, what: &str) -> String {
        match self {
            Self::File(path) => format!("{what} file {}", path.display()),
            Self::Bytes(_) => format!("{what} PEM"),
        }
    }

    fn certs(&self, what: &str) -> Result<Vec<CertificateDer<'static>>, ConnectError> {
        let parsed: Result<Vec<_>, _> = match self {
            Self::File(path) => CertificateDer::pem_file_iter(path).and_then(Iterator::collect),
            Self::Bytes(bytes) => CertificateDer::pem_slice_iter(bytes).collect(),
        };
        let certs = parsed.map_err(|e| pem_error(&self.describe(what), &e))?;
        if certs.is_empty() {
            return Err(ConnectError::Tls(format!(
                "{} holds no certificate (expected PEM 'BEGIN CERTIFICATE' blocks)",
                self.describe(what)
            )));
        }
        Ok(certs)
    }

    fn key(&self, what: &str) -> Result<PrivateKeyDer<'static>, ConnectError> {
        let parsed = match self {
            Self::File(path) => PrivateKeyDer::from_pem_file(path),
            Self::Bytes(bytes) => PrivateKeyDer::from_pem_slice(bytes),
        };
        parsed.map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => ConnectError::Tls(format!(
                "{} holds no private key (expected a PEM 'BEGIN PRIVATE KEY' block)",
                self.describe(what)
            )),
            other => pem_error(&self.describe(what), &other),
        })
    }
}

fn pem_error(what: &str, e: &rustls::pki_types::pem::Error) -> ConnectError {
    match e {
        rustls::pki_types::pem::Error::Io(e) => {
            ConnectError::Tls(format!("cannot read {what}: {e}"))
        }
        other => ConnectError::Tls(format!("{what} is not valid PEM: {other}")),
    }
}

/// How to connect to the coordinator over TLS (1.2 or 1.3).
///
/// The coordinator's certificate must chain to one of the CA certificates given (the
/// system's trust store is not consulted) and carry the name connected to: the host of
/// the address (a DNS name or an IP address), or the one given by
/// [`TlsConfig::with_server_name`]. A client certificate is presented when the
/// coordinator asks for one; whether it must is the coordinator's choice
/// (`--tls-client-auth`).
///
/// ```no_run
/// use rollcall_client::{ClientConfig, TlsConfig};
///
/// let tls = TlsConfig::from_files("ca.pem", Some(("worker.pem".into(), "worker-key.pem".into())));
/// let config = ClientConfig::default().with_tls(tls);
/// ```
#[derive(Debug, Clone)]
pub struct TlsConfig {
    trust: Pem,
    client: Option<(Pem, Pem)>,
    server_name: Option<String>,
}

impl TlsConfig {
    /// Trusts the CA certificates of the PEM file `ca`; presents the certificate chain
    /// and private key of the PEM files `client` (certificate, key), if given. The
    /// files are read on each connection attempt.
    pub fn from_files(ca: impl Into<PathBuf>, client: Option<(PathBuf, PathBuf)>) -> Self {
        Self {
            trust: Pem::File(ca.into()),
            client: client.map(|(cert, key)| (Pem::File(cert), Pem::File(key))),
            server_name: None,
        }
    }

    /// Trusts the CA certificates of `ca`, PEM text.
    pub fn from_pem(ca: impl Into<Vec<u8>>) -> Self {
        Self {
            trust: Pem::Bytes(ca.into().into()),
            client: None,
            server_name: None,
        }
    }

    /// Presents the certificate chain and private key of these PEM files.
    pub fn with_client_cert_files(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.client = Some((Pem::File(cert.into()), Pem::File(key.into())));
        self
    }

    /// Presents this certificate chain and private key, PEM text.
    pub fn with_client_cert_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.client = Some((
            Pem::Bytes(cert.into().into()),
            Pem::Bytes(key.into().into()),
        ));
        self
    }

    /// Checks the coordinator's certificate against `name` (a DNS name or an IP
    /// address) instead of the host of the address connected to.
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// The name given by [`TlsConfig::with_server_name`], if any.
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// Reads the files and builds the TLS client configuration.
    pub(crate) fn connector(&self) -> Result<tokio_rustls::TlsConnector, ConnectError> {
        let mut roots = RootCertStore::empty();
        for (i, ca) in self.trust.certs("CA")?.into_iter().enumerate() {
            roots.add(ca).map_err(|e| {
                ConnectError::Tls(format!(
                    "{}: certificate {} is not a usable CA: {e}",
                    self.trust.describe("CA"),
                    i + 1
                ))
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ConnectError::Tls(e.to_string()))?
            .with_root_certificates(roots);
        let config = match &self.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = cert.certs("client certificate")?;
                let key_der = key.key("client key")?;
                builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                    ConnectError::Tls(format!(
                        "{} does not fit {}: {e}",
                        key.describe("client key"),
                        cert.describe("client certificate")
                    ))
                })?
            }
        };
        Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
    }

    /// The name to check the coordinator's certificate against: the one given, else
    /// `host`.
    pub(crate) fn name_for(&self, host: &str) -> Result<ServerName<'static>, ConnectError> {
        let name = self.server_name.as_deref().unwrap_or(host);
        if name.is_empty() {
            return Err(ConnectError::Tls(
                "no server name to check the coordinator's certificate against: give one with TlsConfig::with_server_name"
                    .into(),
            ));
        }
        ServerName::try_from(name.to_owned())
            .map_err(|e| ConnectError::Tls(format!("invalid server name '{name}': {e}")))
    }
}

/// The host part of `addr` (`host:port`, `[v6]:port`), for the server name.
pub(crate) fn host_of(addr: &str) -> &str {
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => addr,
    };
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// What a TLS failure means, in words: the coordinator's certificate refused (expired,
/// unknown issuer, wrong name), or ours refused by the coordinator, or no TLS at all.
pub(crate) fn describe(error: &rustls::Error) -> String {
    use rustls::Error;
    match error {
        Error::InvalidCertificate(cert) => {
            let what = match cert {
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    "certificate expired"
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    "certificate not valid yet"
                }
                CertificateError::UnknownIssuer => "unknown issuer (not signed by a trusted CA)",
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => {
                    "certificate not valid for the server name"
                }
                CertificateError::Revoked => "certificate revoked",
                _ => "invalid certificate",
            };
            format!("the coordinator's certificate is refused: {what} ({error})")
        }
        Error::AlertReceived(alert) => {
            let what = match alert {
                AlertDescription::CertificateRequired => {
                    "it requires a client certificate".to_owned()
                }
                AlertDescription::CertificateExpired => {
                    "it refused the client certificate: certificate expired".to_owned()
                }
                AlertDescription::UnknownCA => {
                    "it refused the client certificate: unknown issuer".to_owned()
                }
                AlertDescription::BadCertificate
                | AlertDescription::UnsupportedCertificate
                | AlertDescription::CertificateRevoked
                | AlertDescription::CertificateUnknown
                | AlertDescription::AccessDenied => {
                    format!("it refused the client certificate ({alert:?})")
                }
                other => format!("alert {other:?}"),
            };
            format!("the coordinator ended the TLS session: {what}")
        }
        Error::InvalidMessage(_) => {
            format!("the coordinator does not answer in TLS (is its listener TLS?): {error}")
        }
        other => other.to_string(),
    }
}

/// A TLS failure inside an I/O error (as tokio-rustls reports them), in words.
pub(crate) fn from_io(error: &std::io::Error) -> Option<String> {
    let inner = error.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(describe(inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_cut_from_addresses() {
        assert_eq!(host_of("localhost:7070"), "localhost");
        assert_eq!(host_of("127.0.0.1:7070"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7070"), "::1");
        assert_eq!(host_of("coordinator"), "coordinator");
    }

    #[test]
    fn server_names_come_from_the_host_unless_given() {
        let tls = TlsConfig::from_pem(Vec::new());
        assert!(matches!(
            tls.name_for("127.0.0.1"),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            tls.name_for("localhost"),
            Ok(ServerName::DnsName(_))
        ));
        assert!(tls.name_for("").is_err());
        let tls = tls.with_server_name("coordinator.internal");
        match tls.name_for("127.0.0.1") {
            Ok(ServerName::DnsName(name)) => assert_eq!(name.as_ref(), "coordinator.internal"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unusable_pem_is_a_tls_error_naming_it() {
        let Err(e) = TlsConfig::from_files("/nonexistent/ca.pem", None).connector() else {
            panic!("a missing CA file is refused");
        };
        assert!(
            matches!(&e, ConnectError::Tls(m) if m.contains("cannot read CA file /nonexistent/ca.pem")),
            "{e}"
        );
        let Err(e) = TlsConfig::from_pem("not pem").connector() else {
            panic!("PEM without a certificate is refused");
        };
        assert!(
            matches!(&e, ConnectError::Tls(m) if m.contains("holds no certificate")),
            "{e}"
        );
    }

    #[test]
    fn failures_are_told_in_words() {
        let expired = rustls::Error::InvalidCertificate(CertificateError::Expired);
        assert!(describe(&expired).contains("certificate expired"));
        let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        assert!(describe(&unknown).contains("unknown issuer"));
        let required = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
        assert!(describe(&required).contains("requires a client certificate"));
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, expired);
        assert!(from_io(&io).unwrap().contains("certificate expired"));
        assert!(from_io(&std::io::Error::other("plain")).is_none());
    }
}
