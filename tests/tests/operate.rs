//! The operator's commands against a real `rollcall serve` process: `drain` and
//! `undrain` by member and by label move a live member's partitions off it and back
//! while it stays in the group, `config` shows and changes a group's settings (and
//! refuses bad values with one clear line), `describe` shows all of it, and the
//! drained state and settings survive a restart of the process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rollcall_client::{Client, ClientConfig, Event, Member, MemberConfig};
use rollcall_tests::{bounded, run_cli, serve_process, CliOutput, TempDir};
use tokio::task::JoinHandle;

const BIN: &str = env!("CARGO_BIN_EXE_rollcall-e2e");

async fn rollcall(args: &[&str]) -> CliOutput {
    run_cli(BIN, args, None).await
}

/// A member that acknowledges every revocation at once.
struct Worker {
    member: Arc<Member>,
    _client: Client,
    task: JoinHandle<()>,
}

impl Worker {
    async fn start(addr: SocketAddr, label: &str) -> Self {
        let client = bounded("connect", Client::connect(addr, ClientConfig::default()))
            .await
            .expect("connects");
        let config = MemberConfig::new("g-ops", [("t", 6)])
            .with_session_timeout(Duration::from_secs(3))
            .with_label(label);
        let member = Arc::new(bounded("join", client.join(config)).await.expect("joins"));
        let task = tokio::spawn({
            let member = member.clone();
            async move {
                while let Some(event) = member.next_event().await {
                    if let Event::RevokeRequested { partitions, .. } = event {
                        let _ = member.ack_revocation(partitions);
                    }
                }
            }
        });
        Self {
            member,
            _client: client,
            task,
        }
    }

    fn id(&self) -> String {
        self.member.member_id().expect("a member")
    }

    fn owned(&self) -> usize {
        self.member.assignment().partitions.len()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits until the workers own `counts` partitions, in order.
async fn wait_owned(workers: &[&Worker], counts: &[usize]) {
    bounded("assignment", async {
        loop {
            let got: Vec<usize> = workers.iter().map(|w| w.owned()).collect();
            if got == counts {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

fn sigterm(child: &tokio::process::Child) {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_undrain_and_config_steer_a_live_group_and_survive_a_restart() {
    let dir = TempDir::new("operate");
    let (mut child, addr) = serve_process(BIN, dir.path()).await;
    let at = addr.to_string();
    let a = Worker::start(addr, "host-a").await;
    let b = Worker::start(addr, "host-b").await;
    wait_owned(&[&a, &b], &[3, 3]).await;

    // By member id: a keeps its membership, its partitions go to b.
    let out = rollcall(&["drain", "g-ops", &a.id(), "--addr", &at]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("drained member {}", a.id())),
        "{}",
        out.stdout
    );
    wait_owned(&[&a, &b], &[0, 6]).await;
    let out = rollcall(&["describe", "g-ops", "--addr", &at]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with(&a.id()) && l.contains("host-a"))
        .unwrap_or_else(|| panic!("no placement row for a in\n{}", out.stdout));
    assert!(row.contains("yes"), "{row}");
    assert!(out.stdout.contains("LABEL"), "{}", out.stdout);
    let out = rollcall(&["undrain", "g-ops", &a.id(), "--addr", &at]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    wait_owned(&[&a, &b], &[3, 3]).await;

    // By label, in JSON.
    let out = rollcall(&[
        "drain", "g-ops", "--label", "host-b", "--addr", &at, "--json",
    ])
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["members"], serde_json::json!([b.id()]));
    assert_eq!(json["label"], "host-b");
    wait_owned(&[&a, &b], &[6, 0]).await;

    // Settings: shown, changed, refused.
    let out = rollcall(&["config", "g-ops", "--addr", &at]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("departure delay          off"),
        "{}",
        out.stdout
    );
    let out = rollcall(&[
        "config",
        "g-ops",
        "--addr",
        &at,
        "--departure-delay",
        "30s",
        "--max-revoking",
        "2",
        "--max-revoking-per-member",
        "1",
        "--balance",
        "load",
        "--churn-budget",
        "12.5%",
        "--imbalance",
        "20%",
    ])
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for said in [
        "departure delay          30s",
        "max revoking             2",
        "max revoking per member  1",
        "balance                  load",
        "churn budget             12.5%",
        "imbalance                20%",
    ] {
        assert!(out.stdout.contains(said), "{said:?} not in\n{}", out.stdout);
    }
    for (flag, value, says) in [
        ("--churn-budget", "150%", "at most 100%"),
        ("--imbalance", "ten", "expected a share such as 10%"),
        (
            "--departure-delay",
            "2h",
            "longer than the longest departure delay, 1h",
        ),
        ("--departure-delay", "30", "expected a number and a unit"),
        ("--balance", "heavy", "expected count, load"),
        (
            "--max-revoking",
            "many",
            "invalid value 'many' for '--max-revoking <N>'",
        ),
    ] {
        let out = rollcall(&["config", "g-ops", "--addr", &at, flag, value]).await;
        assert_eq!(out.code, Some(2), "{flag} {value}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{flag} {value}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    }
    let out = rollcall(&["drain", "g-ops", "--addr", &at]).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("<MEMBER>"), "{}", out.stderr);
    let out = rollcall(&["undrain", "g-ops", "nobody", "--addr", &at]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("unknown_member"), "{}", out.stderr);

    let out = rollcall(&["describe", "g-ops", "--addr", &at]).await;
    assert!(
        out.stdout
            .contains("settings:   departure delay 30s, max revoking 2"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("drained:    label host-b"),
        "{}",
        out.stdout
    );

    // A restart keeps the settings and the drained label.
    sigterm(&child);
    assert_eq!(bounded("exit", child.wait()).await.unwrap().code(), Some(0));
    drop((a, b));
    let (restarted, addr) = serve_process(BIN, dir.path()).await;
    child = restarted;
    let at = addr.to_string();
    let out = rollcall(&["describe", "g-ops", "--addr", &at, "--json"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["config"]["max_revoking"], 2);
    assert_eq!(json["config"]["balance"], "load");
    assert_eq!(json["drained_labels"], serde_json::json!(["host-b"]));
    // A member joining with the drained label is drained at once.
    let c = Worker::start(addr, "host-b").await;
    let d = Worker::start(addr, "host-c").await;
    wait_owned(&[&c, &d], &[0, 6]).await;
    sigterm(&child);
    assert_eq!(bounded("exit", child.wait()).await.unwrap().code(), Some(0));
}
