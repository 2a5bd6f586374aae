//! How a scenario runs: the [`Scenario`] trait every scenario implements, the [`Rig`]
//! that starts the coordinator and the load generator for it, brings the members up
//! and stops everything again, and [`run`], which turns what a scenario measured into
//! its report. A scenario says only what is particular to it: its options, its
//! members, what it does once they are up, its figures and its checks.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::common::{
    command_line, member_specs, sleep_or, Check, CommonArgs, GeneratorInfo, Machine, Progress,
    Report,
};
use crate::driver::{Driver, Load, Obs, PartitionLoads, Plan, Shared};
use crate::target::{Target, TargetInfo};
use crate::tracker::Tracker;
use rollcall_protocol::JoinPlacement;

/// Time every run is allowed beyond its setup timeout, duration and own extra time.
pub(crate) const MARGIN: Duration = Duration::from_secs(90);

/// Time the driver is given to close its connections at the end of a run.
const DRIVER_STOP: Duration = Duration::from_secs(10);

/// What the harness reads of a scenario's options: its time bounds and where its
/// report goes. [`CommonArgs`] has them, and so does a scenario with options of its own.
pub(crate) trait RunOptions {
    /// Time allowed to set everything up before giving up.
    fn setup_timeout(&self) -> Duration;
    /// The measured duration, when given.
    fn duration(&self) -> Option<Duration>;
    /// Where the report is also written as JSON, when asked.
    fn json(&self) -> Option<&PathBuf>;
}

impl RunOptions for CommonArgs {
    fn setup_timeout(&self) -> Duration {
        self.setup_timeout
    }

    fn duration(&self) -> Option<Duration> {
        self.duration
    }

    fn json(&self) -> Option<&PathBuf> {
        self.json.as_ref()
    }
}

/// One scenario: a subcommand's options, and how to run it once.
pub(crate) trait Scenario {
    /// The name in the report's title and its JSON `scenario`.
    const NAME: &'static str;
    /// What the scenario measured: the report's JSON `figures`.
    type Figures: Serialize;

    /// The options the harness reads (most scenarios: their [`CommonArgs`]).
    fn options(&self) -> &dyn RunOptions;

    /// Time the scenario may take besides the setup timeout, the measured duration
    /// (60 s when not given) and [`MARGIN`].
    fn extra_time(&self) -> Duration;

    /// The longest the scenario may take, all phases included.
    fn hard_cap(&self) -> Duration {
        let options = self.options();
        options.setup_timeout()
            + options.duration().unwrap_or(Duration::from_secs(60))
            + self.extra_time()
            + MARGIN
    }

    /// Runs the scenario once, every coordinator and member it started stopped again
    /// by the time it returns.
    async fn run(&self) -> Result<Outcome<Self::Figures>, String>;
}

/// What a run produced: everything in its report but the scenario's name, the
/// command line and the machine.
#[derive(Debug)]
pub(crate) struct Outcome<F> {
    pub(crate) coordinator: Option<TargetInfo>,
    pub(crate) generator: Option<GeneratorInfo>,
    pub(crate) figures: F,
    /// The report's body: the scenario's own tables.
    pub(crate) text: String,
    pub(crate) checks: Vec<Check>,
    pub(crate) notes: Vec<String>,
}

/// Runs `scenario`, prints its report and writes its JSON when asked. Returns whether
/// every check was met.
pub(crate) async fn run<S: Scenario>(scenario: &S) -> Result<bool, String> {
    let mut machine = Machine::now();
    let outcome = scenario.run().await?;
    machine.finish();
    let report = Report {
        scenario: S::NAME,
        command: command_line(),
        machine,
        coordinator: outcome.coordinator,
        generator: outcome.generator,
        text: outcome.text,
        checks: outcome.checks,
        figures: outcome.figures,
        notes: outcome.notes,
    };
    report.emit(scenario.options().json())
}

/// The members a scenario speaks for and what they do: what [`Rig::start`] needs.
/// [`Setup::new`] gives the usual choices; a scenario changes the fields it needs
/// otherwise (`Setup { observe: true, ..Setup::new(..) }`).
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub(crate) members: usize,
    /// Member `i` joins group `g{i % groups}`.
    pub(crate) groups: usize,
    /// Partitions of each group's one topic.
    pub(crate) partitions: u32,
    pub(crate) session_timeout: Duration,
    /// The progress timeout the members ask for.
    pub(crate) progress_timeout: Duration,
    /// The lease timeout the members ask for (`--lease-timeout`); `None`: the session
    /// timeout.
    pub(crate) lease_timeout: Option<Duration>,
    /// The failure detector the members ask for (`--detector`); `None`: the
    /// coordinator's.
    pub(crate) detector: Option<String>,
    /// Members carry instance ids (static membership).
    pub(crate) static_ids: bool,
    pub(crate) per_conn: usize,
    pub(crate) load: Load,
    /// Joins outstanding at once.
    pub(crate) join_concurrency: usize,
    /// Join as soon as connected; otherwise when [`Driver::release_joins`] says so.
    pub(crate) auto_join: bool,
    /// Deliver every push and join outcome (see [`Rig::observations`]).
    pub(crate) observe: bool,
    /// Members confirm their expulsions with a Relinquish (see [`Plan::relinquish`]).
    pub(crate) relinquish: bool,
    /// One Heartbeats request per connection per round (`--batch-heartbeats`).
    pub(crate) batch_heartbeats: bool,
    /// How long members take to acknowledge a revocation (zero: at once).
    pub(crate) ack_delay: Duration,
    /// Loads the members report with their heartbeats.
    pub(crate) loads: Option<Arc<PartitionLoads>>,
    /// Member `i`'s placement (Join version 3) is `placements[i]`; empty: none.
    pub(crate) placements: Vec<Option<Box<JoinPlacement>>>,
    /// Members from this index on join only when [`Driver::release_late_joins`] says
    /// so (they must start a connection of their own).
    pub(crate) late_from: usize,
}

impl Setup {
    /// `members` in `groups` of `partitions` each, with `session_timeout`, doing
    /// `load`: members joining as soon as connected (`--join-concurrency` at once), as
    /// many per connection as the options say, a progress timeout never reached, the
    /// lease timeout of `--lease-timeout`, no instance ids, no observations and no
    /// Relinquish.
    pub(crate) fn new(
        common: &CommonArgs,
        members: usize,
        groups: usize,
        partitions: u32,
        session_timeout: Duration,
        load: Load,
    ) -> Self {
        Self {
            members,
            groups,
            partitions,
            session_timeout,
            progress_timeout: Duration::from_secs(3600),
            lease_timeout: common.lease_timeout,
            detector: common.detector.clone(),
            static_ids: false,
            per_conn: common.per_conn(members),
            load,
            join_concurrency: common.join_concurrency,
            auto_join: true,
            observe: false,
            relinquish: false,
            batch_heartbeats: common.batch_heartbeats,
            ack_delay: Duration::ZERO,
            loads: None,
            placements: Vec::new(),
            late_from: usize::MAX,
        }
    }

    fn plan(&self) -> Plan {
        let mut members = member_specs(
            self.members,
            self.groups,
            self.partitions,
            self.session_timeout,
            self.progress_timeout,
            self.lease_timeout,
            self.static_ids,
        );
        for (i, m) in members.iter_mut().enumerate() {
            m.detector.clone_from(&self.detector);
            m.placement = self.placements.get(i).cloned().flatten();
            m.late = i >= self.late_from;
        }
        Plan {
            members,
            per_conn: self.per_conn,
            load: self.load,
            connect_concurrency: 256,
            join_concurrency: self.join_concurrency,
            auto_join: self.auto_join,
            observe: self.observe,
            relinquish: self.relinquish,
            batch_heartbeats: self.batch_heartbeats,
            ack_delay: self.ack_delay,
            loads: self.loads.clone(),
        }
    }
}

/// A coordinator and the load generator speaking for a scenario's members, with the
/// progress lines on stderr, from start to [`Rig::finish`].
#[derive(Debug)]
pub(crate) struct Rig {
    pub(crate) setup: Setup,
    pub(crate) target: Target,
    info: TargetInfo,
    pub(crate) driver: Driver,
    pub(crate) shared: Arc<Shared>,
    progress: Progress,
    setup_timeout: Duration,
    /// The coordinator's resident memory before any member connected.
    pub(crate) rss_before: Option<u64>,
    /// When the load generator was started.
    pub(crate) started: Instant,
}

impl Rig {
    /// Starts the coordinator the options name, then the load generator (which
    /// connects and, unless told otherwise, joins in the background).
    pub(crate) async fn start(common: &CommonArgs, setup: Setup) -> Result<Self, String> {
        if let Some(lease) = setup.lease_timeout {
            if lease.is_zero() || lease > setup.session_timeout {
                return Err(format!(
                    "--lease-timeout {} ms must be above zero and at most the session timeout ({} ms)",
                    lease.as_millis(),
                    setup.session_timeout.as_millis()
                ));
            }
        }
        let opts = common.target_options()?;
        let target = Target::start(&opts).await?;
        let info = target.info(&opts);
        let rss_before = target.rss();
        let started = Instant::now();
        let driver = Driver::start(target.endpoint(), setup.plan());
        let shared = driver.shared.clone();
        let progress = Progress::start(shared.clone(), Some(setup.members), common.quiet);
        Ok(Self {
            setup,
            target,
            info,
            driver,
            shared,
            progress,
            setup_timeout: common.setup_timeout,
            rss_before,
            started,
        })
    }

    /// The members' observations, taken out once (with [`Setup::observe`] only).
    pub(crate) fn observations(&mut self) -> Result<UnboundedReceiver<Obs>, String> {
        self.driver
            .observations
            .take()
            .ok_or_else(|| "no observations".to_owned())
    }

    /// A tracker of who owns what, for this rig's members.
    pub(crate) fn tracker(&self) -> Tracker {
        Tracker::new(self.setup.members, self.setup.groups, self.setup.partitions)
    }

    /// Names the phase the progress lines show.
    pub(crate) fn phase(&self, label: &str) {
        self.progress.phase(label);
    }

    /// Waits (within the setup timeout) until every connection is open.
    pub(crate) async fn connected(&self) -> Result<(), String> {
        if self.driver.wait_connected(self.setup_timeout).await {
            Ok(())
        } else {
            Err("not every connection could be opened".to_owned())
        }
    }

    /// Waits (within the setup timeout) until every member's join was answered.
    pub(crate) async fn joined(&self) -> Result<(), String> {
        self.phase("joining");
        if self.driver.wait_joined(self.setup_timeout).await {
            Ok(())
        } else {
            Err("not every member could join".to_owned())
        }
    }

    /// Waits (within the setup timeout) until the members see every group settled:
    /// every partition owned exactly once, balanced, nothing being revoked.
    pub(crate) async fn settled(
        &self,
        tracker: &mut Tracker,
        observations: &mut UnboundedReceiver<Obs>,
    ) -> Result<(), String> {
        self.phase("settling");
        let deadline = Instant::now() + self.setup_timeout;
        tracker
            .absorb(observations, deadline, Tracker::all_settled)
            .await;
        if tracker.all_settled() {
            Ok(())
        } else {
            Err("the groups did not settle".to_owned())
        }
    }

    /// Lets the members run for `warmup` before anything is measured.
    pub(crate) async fn warm_up(&self, warmup: Duration) {
        self.phase("warming up");
        sleep_or(&self.shared.stop, warmup).await;
    }

    /// Stops the progress lines, the load generator and the coordinator (removing its
    /// data).
    pub(crate) async fn finish(self) -> Finished {
        self.progress.stop();
        let connections = self.driver.connections;
        self.driver.stop(DRIVER_STOP).await;
        self.target.stop().await;
        Finished {
            coordinator: self.info,
            connections,
            shared: self.shared,
            members: self.setup.members,
            per_conn: self.setup.per_conn,
            batch_heartbeats: self.setup.batch_heartbeats,
        }
    }
}

/// What is left of a [`Rig`] once stopped: what the report says of the coordinator
/// and the generator, and the generator's counters and histograms.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) coordinator: TargetInfo,
    pub(crate) connections: usize,
    pub(crate) shared: Arc<Shared>,
    members: usize,
    per_conn: usize,
    batch_heartbeats: bool,
}

impl Finished {
    /// How the load was generated, `load` saying what the members did.
    pub(crate) fn generator(&self, load: String) -> GeneratorInfo {
        GeneratorInfo::new(
            self.members,
            self.connections,
            self.per_conn,
            self.batch_heartbeats,
            load,
        )
    }

    /// The outcome of a run on this rig, without notes.
    pub(crate) fn outcome<F>(
        self,
        load: String,
        figures: F,
        text: String,
        checks: Vec<Check>,
    ) -> Outcome<F> {
        Outcome {
            generator: Some(self.generator(load)),
            coordinator: Some(self.coordinator),
            figures,
            text,
            checks,
            notes: Vec::new(),
        }
    }
}
