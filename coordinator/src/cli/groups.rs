//! `rollcall groups` in a cluster: every coordinator serves only its own groups, so the
//! command asks the coordinator it reaches for the others (ListCoordinators), lists
//! the groups of each (ListGroups, a page at a time), and merges the lists. A
//! coordinator that cannot be asked is named (on standard error, and in `--json`'s
//! `unreachable`) and makes the command exit 1, after what the others gave is printed.
//! A coordinator that does not know ListCoordinators (earlier versions, or a single
//! coordinator of one) is listed alone, as before.

use std::collections::BTreeMap;

use futures_util::future::join_all;
use rollcall_protocol::{CoordinatorListing, GroupListing, ListCoordinatorsRequest};

use super::*;

/// A coordinator whose groups could not be listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unreached {
    pub(super) id: String,
    pub(super) addr: String,
    pub(super) error: String,
}

/// Every group of the cluster the coordinator of `command` belongs to (just its own if
/// it is a single coordinator), and the coordinators that could not be asked. Fails
/// only if the coordinator asked first fails.
pub(super) async fn list_everywhere(
    command: &AdminCommand,
) -> Result<(Response, Vec<Unreached>), AdminError> {
    let args = command.args();
    let (first, others) = within_timeout(args, async {
        let mut conn = connect(args).await?;
        let first = command.ask(&mut conn).await?;
        let lists = conn
            .versions()
            .versions
            .iter()
            .any(|r| r.api_key == ApiKey::ListCoordinators as u16);
        let others = if lists {
            match conn
                .request(Request::ListCoordinators(ListCoordinatorsRequest))
                .await?
            {
                Response::ListCoordinators(r) => r.coordinators,
                _ => Vec::new(),
            }
        } else {
            Vec::new()
        };
        Ok((first, others))
    })
    .await?;
    let Response::ListGroups(first) = first else {
        return Ok((first, Vec::new()));
    };
    let answers = join_all(others.iter().map(|other| ask_one(command, other))).await;
    let mut lists = vec![first];
    let mut unreached = Vec::new();
    for (other, answer) in others.into_iter().zip(answers) {
        match answer {
            Ok(list) => lists.push(list),
            Err(error) => unreached.push(Unreached {
                id: other.id,
                addr: other.addr,
                error,
            }),
        }
    }
    Ok((Response::ListGroups(merge(lists)), unreached))
}

/// The groups of the coordinator `other`, within `--timeout`.
async fn ask_one(
    command: &AdminCommand,
    other: &CoordinatorListing,
) -> Result<ListGroupsResponse, String> {
    let args = command.args();
    let exchange = async {
        let mut conn = connect_to(args, Some(&other.addr)).await?;
        command.ask(&mut conn).await
    };
    match tokio::time::timeout(args.timeout(), exchange).await {
        Err(_) => Err(format!(
            "no answer within {}",
            format_duration(args.timeout())
        )),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(Response::ListGroups(list))) => Ok(list),
        Ok(Ok(Response::Error(e))) => Err(format!("refused: {} ({})", e.message, e.code)),
        Ok(Ok(other)) => Err(format!("unexpected answer: {other:?}")),
    }
}

/// The lists of several coordinators as one, by group id. A group listed by two (it
/// moved between the requests) is listed once, as the first list that has it gives it.
pub(super) fn merge(lists: Vec<ListGroupsResponse>) -> ListGroupsResponse {
    let mut groups: BTreeMap<String, GroupListing> = BTreeMap::new();
    for list in lists {
        for g in list.groups {
            groups.entry(g.group.clone()).or_insert(g);
        }
    }
    ListGroupsResponse {
        groups: groups.into_values().collect(),
        more: None,
    }
}

#[cfg(test)]
mod tests {
    use rollcall_protocol::GroupState;

    use super::*;

    fn listing(group: &str, generation: u32) -> GroupListing {
        GroupListing {
            group: group.into(),
            state: GroupState::Stable,
            generation,
            members: 1,
        }
    }

    #[test]
    fn lists_merge_by_group_id_and_the_first_listing_wins() {
        let a = ListGroupsResponse {
            groups: vec![listing("b", 1), listing("d", 4)],
            more: Some(false),
        };
        let b = ListGroupsResponse {
            groups: vec![listing("a", 2), listing("b", 9), listing("c", 3)],
            more: None,
        };
        let merged = merge(vec![a, b]);
        let got: Vec<(&str, u32)> = merged
            .groups
            .iter()
            .map(|g| (g.group.as_str(), g.generation))
            .collect();
        assert_eq!(got, [("a", 2), ("b", 1), ("c", 3), ("d", 4)]);
        assert_eq!(merged.more, None);
    }
}
