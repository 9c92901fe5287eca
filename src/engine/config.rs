//! The engine's settings ([`EngineConfig`]), with defaults that suit a small service.

use std::time::Duration;

/// Engine settings. Defaults suit a small service.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Runs executing at once in this process (per-job limits apply on top). Default 100.
    pub concurrency: usize,
    /// Most runs claimed in one transaction. Default 500.
    pub claim_batch: usize,
    /// How long a claim stays valid without a heartbeat. Default 30 s.
    pub lease: Duration,
    /// Longest the worker and scheduler wait before looking again. Default 200 ms.
    pub poll_interval: Duration,
    /// Finished events and runs older than this are pruned. `None` keeps everything. Default 7 days.
    pub retention: Option<Duration>,
    /// How often the pruner runs. Default 1 minute.
    pub prune_interval: Duration,
    /// How long running runs may take to finish at shutdown. Default 30 s.
    pub shutdown_grace: Duration,
    /// How long a shutdown may take past the grace period: the time the storage gets to record
    /// the last outcomes, release the runs still executing and hand leadership over, whatever it
    /// does (a full disk, a database gone). Default 10 s.
    pub shutdown_bound: Duration,
    /// How long the maintenance leadership lasts without renewal: when the leading node dies,
    /// another takes over within this time. Renewed every poll interval, so keep it several
    /// poll intervals long. Default 2 s.
    pub leader_ttl: Duration,
    /// How often this node records that it is alive and which jobs it defines (the dashboard
    /// flags jobs no live node defines). Default 5 s.
    pub node_beat: Duration,
    /// This node's name (`--node-name` / `FLARE_NODE_NAME`): its id on the workers page, in run
    /// records and logs. `None`: the host name and the process id (`web-1-4242`; a second
    /// engine in one process gets `-2`, …).
    pub node_name: Option<String>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            concurrency: 100,
            claim_batch: 500,
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_millis(200),
            retention: Some(Duration::from_secs(7 * 86_400)),
            prune_interval: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(30),
            shutdown_bound: Duration::from_secs(10),
            leader_ttl: Duration::from_secs(2),
            node_beat: Duration::from_secs(5),
            node_name: None,
        }
    }
}
