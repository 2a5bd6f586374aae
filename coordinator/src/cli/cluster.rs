//! `rollcall cluster`: a cluster's coordinators, slots and owners, read from etcd.

use super::*;

#[derive(Debug, Args)]
pub(super) struct ClusterArgs {
    /// etcd endpoints, comma-separated.
    #[arg(
        long,
        env = "ROLLCALL_ETCD",
        value_name = "URL,...",
        value_delimiter = ',',
        required = true
    )]
    etcd: Vec<String>,
    /// The cluster's name.
    #[arg(
        long,
        env = "ROLLCALL_CLUSTER",
        value_name = "NAME",
        default_value = "default"
    )]
    cluster: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Give up on etcd after this long.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
}

#[cfg(not(feature = "cluster"))]
pub(super) fn cluster_command(_: ClusterArgs) -> ExitCode {
    eprintln!(
        "rollcall: this rollcall was built without cluster support; \
         build it with `cargo build --release --features cluster` (it needs protoc)"
    );
    ExitCode::from(EXIT_CONFIG)
}

#[cfg(feature = "cluster")]
pub(super) fn cluster_command(args: ClusterArgs) -> ExitCode {
    let runtime = match client_runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let report = runtime.block_on(async {
        tokio::time::timeout(
            args.timeout,
            crate::cluster::inspect(&args.etcd, &args.cluster),
        )
        .await
        .unwrap_or_else(|_| {
            Err(crate::cluster::ClusterError::Etcd(format!(
                "no answer within {}",
                format_duration(args.timeout)
            )))
        })
    });
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            eprintln!("rollcall: {e}");
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("rollcall: {e}");
                return ExitCode::from(EXIT_RUNTIME);
            }
        }
    } else {
        print!("{}", render_cluster(&report));
    }
    if report.slots.is_none() {
        return ExitCode::from(EXIT_RUNTIME);
    }
    ExitCode::SUCCESS
}

/// The report as tables: a summary line, the coordinators, then every slot.
#[cfg(feature = "cluster")]
fn render_cluster(report: &crate::cluster::ClusterReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let Some(slots) = report.slots else {
        let _ = writeln!(out, "no cluster named {:?} in this etcd", report.name);
        return out;
    };
    let groups: u64 = report.groups.values().sum();
    let _ = writeln!(
        out,
        "cluster {}: {slots} slots, {} owned, {} coordinators, {groups} groups",
        report.name,
        report.owners.len(),
        report.coordinators.len(),
    );
    let _ = writeln!(
        out,
        "\n{:<24} {:<24} {:>6} {:>7}",
        "COORDINATOR", "ADDRESS", "SLOTS", "GROUPS"
    );
    for (id, addr) in &report.coordinators {
        let owned: Vec<u32> = report
            .owners
            .iter()
            .filter(|(_, o)| o.id == *id)
            .map(|(s, _)| *s)
            .collect();
        let groups: u64 = owned.iter().filter_map(|s| report.groups.get(s)).sum();
        let _ = writeln!(out, "{id:<24} {addr:<24} {:>6} {groups:>7}", owned.len());
    }
    let _ = writeln!(
        out,
        "\n{:>5} {:<24} {:>10} {:>7} {:>8}",
        "SLOT", "OWNER", "TOKEN", "GROUPS", "LOADED"
    );
    for slot in 0..slots {
        let groups = report.groups.get(&slot).copied().unwrap_or(0);
        match report.owners.get(&slot) {
            Some(o) => {
                let loaded = o
                    .loaded_ms
                    .map_or_else(|| "loading".to_owned(), |ms| format!("{ms}ms"));
                let _ = writeln!(
                    out,
                    "{slot:>5} {:<24} {:>10} {groups:>7} {loaded:>8}",
                    o.id, o.token
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "{slot:>5} {:<24} {:>10} {groups:>7} {:>8}",
                    "(none)", "-", "-"
                );
            }
        }
    }
    out
}
