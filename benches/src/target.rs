//! The coordinator under test: started in this process, spawned as a separate
//! `rollcall serve` process, or an external one at a given address.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rollcall_client::raw::{self, ConnectOptions, Transport};
use rollcall_client::ConnectError;
use rollcall_client::TlsConfig;
use rollcall_coordinator::server::{
    ClusterSettings, Server, ServerConfig, ServerHandle, StoreConfig, TlsSettings,
};
use rollcall_protocol::ApiVersionsResponse;
use serde::Serialize;

use crate::procfs;

/// Name prefix of the load generator's threads (the in-process coordinator's CPU time
/// is the process's less these).
pub(crate) const GENERATOR_THREADS: &str = "bench-gen";

/// Where the coordinator runs.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    InProcess,
    Spawn(PathBuf),
    External { addr: String, pid: Option<u32> },
}

/// The coordinator's durable store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum StoreKind {
    /// redb in a temporary directory (what production runs).
    Redb,
    /// Nothing durable.
    Memory,
    /// Cluster mode: a one-coordinator cluster of its own (a fresh cluster name per
    /// run) on the etcd at `--etcd`. Needs the coordinator built with the `cluster`
    /// feature.
    Etcd,
}

/// How to start the coordinator.
#[derive(Debug, Clone)]
pub(crate) struct TargetOptions {
    pub(crate) mode: Mode,
    pub(crate) store: StoreKind,
    pub(crate) shards: usize,
    pub(crate) max_connections: usize,
    pub(crate) min_session_timeout: Duration,
    pub(crate) max_members_per_group: usize,
    pub(crate) send_buffer: Option<usize>,
    /// Serve over TLS, with a certificate made for the run.
    pub(crate) tls: bool,
    /// etcd endpoints for `StoreKind::Etcd`.
    pub(crate) etcd: Vec<String>,
}

/// A cluster name no earlier run used, so that each run starts from an empty cluster.
fn fresh_cluster_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("bench-{}-{nanos}", std::process::id())
}

/// Where the load generator connects: the address, and over TLS the CA to verify the
/// coordinator's certificate with.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub(crate) addr: SocketAddr,
    pub(crate) tls: Option<TlsConfig>,
}

impl Endpoint {
    /// The options of a connection as `software`, bounded by `timeout`.
    pub(crate) fn options(&self, software: &str, timeout: Duration) -> ConnectOptions {
        let options = ConnectOptions::new(software).with_timeout(timeout);
        match &self.tls {
            Some(tls) => options.with_tls(tls.clone()),
            None => options,
        }
    }

    /// Connects (TCP, TLS if the coordinator speaks it) and handshakes within
    /// `timeout`.
    pub(crate) async fn connect(
        &self,
        software: &str,
        timeout: Duration,
    ) -> Result<(Transport, ApiVersionsResponse), ConnectError> {
        match &self.tls {
            None => raw::connect(self.addr, software, timeout).await,
            Some(_) => raw::open(&self.addr.to_string(), &self.options(software, timeout)).await,
        }
    }
}

/// The PEM files of a TLS run: the coordinator's certificate and key, and the CA
/// that issued the certificate (for the load generator).
#[derive(Debug)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    ca: String,
}

impl TlsFiles {
    /// A CA, and a certificate for 127.0.0.1 and localhost that it issued, written to
    /// `dir`.
    fn make(dir: &Path) -> Result<Self, String> {
        let fail = |e: rcgen::Error| format!("cannot make the TLS certificates: {e}");
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "rollcall-bench CA");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().map_err(fail)?)
            .map_err(fail)?;
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(fail)?;
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "rollcall-bench coordinator");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().map_err(fail)?;
        let cert = params.signed_by(&key, &ca).map_err(fail)?;
        let files = Self {
            cert: dir.join("coordinator.pem"),
            key: dir.join("coordinator-key.pem"),
            ca: ca.pem(),
        };
        let write = |path: &Path, pem: String| {
            std::fs::write(path, pem).map_err(|e| format!("cannot write {}: {e}", path.display()))
        };
        write(&files.cert, cert.pem())?;
        write(&files.key, key.serialize_pem())?;
        Ok(files)
    }

    fn client(&self) -> TlsConfig {
        TlsConfig::from_pem(self.ca.clone())
    }
}

#[derive(Debug)]
enum Running {
    InProcess {
        runtime: Option<tokio::runtime::Runtime>,
        handle: Option<ServerHandle>,
    },
    Spawned {
        child: Child,
    },
    External {
        pid: Option<u32>,
    },
}

/// A running coordinator.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    /// Over TLS: how the load generator verifies the coordinator.
    tls: Option<TlsConfig>,
    running: Running,
    data_dir: Option<PathBuf>,
}

/// How the figures about the coordinator were obtained, for the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TargetInfo {
    pub(crate) mode: &'static str,
    pub(crate) store: StoreKind,
    pub(crate) shards: usize,
    /// The load generator's connections use TLS.
    pub(crate) tls: bool,
    pub(crate) pid: Option<u32>,
    pub(crate) resource_note: &'static str,
}

fn temp_dir() -> std::io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("rollcall-bench-{}-{nanos:x}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The `rollcall` binary next to this one (same target directory).
pub(crate) fn sibling_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("rollcall"), dir.join("../rollcall")]
        .into_iter()
        .find(|p| p.is_file())
}

/// Starts the coordinator process `cmd` (its `serve` arguments set) with the log
/// settings every spawned coordinator gets, and waits up to `within` for its log to name
/// the address it listens on. The log is drained for the process's whole life (a full
/// pipe would block it), its first warnings echoed under `tag`. The process is killed
/// if it does not report an address.
pub(crate) async fn start_logged(
    mut cmd: Command,
    tag: &str,
    within: Duration,
) -> Result<(Child, SocketAddr), String> {
    // Per-member logs would cost the coordinator more than the work measured; keep the
    // start-up line (it names the bound port) and warnings.
    cmd.env(
        "RUST_LOG",
        "warn,rollcall_coordinator::server=info,rollcall_coordinator::server::shard=warn",
    )
    .env("NO_COLOR", "1")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", cmd.get_program().to_string_lossy()))?;
    let stderr = child.stderr.take().ok_or("no stderr pipe")?;
    let (tx, rx) = std::sync::mpsc::channel();
    let name = tag.to_owned();
    std::thread::Builder::new()
        .name(format!("log-{tag}"))
        .spawn(move || {
            let mut echoed = 0;
            let mut found = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if !found {
                    if let Some(addr) = listen_addr(&line) {
                        found = true;
                        let _ = tx.send(Ok(addr));
                        continue;
                    }
                }
                let plain = strip_ansi(&line);
                if (plain.contains("WARN") || plain.contains("ERROR") || !found) && echoed < 20 {
                    echoed += 1;
                    eprintln!("[{name}] {plain}");
                }
            }
            if !found {
                let _ = tx.send(Err(format!("{name} exited before listening")));
            }
        })
        .map_err(|e| format!("log thread: {e}"))?;
    let tag = tag.to_owned();
    let addr = tokio::task::spawn_blocking(move || {
        rx.recv_timeout(within)
            .map_err(|_| format!("{tag} did not report its address within {within:?}"))?
    })
    .await
    .map_err(|e| e.to_string())?;
    match addr {
        Ok(addr) => Ok((child, addr)),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// Removes ANSI colour sequences from a log line.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The address in a `listen=ADDR` field of the coordinator's start-up log line.
fn listen_addr(line: &str) -> Option<SocketAddr> {
    let line = strip_ansi(line);
    let rest = &line[line.find("listen=")? + "listen=".len()..];
    rest.split_whitespace()
        .next()?
        .trim_matches('"')
        .parse()
        .ok()
}

impl Target {
    pub(crate) async fn start(opts: &TargetOptions) -> Result<Self, String> {
        match &opts.mode {
            Mode::InProcess => Self::in_process(opts).await,
            Mode::Spawn(bin) => Self::spawn(opts, bin).await,
            Mode::External { addr, pid } => {
                let addr = tokio::net::lookup_host(addr.as_str())
                    .await
                    .map_err(|e| format!("cannot resolve {addr}: {e}"))?
                    .next()
                    .ok_or_else(|| format!("{addr} resolves to nothing"))?;
                Ok(Self {
                    addr,
                    tls: None,
                    running: Running::External { pid: *pid },
                    data_dir: None,
                })
            }
        }
    }

    async fn in_process(opts: &TargetOptions) -> Result<Self, String> {
        let data_dir = match (opts.store, opts.tls) {
            (StoreKind::Memory, false) => None,
            _ => Some(temp_dir().map_err(|e| format!("temp dir: {e}"))?),
        };
        let tls = match (&data_dir, opts.tls) {
            (Some(dir), true) => Some(TlsFiles::make(dir)?),
            _ => None,
        };
        let mut config = ServerConfig {
            store: match (&data_dir, opts.store) {
                (Some(dir), StoreKind::Redb) => StoreConfig::Dir(dir.clone()),
                _ => StoreConfig::Memory,
            },
            tls: TlsSettings {
                cert: tls.as_ref().map(|t| t.cert.clone()),
                key: tls.as_ref().map(|t| t.key.clone()),
                ..TlsSettings::default()
            },
            shards: opts.shards,
            // As `rollcall serve` runs by default: a connection thread per two CPUs.
            io_threads: (procfs::cpus() / 2).max(1),
            max_connections: opts.max_connections,
            // The load generator opens every connection from one address.
            max_connections_per_address: 0,
            ..ServerConfig::default()
        };
        if let Some(frames) = opts.send_buffer {
            config.send_buffer = frames;
        }
        if opts.store == StoreKind::Etcd {
            let mut cluster = ClusterSettings::new(opts.etcd.clone());
            cluster.name = fresh_cluster_name();
            config.cluster = Some(cluster);
        }
        config.core.min_session_timeout = opts.min_session_timeout;
        config.core.max_members_per_group = opts.max_members_per_group;
        // The coordinator gets its own runtime and threads, named apart from the load
        // generator's, so that its CPU time can be told from the generator's.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(procfs::cpus())
            .thread_name("coordinator")
            .enable_all()
            .build()
            .map_err(|e| format!("coordinator runtime: {e}"))?;
        let handle = runtime
            .spawn(async move {
                let server = Server::bind(config).await.map_err(|e| e.to_string())?;
                Ok::<_, String>(server.spawn())
            })
            .await
            .map_err(|e| format!("coordinator start panicked: {e}"))??;
        Ok(Self {
            addr: handle.local_addr(),
            tls: tls.map(|t| t.client()),
            running: Running::InProcess {
                runtime: Some(runtime),
                handle: Some(handle),
            },
            data_dir,
        })
    }

    async fn spawn(opts: &TargetOptions, bin: &Path) -> Result<Self, String> {
        let data_dir = temp_dir().map_err(|e| format!("temp dir: {e}"))?;
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0", "--metrics-addr", "off"])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--shards", &opts.shards.to_string()])
            .args(["--max-connections", &opts.max_connections.to_string()])
            // The load generator opens every connection from one address.
            .args(["--max-connections-per-address", "0"])
            .args([
                "--min-session-timeout",
                &format!("{}ms", opts.min_session_timeout.as_millis()),
            ])
            .args([
                "--max-members-per-group",
                &opts.max_members_per_group.to_string(),
            ]);
        match opts.store {
            StoreKind::Memory => {
                cmd.arg("--in-memory");
            }
            StoreKind::Etcd => {
                cmd.arg("--etcd")
                    .arg(opts.etcd.join(","))
                    .arg("--cluster")
                    .arg(fresh_cluster_name());
            }
            StoreKind::Redb => {}
        }
        let tls = if opts.tls {
            let files = TlsFiles::make(&data_dir)?;
            cmd.arg("--tls-cert")
                .arg(&files.cert)
                .arg("--tls-key")
                .arg(&files.key);
            Some(files.client())
        } else {
            None
        };
        if let Some(frames) = opts.send_buffer {
            cmd.args(["--send-buffer", &frames.to_string()]);
        }
        let (child, addr) = match start_logged(cmd, "coordinator", Duration::from_secs(30)).await {
            Ok(started) => started,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&data_dir);
                return Err(e);
            }
        };
        Ok(Self {
            addr,
            tls,
            running: Running::Spawned { child },
            data_dir: Some(data_dir),
        })
    }

    /// Where the load generator connects.
    pub(crate) fn endpoint(&self) -> Endpoint {
        Endpoint {
            addr: self.addr,
            tls: self.tls.clone(),
        }
    }

    /// The coordinator's process id, when its resources can be read.
    pub(crate) fn pid(&self) -> Option<u32> {
        match &self.running {
            Running::InProcess { .. } => Some(std::process::id()),
            Running::Spawned { child } => Some(child.id()),
            Running::External { pid } => *pid,
        }
    }

    /// Sends `signal` (a name `kill` knows, such as `STOP` or `CONT`) to the coordinator's
    /// process: a spawned one, or an external one given with `--pid`. Never to this
    /// process: an in-process coordinator cannot be signalled apart from the load
    /// generator.
    pub(crate) fn signal(&self, signal: &str) -> Result<(), String> {
        let pid = match &self.running {
            Running::Spawned { child } => child.id(),
            Running::External { pid: Some(pid) } => *pid,
            Running::InProcess { .. } | Running::External { pid: None } => {
                return Err(
                    "the coordinator has no process of its own to signal: use --spawn, or --addr with --pid"
                        .to_owned(),
                )
            }
        };
        send_signal(pid, signal)
    }

    /// Stops the coordinator's process (SIGSTOP) until the returned guard is thawed or
    /// dropped (SIGCONT), so that no run leaves it stopped.
    pub(crate) fn freeze(&self) -> Result<Frozen<'_>, String> {
        self.signal("STOP")?;
        Ok(Frozen {
            target: self,
            thawed: false,
        })
    }

    /// CPU seconds the coordinator has used so far.
    pub(crate) fn cpu_seconds(&self) -> Option<f64> {
        match &self.running {
            Running::InProcess { .. } => {
                let total = procfs::process_cpu_seconds(std::process::id())?;
                let generator = procfs::own_threads_cpu_seconds(GENERATOR_THREADS, true);
                Some((total - generator).max(0.0))
            }
            _ => procfs::process_cpu_seconds(self.pid()?),
        }
    }

    /// CPU seconds of the load generator so far, when it can be told apart.
    pub(crate) fn generator_cpu_seconds(&self) -> Option<f64> {
        match &self.running {
            Running::InProcess { .. } => {
                Some(procfs::own_threads_cpu_seconds(GENERATOR_THREADS, true))
            }
            _ => procfs::process_cpu_seconds(std::process::id()),
        }
    }

    pub(crate) fn rss(&self) -> Option<u64> {
        procfs::rss_bytes(self.pid()?)
    }

    pub(crate) fn peak_rss(&self) -> Option<u64> {
        procfs::peak_rss_bytes(self.pid()?)
    }

    pub(crate) fn info(&self, opts: &TargetOptions) -> TargetInfo {
        let (mode, note) = match &self.running {
            Running::InProcess { .. } => (
                "in-process",
                "CPU: the process less the load generator's threads; memory: the whole process, load generator included (use --spawn for the coordinator alone)",
            ),
            Running::Spawned { .. } => ("spawned", "CPU and memory of the coordinator process alone"),
            Running::External { pid: Some(_) } => ("external", "CPU and memory of the given process"),
            Running::External { pid: None } => ("external", "no CPU or memory figures (give --pid)"),
        };
        TargetInfo {
            mode,
            store: opts.store,
            shards: opts.shards,
            tls: self.tls.is_some(),
            pid: self.pid(),
            resource_note: note,
        }
    }

    /// Stops the coordinator (gracefully, then by force) and removes its data.
    pub(crate) async fn stop(mut self) {
        match &mut self.running {
            Running::InProcess { runtime, handle } => {
                if let (Some(rt), Some(h)) = (runtime.as_ref(), handle.take()) {
                    let stopping = rt.spawn(async move {
                        let _ = tokio::time::timeout(Duration::from_secs(15), h.shutdown()).await;
                    });
                    let _ = stopping.await;
                }
                if let Some(rt) = runtime.take() {
                    rt.shutdown_background();
                }
            }
            Running::Spawned { child } => {
                let _ = send_signal(child.id(), "TERM");
                let deadline = Instant::now() + Duration::from_secs(15);
                loop {
                    match child.try_wait() {
                        Ok(Some(_)) => break,
                        Ok(None) if Instant::now() < deadline => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        _ => {
                            let _ = child.kill();
                            let _ = child.wait();
                            break;
                        }
                    }
                }
            }
            Running::External { .. } => {}
        }
        if let Some(dir) = self.data_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Sends `signal` to process `pid` with `kill`.
fn send_signal(pid: u32, signal: &str) -> Result<(), String> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .map_err(|e| format!("cannot run kill -{signal} {pid}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -{signal} {pid} failed: {status}"))
    }
}

/// The coordinator's process stopped by [`Target::freeze`]; resumed by [`Frozen::thaw`],
/// or when dropped.
#[derive(Debug)]
pub(crate) struct Frozen<'a> {
    target: &'a Target,
    thawed: bool,
}

impl Frozen<'_> {
    /// Resumes the coordinator (SIGCONT).
    pub(crate) fn thaw(mut self) -> Result<(), String> {
        self.thawed = true;
        self.target.signal("CONT")
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        if !self.thawed {
            let _ = self.target.signal("CONT");
        }
    }
}

impl Drop for Target {
    /// A run interrupted or abandoned still leaves no coordinator or data behind.
    fn drop(&mut self) {
        match &mut self.running {
            Running::InProcess { runtime, .. } => {
                if let Some(rt) = runtime.take() {
                    rt.shutdown_background();
                }
            }
            Running::Spawned { child } => {
                if matches!(child.try_wait(), Ok(None)) {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
            Running::External { .. } => {}
        }
        if let Some(dir) = self.data_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_listen_address_in_a_log_line() {
        let line = "2026-01-01T00:00:00Z  INFO rollcall_coordinator::server: rollcall coordinator serving listen=127.0.0.1:40123 metrics=None shards=2";
        assert_eq!(listen_addr(line), Some("127.0.0.1:40123".parse().unwrap()));
        let coloured = "\u{1b}[2mlisten\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:7 x";
        assert_eq!(listen_addr(coloured), Some("127.0.0.1:7".parse().unwrap()));
        assert_eq!(listen_addr("nothing here"), None);
    }
}
