//! Holds `N` members of one group through the client crate and acknowledges every
//! revocation, until killed: the Rust side of `python/bench/heartbeats.py`, which
//! measures what the same members cost from Python.
//!
//! `hold-members ADDR GROUP MEMBERS SESSION_TIMEOUT_MS`; prints `joined` once every
//! member has joined.

use std::time::Duration;

use rollcall_client::{Client, ClientConfig, Event, MemberConfig};

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, group, members, session_ms] = args.as_slice() else {
        return Err("usage: hold-members ADDR GROUP MEMBERS SESSION_TIMEOUT_MS".into());
    };
    let members: u32 = members.parse()?;
    let session = Duration::from_millis(session_ms.parse()?);
    let client = Client::connect(addr, ClientConfig::default()).await?;
    let mut tasks = Vec::new();
    for _ in 0..members {
        let config =
            MemberConfig::new(group.as_str(), [("t", members)]).with_session_timeout(session);
        let member = client.join(config).await?;
        tasks.push(tokio::spawn(async move {
            while let Some(event) = member.next_event().await {
                if let Event::RevokeRequested { partitions, .. } = event {
                    let _ = member.ack_revocation(partitions);
                }
            }
        }));
    }
    println!("joined");
    for task in tasks {
        task.await?;
    }
    Ok(())
}
