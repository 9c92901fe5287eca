//! Flare's service in the test's own process: [`settings`] for a test, and [`Server`],
//! `flare::server::run` on a loopback port the system picks, shut down when asked or dropped.

use std::net::SocketAddr;
use std::time::Duration;

use flare::config::{RawServe, ServeConfig};
use flare::Client;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{Backend, TestDb};

/// Settings for a test on `database_url`: loopback port 0, 4 workers, 30 s leases, a 5 s grace
/// period, no retention, no key. Suites change what they test with `RawServe { …, ..settings(…) }`.
pub fn settings(database_url: &str) -> RawServe {
    RawServe {
        listen: "127.0.0.1:0".into(),
        database_url: database_url.into(),
        concurrency: 4,
        retention_days: 0,
        lease_secs: 30,
        shutdown_grace_secs: 5,
        ..RawServe::default()
    }
}

/// A running server. Dropping it starts its shutdown; [`Server::stop`] also waits for the end.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// `http://` and that address.
    pub url: String,
    /// The database it serves.
    pub db_url: String,
    /// Sent (or dropped): shut down gracefully.
    pub stop: Option<oneshot::Sender<()>>,
    /// The server; ends when it has shut down.
    pub task: JoinHandle<()>,
    /// The database it made for itself ([`Server::on_sqlite`]), removed after it.
    db: Option<TestDb>,
}

impl Server {
    /// Serves `config` on a new loopback port (the caller keeps its database).
    pub async fn start(config: ServeConfig) -> Server {
        // The listen queue `flare serve` has, so a flood of connections queues as it would there.
        let listener = flare::http::connections::listen("127.0.0.1:0".parse().expect("address"))
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let db_url = config.database_url.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            flare::server::run(config, listener, async {
                let _ = stopped.await;
            })
            .await
            .expect("server");
        });
        Server {
            addr,
            url: format!("http://{addr}"),
            db_url,
            stop: Some(stop),
            task,
            db: None,
        }
    }

    /// Serves a fresh SQLite database, kept while the server is, with [`settings`] as `edit`
    /// changes them.
    pub async fn on_sqlite(edit: impl FnOnce(&mut RawServe)) -> Server {
        let db = TestDb::new(Backend::Sqlite).await;
        let mut raw = settings(&db.url);
        edit(&mut raw);
        let config = raw.validate().expect("config");
        Server::start(config).await.keeping(db)
    }

    /// This server, keeping `db` until it is dropped.
    pub fn keeping(mut self, db: TestDb) -> Server {
        self.db = Some(db);
        self
    }

    /// A send-only client on its database, to check what was stored.
    pub async fn reader(&self) -> Client {
        Client::builder(&self.db_url)
            .workers(false)
            .connect()
            .await
            .expect("reader")
    }

    /// Shuts it down and waits (20 s at most) until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(20), &mut self.task).await;
    }
}
