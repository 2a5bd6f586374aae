//! The echo server's process, started from this binary and stopped (or killed) again.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::CpuSource;
use crate::procfs;

/// Time the server is given to print its address.
const SERVER_START: Duration = Duration::from_secs(30);

/// Time the server is given to exit once its stdin is closed, before it is killed.
const SERVER_STOP: Duration = Duration::from_secs(5);

/// The server process, killed if still running when dropped.
#[derive(Debug)]
pub(super) struct ServerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    pub(super) addr: SocketAddr,
}

impl ServerProcess {
    /// Starts this binary as `floor-server` and reads the address it bound.
    pub(super) async fn spawn(threads: Option<usize>, lifetime: Duration) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
        let mut cmd = Command::new(&exe);
        cmd.args(["floor-server", "--listen", "127.0.0.1:0"])
            .args(["--lifetime", &format!("{}s", lifetime.as_secs().max(1))]);
        if let Some(n) = threads {
            cmd.args(["--server-threads", &n.to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {} floor-server: {e}", exe.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads the address, then keeps the pipe open until the server exits.
        std::thread::Builder::new()
            .name("floor-server-out".into())
            .spawn(move || {
                let mut lines = BufReader::new(stdout).lines();
                let first = match lines.next() {
                    Some(Ok(line)) => line
                        .trim()
                        .parse::<SocketAddr>()
                        .map_err(|e| format!("the server printed '{line}', not its address: {e}")),
                    _ => Err("the server exited before printing its address".to_owned()),
                };
                let _ = tx.send(first);
                for _ in lines.by_ref() {}
            })
            .map_err(|e| format!("server output thread: {e}"))?;
        let addr = tokio::task::spawn_blocking(move || {
            rx.recv_timeout(SERVER_START).map_err(|_| {
                format!(
                    "the server did not print its address within {} s",
                    SERVER_START.as_secs()
                )
            })?
        })
        .await
        .map_err(|e| e.to_string())?;
        match addr {
            Ok(addr) => Ok(Self { child, stdin, addr }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes the server's stdin and waits for it to exit; kills it past
    /// [`SERVER_STOP`].
    pub(super) async fn stop(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + SERVER_STOP;
        // Bounded by the deadline.
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    /// A run interrupted or failed still leaves no server behind.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The server's CPU time is what `floor` measures, and the generator is this process.
impl CpuSource for ServerProcess {
    fn cpu_seconds(&self) -> Option<f64> {
        procfs::process_cpu_seconds(self.pid())
    }

    fn generator_cpu_seconds(&self) -> Option<f64> {
        procfs::process_cpu_seconds(std::process::id())
    }
}
