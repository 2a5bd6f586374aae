//! TLS on the client listener: the rustls configuration built from the certificate,
//! key and client CA files, its reloading when they change (or on SIGHUP), and the
//! identity a client's certificate names.
//!
//! The files are read once at start (a bad file is a startup error naming it), then
//! watched: every `reload_interval` their modification times, sizes and inodes are
//! compared with those of the last load, and on a change (or a SIGHUP) the files are
//! read again and a new configuration is built and swapped in. New connections use
//! the newest configuration; established ones keep the session they have. A reload
//! that fails (a bad PEM file, a key that does not fit the certificate) is logged and
//! counted, and the configuration in force stays.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::metrics::Metrics;

/// Whether, and how, clients must present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// A client may present a certificate, which must then chain to the client CA; one
    /// without is served too.
    Optional,
    /// Every client must present a certificate that chains to the client CA.
    Required,
}

impl ClientAuth {
    /// The name the command line and the file use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Optional => "optional",
            Self::Required => "required",
        }
    }
}

impl fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ClientAuth {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "none" => Ok(Self::None),
            "optional" => Ok(Self::Optional),
            "required" => Ok(Self::Required),
            other => Err(format!(
                "unknown client authentication '{other}': expected none, optional or required"
            )),
        }
    }
}

/// TLS on the client listener. Off unless both `cert` and `key` are set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM file with the server's certificate chain, its own certificate first.
    pub cert: Option<PathBuf>,
    /// PEM file with the private key of the certificate (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// PEM file with the CA certificates client certificates must chain to.
    pub client_ca: Option<PathBuf>,
    /// Whether clients must present a certificate; `None`: required when `client_ca` is
    /// given, else none.
    pub client_auth: Option<ClientAuth>,
    /// How often the files are checked for changes.
    pub reload_interval: Duration,
}

impl Default for TlsSettings {
    fn default() -> Self {
        Self {
            cert: None,
            key: None,
            client_ca: None,
            client_auth: None,
            reload_interval: Duration::from_secs(10),
        }
    }
}

impl TlsSettings {
    /// Whether the listener speaks TLS.
    pub fn enabled(&self) -> bool {
        self.cert.is_some() && self.key.is_some()
    }

    /// The client authentication in force: the one given, else required when a client
    /// CA is given, else none.
    pub fn effective_client_auth(&self) -> ClientAuth {
        self.client_auth.unwrap_or(if self.client_ca.is_some() {
            ClientAuth::Required
        } else {
            ClientAuth::None
        })
    }

    /// The files the configuration is built from.
    fn files(&self) -> impl Iterator<Item = &Path> {
        [&self.cert, &self.key, &self.client_ca]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
    }
}

/// A TLS file that cannot be used: which option names it, the file, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option} {}: {reason}", path.display())]
pub struct TlsError {
    /// The option naming the file, as the command line spells it.
    pub option: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

impl TlsError {
    fn new(option: &'static str, path: &Path, reason: impl Into<String>) -> Self {
        Self {
            option,
            path: path.to_owned(),
            reason: reason.into(),
        }
    }
}

/// What a PEM read error says, for a file.
fn pem_reason(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(e) => format!("cannot read: {e}"),
        other => format!("not valid PEM: {other}"),
    }
}

/// Every certificate of a PEM file, in order; an error if there is none.
fn read_certs(option: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let iter = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::new(option, path, pem_reason(&e)))?;
    let certs = iter
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::new(option, path, pem_reason(&e)))?;
    if certs.is_empty() {
        return Err(TlsError::new(
            option,
            path,
            "holds no certificate (expected PEM 'BEGIN CERTIFICATE' blocks)",
        ));
    }
    Ok(certs)
}

/// The rustls server configuration `settings` describe, read from their files now.
pub(crate) fn load(settings: &TlsSettings) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let (Some(cert_path), Some(key_path)) = (&settings.cert, &settings.key) else {
        return Err(TlsError::new(
            "tls-cert",
            Path::new("-"),
            "TLS needs both tls-cert and tls-key",
        ));
    };
    let chain = read_certs("tls-cert", cert_path)?;
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::new(
            "tls-key",
            key_path,
            "holds no private key (expected a PEM 'BEGIN PRIVATE KEY' block)",
        ),
        other => TlsError::new("tls-key", key_path, pem_reason(&other)),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new("tls-cert", cert_path, e.to_string()))?;
    let builder = match (settings.effective_client_auth(), &settings.client_ca) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (auth, Some(ca_path)) => {
            let mut roots = RootCertStore::empty();
            for (i, ca) in read_certs("tls-client-ca", ca_path)?
                .into_iter()
                .enumerate()
            {
                roots.add(ca).map_err(|e| {
                    TlsError::new(
                        "tls-client-ca",
                        ca_path,
                        format!("certificate {} is not a usable CA: {e}", i + 1),
                    )
                })?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let verifier = match auth {
                ClientAuth::Optional => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::new("tls-client-ca", ca_path, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        (auth, None) => {
            return Err(TlsError::new(
                "tls-client-auth",
                Path::new(auth.as_str()),
                "needs tls-client-ca",
            ))
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        let reason = match e {
            rustls::Error::InconsistentKeys(_) => format!(
                "does not belong to the certificate in {} (tls-cert)",
                cert_path.display()
            ),
            other => format!("cannot be used with the certificate: {other}"),
        };
        TlsError::new("tls-key", key_path, reason)
    })?;
    Ok(Arc::new(config))
}

/// The configuration new connections use, replaced when the files change.
#[derive(Debug)]
pub(crate) struct TlsContext {
    current: RwLock<Arc<rustls::ServerConfig>>,
}

impl TlsContext {
    pub(crate) fn new(config: Arc<rustls::ServerConfig>) -> Self {
        Self {
            current: RwLock::new(config),
        }
    }

    /// The newest configuration.
    pub(crate) fn current(&self) -> Arc<rustls::ServerConfig> {
        self.current.read().clone()
    }

    fn replace(&self, config: Arc<rustls::ServerConfig>) {
        *self.current.write() = config;
    }
}

/// What identifies one version of a file: its modification time, size and inode.
type Stamp = Vec<Option<(SystemTime, u64, u64)>>;

fn stamp(settings: &TlsSettings) -> Stamp {
    settings
        .files()
        .map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            #[cfg(unix)]
            let inode = std::os::unix::fs::MetadataExt::ino(&meta);
            #[cfg(not(unix))]
            let inode = 0;
            Some((meta.modified().ok()?, meta.len(), inode))
        })
        .collect()
}

/// Loads the configuration at start, and returns it with the stamp of the files it
/// was read from.
pub(crate) fn load_initial(
    settings: &TlsSettings,
) -> Result<(Arc<rustls::ServerConfig>, TlsWatch), TlsError> {
    // Stamped before reading: a file replaced while it is read is read again.
    let seen = stamp(settings);
    let config = load(settings)?;
    log_certificate(settings, "TLS enabled");
    Ok((
        config,
        TlsWatch {
            settings: settings.clone(),
            seen,
        },
    ))
}

/// What the reload task needs: the settings and the stamp of the files last read.
#[derive(Debug)]
pub(crate) struct TlsWatch {
    settings: TlsSettings,
    seen: Stamp,
}

impl TlsWatch {
    /// Reloads `context` when the files change, every `reload_interval`, and on
    /// SIGHUP, until `stop`.
    pub(crate) async fn run(
        mut self,
        context: Arc<TlsContext>,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) {
        let mut ticks = tokio::time::interval(self.settings.reload_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        let mut hangups = hangups();
        loop {
            let forced = tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => false,
                () = next_hangup(&mut hangups) => true,
            };
            let now = stamp(&self.settings);
            if !forced && now == self.seen {
                continue;
            }
            self.seen = now;
            let why = if forced { "SIGHUP" } else { "files changed" };
            match load(&self.settings) {
                Ok(config) => {
                    context.replace(config);
                    metrics.tls_reloads_applied.increment(1);
                    log_certificate(&self.settings, why);
                }
                Err(e) => {
                    metrics.tls_reloads_failed.increment(1);
                    error!(error = %e, trigger = why,
                        "TLS reload failed; new connections keep the previous certificate");
                }
            }
        }
    }
}

#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = ();

#[cfg(unix)]
fn hangups() -> Hangups {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(error = %e, "cannot listen for SIGHUP; TLS files are reloaded when they change");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangups() -> Hangups {}

/// The next SIGHUP; never, where there is none.
async fn next_hangup(hangups: &mut Hangups) {
    #[cfg(unix)]
    if let Some(signal) = hangups {
        if signal.recv().await.is_some() {
            return;
        }
    }
    let _ = hangups;
    std::future::pending::<()>().await;
}

/// Logs the certificate now served: its subject and when it expires.
fn log_certificate(settings: &TlsSettings, why: &str) {
    let described = settings
        .cert
        .as_deref()
        .and_then(|path| read_certs("tls-cert", path).ok())
        .and_then(|chain| {
            let (_, cert) = x509_parser::parse_x509_certificate(chain.first()?).ok()?;
            Some((
                cert.subject().to_string(),
                cert.validity().not_after.to_string(),
            ))
        });
    let (subject, not_after) = described.unwrap_or_default();
    info!(
        cert = %settings.cert.as_deref().unwrap_or(Path::new("")).display(),
        %subject,
        %not_after,
        client_auth = %settings.effective_client_auth(),
        "{why}: serving TLS certificate"
    );
}

/// The identity a client certificate names: its subject's Common Name, or, without
/// one, its first DNS name. `None` if the certificate names neither (or does not
/// parse, which a certificate rustls has verified does).
pub(crate) fn identity(cert: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    if let Some(cn) = cert
        .subject()
        .iter_common_name()
        .find_map(|cn| cn.as_str().ok())
    {
        return Some(cn.to_owned());
    }
    let names = cert.subject_alternative_name().ok()??;
    names
        .value
        .general_names
        .iter()
        .find_map(|name| match name {
            x509_parser::extensions::GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with(cn: Option<&str>, dns: &[&str]) -> Vec<u8> {
        let mut params =
            rcgen::CertificateParams::new(dns.iter().map(|d| (*d).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
        }
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "rollcall tests");
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn identity_is_the_common_name_else_the_first_dns_name() {
        assert_eq!(
            identity(&cert_with(Some("worker-7"), &["w7.example"])).as_deref(),
            Some("worker-7")
        );
        assert_eq!(
            identity(&cert_with(None, &["w8.example", "other.example"])).as_deref(),
            Some("w8.example")
        );
        assert_eq!(identity(&cert_with(None, &[])), None);
        assert_eq!(identity(b"not a certificate"), None);
    }

    #[test]
    fn client_auth_parses_and_defaults_by_the_client_ca() {
        for auth in [ClientAuth::None, ClientAuth::Optional, ClientAuth::Required] {
            assert_eq!(auth.to_string().parse::<ClientAuth>(), Ok(auth));
        }
        assert!("sometimes".parse::<ClientAuth>().is_err());
        let mut s = TlsSettings::default();
        assert_eq!(s.effective_client_auth(), ClientAuth::None);
        s.client_ca = Some("ca.pem".into());
        assert_eq!(s.effective_client_auth(), ClientAuth::Required);
        s.client_auth = Some(ClientAuth::Optional);
        assert_eq!(s.effective_client_auth(), ClientAuth::Optional);
    }

    /// A directory of PEM files, removed when dropped.
    struct Files(PathBuf);

    impl Files {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "rollcall-tls-{tag}-{}-{}",
                std::process::id(),
                rand::random::<u32>()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            path
        }
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn bad_files_are_named_in_the_error() {
        let files = Files::new("load");
        let (cert, key) = pair("localhost");
        let (other_cert, other_key) = pair("other");
        let settings = |cert: &PathBuf, key: &PathBuf| TlsSettings {
            cert: Some(cert.clone()),
            key: Some(key.clone()),
            ..TlsSettings::default()
        };
        let good_cert = files.write("cert.pem", &cert);
        let good_key = files.write("key.pem", &key);
        load(&settings(&good_cert, &good_key)).unwrap();

        let missing = files.0.join("missing.pem");
        let e = load(&settings(&missing, &good_key)).unwrap_err();
        assert_eq!(e.option, "tls-cert");
        assert!(e.to_string().contains("missing.pem: cannot read"), "{e}");

        let e = load(&settings(&good_key, &good_key)).unwrap_err();
        assert_eq!(e.option, "tls-cert");
        assert!(e.to_string().contains("holds no certificate"), "{e}");

        let e = load(&settings(&good_cert, &good_cert)).unwrap_err();
        assert_eq!(e.option, "tls-key");
        assert!(e.to_string().contains("holds no private key"), "{e}");

        let garbled = files.write("garbled.pem", "-----BEGIN CERTIFICATE-----\n!!!!\n");
        let e = load(&settings(&garbled, &good_key)).unwrap_err();
        assert!(e.to_string().contains("not valid PEM"), "{e}");

        let _ = other_cert;
        let wrong_key = files.write("other-key.pem", &other_key);
        let e = load(&settings(&good_cert, &wrong_key)).unwrap_err();
        assert_eq!(e.option, "tls-key");
        assert!(
            e.to_string().contains("does not belong to the certificate"),
            "{e}"
        );

        let mut s = settings(&good_cert, &good_key);
        s.client_ca = Some(files.write("ca.pem", &cert));
        load(&s).unwrap();
        s.client_ca = Some(missing);
        let e = load(&s).unwrap_err();
        assert_eq!(e.option, "tls-client-ca");
    }
}
