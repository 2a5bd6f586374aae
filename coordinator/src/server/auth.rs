//! Who may do what: the auth file's users (SCRAM credentials) and access rules, loaded
//! at start and reloaded when the file changes, and the per-connection state that
//! authenticates a connection and checks each request against the rules.
//!
//! The file is TOML:
//!
//! ```toml
//! [users]
//! # `rollcall hash-password` prints a credential: the password itself is never stored.
//! billing-worker = "SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>"
//!
//! [[acl]]
//! principals = ["billing-worker"]      # "*": any authenticated principal
//! groups = ["billing"]                 # group names, exactly
//! group-prefixes = ["billing-"]        # or every group whose name starts so ("": all)
//! operations = ["join", "commit", "fetch"]
//! ```
//!
//! Once a file is given, every connection must authenticate (SCRAM, or a verified
//! client certificate whose name is the principal) and everything not allowed by a rule
//! is denied. Operations: `join` (Join, Heartbeat(s), Leave, Relinquish), `commit` (a
//! member's CommitOffsets), `fetch` (FetchOffsets), `describe` (DescribeGroup,
//! TraceGroup, reading a group's settings, and seeing the group in ListGroups), `admin`
//! (an administrative CommitOffsets, with no member; Drain; changing a group's settings
//! with AlterGroupConfig), or `all`. A member may drain itself, on the connection it
//! joined over, with `join` alone.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use rollcall_protocol::scram::{self, StoredCredential};
use rollcall_protocol::{CommitOffsetsRequest, Request};
use serde::Deserialize;
use tracing::{error, info};

/// What a rule allows, on the groups it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    /// Be a member: Join, Heartbeat(s), Leave, Relinquish.
    Join,
    /// A member's offset commit.
    Commit,
    /// Read committed offsets.
    Fetch,
    /// DescribeGroup, TraceGroup, and seeing the group in ListGroups.
    Describe,
    /// An administrative offset commit (no member).
    Admin,
}

impl Operation {
    const ALL: [Self; 5] = [
        Self::Join,
        Self::Commit,
        Self::Fetch,
        Self::Describe,
        Self::Admin,
    ];

    fn bit(self) -> u8 {
        1 << self as u8
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Join => "join",
            Self::Commit => "commit",
            Self::Fetch => "fetch",
            Self::Describe => "describe",
            Self::Admin => "admin",
        }
    }

    /// The operation a request (other than Heartbeats, ListGroups and the connection's
    /// own ApiVersions and Authenticate) needs on its group.
    pub(crate) fn of(request: &Request) -> Option<Self> {
        Some(match request {
            Request::Join(_)
            | Request::Heartbeat(_)
            | Request::Heartbeats(_)
            | Request::Leave(_)
            | Request::Relinquish(_) => Self::Join,
            Request::CommitOffsets(CommitOffsetsRequest {
                member_id: Some(_), ..
            }) => Self::Commit,
            Request::CommitOffsets(_) => Self::Admin,
            Request::FetchOffsets(_) => Self::Fetch,
            Request::DescribeGroup(_) | Request::TraceGroup(_) | Request::ListGroups(_) => {
                Self::Describe
            }
            // Reading a group's settings is describing it; changing them, or draining,
            // is administering it (a member's drain of itself is let through with `join`,
            // and the core checks it is the member's own connection).
            Request::AlterGroupConfig(r) if r.set_mask() == 0 => Self::Describe,
            Request::Drain(_) | Request::AlterGroupConfig(_) => Self::Admin,
            // Say where groups are served (or which coordinators there are), not
            // whether a group exists: any authenticated principal may ask.
            Request::ApiVersions(_)
            | Request::Authenticate(_)
            | Request::FindCoordinator(_)
            | Request::ListCoordinators(_) => return None,
        })
    }
}

/// The auth file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileText {
    #[serde(default)]
    users: HashMap<String, String>,
    #[serde(default)]
    acl: Vec<RuleText>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RuleText {
    principals: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    group_prefixes: Vec<String>,
    operations: Vec<String>,
}

/// One access rule.
#[derive(Debug)]
struct Rule {
    /// `None`: any authenticated principal.
    principals: Option<HashSet<String>>,
    groups: HashSet<String>,
    prefixes: Vec<String>,
    operations: u8,
}

impl Rule {
    fn covers(&self, principal: &str, group: &str) -> bool {
        self.principals
            .as_ref()
            .is_none_or(|p| p.contains(principal))
            && (self.groups.contains(group) || self.prefixes.iter().any(|p| group.starts_with(p)))
    }
}

/// Users and rules, as loaded from the auth file.
#[derive(Debug, Default)]
pub(crate) struct AuthRules {
    users: HashMap<String, StoredCredential>,
    rules: Vec<Rule>,
}

/// Why an auth file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("auth file {path}: {message}")]
pub struct AuthFileError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl AuthRules {
    /// Reads and checks the file at `path`; returns its text too.
    fn load(path: &Path) -> Result<(Self, String), AuthFileError> {
        let fail = |message: String| AuthFileError {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let rules = Self::parse(&text).map_err(fail)?;
        Ok((rules, text))
    }

    fn parse(text: &str) -> Result<Self, String> {
        let file: FileText = toml::from_str(text).map_err(|e| match e.span() {
            Some(span) => {
                let start = span.start.min(text.len());
                let line = text[..start].matches('\n').count();
                let shown = text.lines().nth(line).unwrap_or_default().trim();
                format!("line {} (`{shown}`): {}", line + 1, e.message())
            }
            None => e.message().to_owned(),
        })?;
        let mut users = HashMap::new();
        for (name, credential) in file.users {
            let credential = credential.parse::<StoredCredential>().map_err(|e| {
                format!("user {name:?}: {e} (make one with `rollcall hash-password`)")
            })?;
            users.insert(name, credential);
        }
        let mut rules = Vec::new();
        for (i, rule) in file.acl.into_iter().enumerate() {
            let at = |m: String| format!("acl rule {}: {m}", i + 1);
            if rule.principals.is_empty() {
                return Err(at(
                    "`principals` is empty (\"*\" means any principal)".into()
                ));
            }
            if rule.groups.is_empty() && rule.group_prefixes.is_empty() {
                return Err(at(
                    "names no `groups` and no `group-prefixes` (\"\" as a prefix means every group)"
                        .into(),
                ));
            }
            let mut operations = 0;
            for op in &rule.operations {
                operations |= match op.as_str() {
                    "all" => Operation::ALL.iter().fold(0, |m, o| m | o.bit()),
                    name => Operation::ALL
                        .iter()
                        .find(|o| o.as_str() == name)
                        .map(|o| o.bit())
                        .ok_or_else(|| {
                            at(format!(
                                "unknown operation {name:?} (join, commit, fetch, describe, admin, all)"
                            ))
                        })?,
                };
            }
            if operations == 0 {
                return Err(at("`operations` is empty".into()));
            }
            let principals = if rule.principals.iter().any(|p| p == "*") {
                None
            } else {
                Some(rule.principals.into_iter().collect())
            };
            rules.push(Rule {
                principals,
                groups: rule.groups.into_iter().collect(),
                prefixes: rule.group_prefixes,
                operations,
            });
        }
        Ok(Self { users, rules })
    }

    /// Whether `principal` may do `operation` to `group`.
    #[cfg(test)]
    fn allows(&self, principal: &str, operation: Operation, group: &str) -> bool {
        self.allowed(principal, group) & operation.bit() != 0
    }

    /// Every operation `principal` may do to `group`, as bits.
    fn allowed(&self, principal: &str, group: &str) -> u8 {
        self.rules
            .iter()
            .filter(|r| r.covers(principal, group))
            .fold(0, |m, r| m | r.operations)
    }

    fn credential(&self, user: &str) -> Option<StoredCredential> {
        self.users.get(user).cloned()
    }
}

/// The auth file in force, shared by every connection; swapped whole on reload.
#[derive(Debug)]
pub(crate) struct Security {
    path: PathBuf,
    /// The rules in force and the text they were read from.
    current: RwLock<(Arc<AuthRules>, String)>,
    /// Bumped on every reload, so connections refresh their copy without a lock.
    generation: AtomicU64,
    /// Makes an unknown user's fake salt (the same for a name, every time).
    secret: [u8; 32],
}

impl Security {
    /// Loads the file at `path`; fails if it cannot be used.
    pub(crate) fn load(path: &Path) -> Result<Self, AuthFileError> {
        let (rules, text) = AuthRules::load(path)?;
        // rand's thread generator is a CSPRNG seeded from the operating system.
        let secret: [u8; 32] = rand::random();
        Ok(Self {
            path: path.to_owned(),
            current: RwLock::new((Arc::new(rules), text)),
            generation: AtomicU64::new(0),
            secret,
        })
    }

    fn snapshot(&self) -> (Arc<AuthRules>, u64) {
        let generation = self.generation.load(Ordering::Acquire);
        (self.current.read().0.clone(), generation)
    }

    /// Loads the file again if its text changed since it was last loaded (the text,
    /// not the modification time, which two quick writes can share). A file that
    /// cannot be used changes nothing.
    pub(crate) fn reload_if_changed(&self) -> Result<bool, AuthFileError> {
        let text = std::fs::read_to_string(&self.path).map_err(|e| AuthFileError {
            path: self.path.display().to_string(),
            message: e.to_string(),
        })?;
        if text == self.current.read().1 {
            return Ok(false);
        }
        let (rules, text) = AuthRules::load(&self.path)?;
        *self.current.write() = (Arc::new(rules), text);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(true)
    }

    /// Reloads the file whenever it changes (checked every `interval`, and on SIGHUP)
    /// until `stop`.
    pub(crate) async fn watch(
        self: Arc<Self>,
        interval: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) {
        #[cfg(unix)]
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            #[cfg(unix)]
            let hup = async {
                match hangup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let hup = std::future::pending::<()>();
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
                () = hup => {}
            }
            match self.reload_if_changed() {
                Ok(true) => info!(path = %self.path.display(), "auth file reloaded"),
                Ok(false) => {}
                Err(e) => error!(error = %e, "auth file not reloaded; the rules in force stay"),
            }
        }
    }
}

/// One connection's authentication, and a cache of its last access decision.
#[derive(Debug)]
pub(crate) struct ConnAuth {
    security: Arc<Security>,
    rules: Arc<AuthRules>,
    generation: u64,
    principal: Option<String>,
    /// The principal came from SCRAM (and goes if its user leaves the file).
    by_password: bool,
    exchange: Option<scram::ScramServerFinal>,
    /// The last group checked and the operations allowed on it.
    last: Option<(String, u8)>,
}

/// What an Authenticate step came to.
#[derive(Debug)]
pub(crate) enum Step {
    /// Send this server message; the exchange goes on.
    Continue(String),
    /// Authenticated as this principal; send this server message.
    Done { principal: String, payload: String },
    /// Refused: answer `authentication_failed` with this message and close.
    Failed(String),
    /// Already authenticated: answer `invalid_request`.
    Already(String),
}

impl ConnAuth {
    /// A connection's state; `certificate` is the name a verified client certificate
    /// gave it, which is its principal.
    pub(crate) fn new(security: Arc<Security>, certificate: Option<String>) -> Self {
        let (rules, generation) = security.snapshot();
        Self {
            security,
            rules,
            generation,
            principal: certificate,
            by_password: false,
            exchange: None,
            last: None,
        }
    }

    /// Takes the rules in force if they changed; a user removed from the file loses its
    /// authentication.
    fn refresh(&mut self) {
        if self.security.generation.load(Ordering::Acquire) == self.generation {
            return;
        }
        let (rules, generation) = self.security.snapshot();
        self.rules = rules;
        self.generation = generation;
        self.last = None;
        if self.by_password {
            if let Some(p) = &self.principal {
                if !self.rules.users.contains_key(p) {
                    self.principal = None;
                    self.by_password = false;
                }
            }
        }
    }

    /// One Authenticate step.
    pub(crate) fn step(&mut self, mechanism: &str, payload: &str) -> Step {
        self.refresh();
        if let Some(p) = &self.principal {
            return Step::Already(format!("this connection is already authenticated as {p:?}"));
        }
        if mechanism != scram::MECHANISM {
            self.exchange = None;
            return Step::Failed(format!(
                "unsupported mechanism {mechanism:?}; this coordinator supports {}",
                scram::MECHANISM
            ));
        }
        match self.exchange.take() {
            None => {
                let rules = &self.rules;
                match scram::server_first(payload, |u| rules.credential(u), &self.security.secret) {
                    Ok((exchange, server_first)) => {
                        self.exchange = Some(exchange);
                        Step::Continue(server_first)
                    }
                    Err(e) => Step::Failed(e.to_string()),
                }
            }
            Some(exchange) => match exchange.finish(payload) {
                Ok((user, server_final)) => {
                    self.principal = Some(user.clone());
                    self.by_password = true;
                    Step::Done {
                        principal: user,
                        payload: server_final,
                    }
                }
                Err(e) => Step::Failed(e.to_string()),
            },
        }
    }

    /// Whether the connection may do `operation` to `group`. `false` before it has
    /// authenticated.
    pub(crate) fn allows(&mut self, operation: Operation, group: &str) -> bool {
        self.refresh();
        let Some(principal) = &self.principal else {
            return false;
        };
        if let Some((last, allowed)) = &self.last {
            if last == group {
                return allowed & operation.bit() != 0;
            }
        }
        let allowed = self.rules.allowed(principal, group);
        self.last = Some((group.to_owned(), allowed));
        allowed & operation.bit() != 0
    }

    /// The connection's principal, if it has authenticated (as of the last check).
    pub(crate) fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// Whether the connection has a principal (refreshing first).
    pub(crate) fn is_authenticated(&mut self) -> bool {
        self.refresh();
        self.principal.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> AuthRules {
        AuthRules::parse(text).unwrap()
    }

    #[test]
    fn rules_allow_what_they_name_and_nothing_else() {
        let r = rules(
            r#"
            [[acl]]
            principals = ["alice"]
            groups = ["orders"]
            group-prefixes = ["orders-"]
            operations = ["join", "commit"]

            [[acl]]
            principals = ["*"]
            groups = ["public"]
            operations = ["describe"]

            [[acl]]
            principals = ["ops"]
            group-prefixes = [""]
            operations = ["all"]
            "#,
        );
        assert!(r.allows("alice", Operation::Join, "orders"));
        assert!(r.allows("alice", Operation::Commit, "orders-eu"));
        assert!(!r.allows("alice", Operation::Fetch, "orders"));
        assert!(!r.allows("alice", Operation::Join, "order"));
        assert!(!r.allows("alice", Operation::Join, "billing"));
        assert!(!r.allows("bob", Operation::Join, "orders"));
        assert!(r.allows("bob", Operation::Describe, "public"));
        assert!(!r.allows("bob", Operation::Describe, "publicity"));
        for op in Operation::ALL {
            assert!(r.allows("ops", op, "anything"));
        }
        assert!(!AuthRules::default().allows("ops", Operation::Join, "x"));
    }

    #[test]
    fn a_bad_file_is_refused_with_the_reason() {
        for (text, reason) in [
            ("[users]\nalice = \"hunter2\"", "user \"alice\""),
            (
                "[[acl]]\nprincipals = []\ngroups = [\"g\"]\noperations = [\"join\"]",
                "principals",
            ),
            (
                "[[acl]]\nprincipals = [\"a\"]\noperations = [\"join\"]",
                "group-prefixes",
            ),
            (
                "[[acl]]\nprincipals = [\"a\"]\ngroups = [\"g\"]\noperations = [\"jump\"]",
                "jump",
            ),
            (
                "[[acl]]\nprincipals = [\"a\"]\ngroups = [\"g\"]\noperations = []",
                "operations",
            ),
            ("[[acl]]\nprincipal = [\"a\"]", "principal"),
            ("users = 3", "users"),
        ] {
            let e = AuthRules::parse(text).unwrap_err();
            assert!(e.contains(reason), "{text:?}: {e}");
        }
    }

    fn file(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("auth.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rollcall-auth-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn login(auth: &mut ConnAuth, user: &str, password: &str) -> Result<String, String> {
        let client = scram::ScramClient::new(user, password).unwrap();
        let Step::Continue(first) = auth.step(scram::MECHANISM, &client.client_first()) else {
            return Err("first step".into());
        };
        let (client, last) = client.handle_server_first(&first).unwrap();
        match auth.step(scram::MECHANISM, &last) {
            Step::Done { principal, payload } => {
                client.verify(&payload).unwrap();
                Ok(principal)
            }
            Step::Failed(m) => Err(m),
            other => Err(format!("{other:?}")),
        }
    }

    #[test]
    fn a_connection_authenticates_once_and_loses_it_when_its_user_is_removed() {
        let dir = scratch("remove");
        let credential = StoredCredential::derive("pw", b"0123456789abcdef", 4096).unwrap();
        let text = format!(
            "[users]\nalice = \"{credential}\"\n[[acl]]\nprincipals = [\"alice\"]\ngroups = [\"g\"]\noperations = [\"join\"]\n"
        );
        let path = file(&dir, &text);
        let security = Arc::new(Security::load(&path).unwrap());
        let mut auth = ConnAuth::new(security.clone(), None);
        assert!(!auth.allows(Operation::Join, "g"));
        assert!(login(&mut auth, "alice", "nope").is_err());
        let mut auth = ConnAuth::new(security.clone(), None);
        assert_eq!(login(&mut auth, "alice", "pw").unwrap(), "alice");
        assert!(auth.allows(Operation::Join, "g"));
        assert!(matches!(
            auth.step(scram::MECHANISM, "n,,n=alice,r=x"),
            Step::Already(_)
        ));

        // The rule goes: denied at once, though the answer was cached.
        std::fs::write(&path, format!("[users]\nalice = \"{credential}\"\n")).unwrap();
        assert!(security.reload_if_changed().unwrap());
        assert!(!auth.allows(Operation::Join, "g"));
        // The user goes: the connection is no longer authenticated.
        std::fs::write(&path, "").unwrap();
        assert!(security.reload_if_changed().unwrap());
        assert!(!auth.is_authenticated());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_certificate_name_is_the_principal_and_a_bad_reload_keeps_the_rules() {
        let dir = scratch("cert");
        let path = file(
            &dir,
            "[[acl]]\nprincipals = [\"worker-7\"]\ngroups = [\"g\"]\noperations = [\"fetch\"]\n",
        );
        let security = Arc::new(Security::load(&path).unwrap());
        let mut auth = ConnAuth::new(security.clone(), Some("worker-7".into()));
        assert!(auth.allows(Operation::Fetch, "g"));
        std::fs::write(&path, "[[acl]]\nnonsense = 1\n").unwrap();
        assert!(security.reload_if_changed().is_err());
        assert!(auth.allows(Operation::Fetch, "g"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_unknown_mechanism_fails() {
        let dir = scratch("mech");
        let path = file(&dir, "");
        let security = Arc::new(Security::load(&path).unwrap());
        let mut auth = ConnAuth::new(security, None);
        assert!(
            matches!(auth.step("PLAIN", "\0a\0b"), Step::Failed(m) if m.contains("SCRAM-SHA-256"))
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
