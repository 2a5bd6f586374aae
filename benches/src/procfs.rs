//! CPU time and memory of a process (or of some of its threads), read from `/proc`.

use std::fs;
use std::sync::OnceLock;

/// Clock ticks per second of the `utime`/`stime` fields of `/proc/<pid>/stat`.
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// The fields of a `stat` file after the command name (which may hold spaces).
fn stat_fields(text: &str) -> Option<Vec<&str>> {
    let close = text.rfind(')')?;
    Some(text[close + 1..].split_whitespace().collect())
}

/// User plus system CPU seconds of a `stat` file's task (fields 14 and 15).
fn stat_cpu_seconds(path: &str) -> Option<f64> {
    let text = fs::read_to_string(path).ok()?;
    let fields = stat_fields(&text)?;
    // After the command name, field 3 (state) is index 0, so field 14 is index 11.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

/// CPU seconds (user + system) used so far by process `pid`, its exited threads included.
pub(crate) fn process_cpu_seconds(pid: u32) -> Option<f64> {
    stat_cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// A `kB` field of `/proc/<pid>/status`, in bytes.
fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Resident set size now, bytes.
pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmRSS:")
}

/// Peak resident set size, bytes.
pub(crate) fn peak_rss_bytes(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmHWM:")
}

/// The soft limit on open files of process `pid` (`Max open files` of
/// `/proc/<pid>/limits`); `None` when unlimited or unreadable.
pub(crate) fn open_files_limit(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    text.lines()
        .find(|l| l.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// CPU seconds of the live threads of this process whose name starts with `prefix`,
/// plus the main thread when `main_thread` is set.
pub(crate) fn own_threads_cpu_seconds(prefix: &str, main_thread: bool) -> f64 {
    let pid = std::process::id();
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let mut total = 0.0;
    for entry in dir.flatten() {
        let tid = entry.file_name().to_string_lossy().into_owned();
        let comm = fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
        let is_main = tid == pid.to_string();
        if comm.trim_end().starts_with(prefix) || (main_thread && is_main) {
            total += stat_cpu_seconds(&format!("/proc/{pid}/task/{tid}/stat")).unwrap_or(0.0);
        }
    }
    total
}

/// The machine's one-minute load average.
pub(crate) fn load_average() -> Option<f64> {
    fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Number of CPUs available to this process.
pub(crate) fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let pid = std::process::id();
        assert!(process_cpu_seconds(pid).is_some());
        assert!(rss_bytes(pid).unwrap() > 0);
        assert!(peak_rss_bytes(pid).unwrap() >= rss_bytes(pid).unwrap() / 2);
        assert!(load_average().is_some());
        assert!(open_files_limit(pid).is_some_and(|n| n > 0));
    }

    #[test]
    fn stat_fields_skip_command_names_with_spaces() {
        let text = "12 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0";
        let f = stat_fields(text).unwrap();
        assert_eq!(f[0], "S");
        assert_eq!(f[11], "250");
        assert_eq!(f[12], "50");
    }
}
