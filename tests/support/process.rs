//! Child processes for the tests that run real binaries (`flare`, the example applications):
//! a free port, the `flare` command ([`flare`]), a wait until a server answers ([`wait_healthy`]),
//! and [`Proc`], whose output goes to a temp file that failure messages quote and which is killed
//! when dropped, so none outlives a failing test.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// The `flare` binary this package built, with `args`, without what a developer's shell may have
/// set for it (`FLARE_API_KEY`, `FLARE_ENDPOINTS`, `DATABASE_URL`), logging warnings and errors
/// without colours. Callers add their own settings (a later `env` wins).
pub fn flare(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flare"));
    command
        .args(args)
        .env_remove("FLARE_API_KEY")
        .env_remove("FLARE_ENDPOINTS")
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1");
    command
}

/// Waits until a server on the loopback `port` answers `GET /healthz` with a success (20 s at
/// most).
pub async fn wait_healthy(port: u16) {
    let url = format!("http://127.0.0.1:{port}/healthz");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(r) = reqwest::get(&url).await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("flare serve did not become healthy on port {port}");
}

/// A spawned process with its output (stdout and stderr) in a temp file.
pub struct Proc {
    /// What it is, for messages.
    pub what: String,
    /// The process.
    pub child: Child,
    log: tempfile::NamedTempFile,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Starts `command` (stdin closed, output to the log).
    pub fn spawn(what: &str, mut command: Command) -> Proc {
        let log = tempfile::NamedTempFile::new().expect("a log file");
        let stdout = log.reopen().expect("the log file");
        let stderr = stdout.try_clone().expect("the log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        Proc {
            what: what.to_string(),
            child,
            log,
        }
    }

    /// Everything it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Panics, showing its output, when it has exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}):\n{}", self.what, self.output());
        }
    }

    /// SIGTERM, then a successful exit within `patience` (graceful shutdown).
    pub fn stop(mut self, patience: Duration) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success());
        let deadline = Instant::now() + patience;
        loop {
            if let Some(exit) = self.child.try_wait().expect("wait") {
                assert!(
                    exit.success(),
                    "{} exits 0 on SIGTERM, got {exit}:\n{}",
                    self.what,
                    self.output()
                );
                return;
            }
            assert!(Instant::now() < deadline, "{} did not stop", self.what);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
