//! A fresh database per test on every backend: [`TestDb`] (a temp dir for SQLite, a database
//! created and dropped on the local PostgreSQL server), with clients on a manual clock, and
//! [`KeptDb`], which checks after the test what it left behind.

use std::sync::Arc;
use std::time::Duration;

use flare::{Client, EngineConfig, ManualClock};

use super::test_config;

/// A store backend the suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Embedded SQLite in a temp dir.
    Sqlite,
    /// A fresh database on the local PostgreSQL server (see [`pg_admin_url`]).
    Postgres,
}

/// The server's maintenance database the PostgreSQL tests create their databases from:
/// `FLARE_TEST_PG_URL`, or the local server with the `postgres` user.
pub fn pg_admin_url() -> String {
    std::env::var("FLARE_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// `url` with its database name replaced by `db` (query parameters kept).
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_part = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    format!("{host_part}/{db}{query}")
}

/// A connection to the server's maintenance database, or why there is none.
pub async fn pg_admin() -> Result<tokio_postgres::Client, String> {
    let url = pg_admin_url();
    let connect = tokio_postgres::connect(&url, tokio_postgres::NoTls);
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok((client, conn))) => {
            tokio::spawn(conn);
            Ok(client)
        }
        Ok(Err(e)) => Err(format!("cannot connect to {url}: {e}")),
        Err(_) => Err(format!("cannot connect to {url}: timed out")),
    }
}

fn drop_pg_database(name: String) {
    let dropped = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(async {
            let admin = pg_admin().await.ok()?;
            admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await
                .ok()
        })
    })
    .join();
    if !matches!(dropped, Ok(Some(()))) {
        eprintln!("could not drop a test database; it is left on the server");
    }
}

/// A fresh, empty database for one test.
pub struct TestDb {
    /// Its URL.
    pub url: String,
    /// The backend.
    pub backend: Backend,
    /// The database itself, removed when the last holder is dropped.
    place: Arc<Place>,
}

/// Where a test database lives: a temp dir, or a PostgreSQL database dropped at the end.
struct Place {
    _dir: Option<tempfile::TempDir>,
    pg_database: Option<String>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(name) = self.pg_database.take() {
            drop_pg_database(name);
        }
    }
}

/// A test database kept after its test ended, for checks of what the test left behind.
pub struct KeptDb {
    url: String,
    _place: Arc<Place>,
}

impl KeptDb {
    /// Fails the test when the per-minute counts the statistics read differ from the rows they
    /// count: every write path a test went through must keep them true.
    pub async fn assert_rollups_true(&self) {
        let store = match flare::store::Store::open(&self.url).await {
            Ok(store) => store,
            // A test that damaged its database on purpose: nothing to compare.
            Err(e) => return eprintln!("rollups not checked: {e}"),
        };
        let drift = match store.rollups_drift().await {
            Ok(drift) => drift,
            Err(e) => return eprintln!("rollups not checked: {e}"),
        };
        assert!(
            drift.is_empty(),
            "the per-minute counts differ from the rows:\n{}",
            drift.join("\n")
        );
    }
}

impl TestDb {
    /// A new empty database on `backend`. Panics when PostgreSQL is unreachable; see
    /// [`TestDb::new_or_skip`].
    pub async fn new(backend: Backend) -> TestDb {
        match Self::try_new(backend).await {
            Ok(db) => db,
            Err(why) => panic!("{why}"),
        }
    }

    /// A new empty database on `backend`, or `None` (printing why) when PostgreSQL is not
    /// reachable and `CI` is not set. Under `CI` a missing server fails the test.
    pub async fn new_or_skip(backend: Backend) -> Option<TestDb> {
        match Self::try_new(backend).await {
            Ok(db) => Some(db),
            Err(why) => {
                super::skip::skip(&why);
                None
            }
        }
    }

    async fn try_new(backend: Backend) -> Result<TestDb, String> {
        Ok(match backend {
            Backend::Postgres => {
                let admin = pg_admin().await?;
                let name = format!("flare_t_{:016x}", rand::random::<u64>());
                admin
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .await
                    .map_err(|e| format!("cannot create a test database: {e}"))?;
                TestDb {
                    url: with_database(&pg_admin_url(), &name),
                    backend,
                    place: Arc::new(Place {
                        _dir: None,
                        pg_database: Some(name),
                    }),
                }
            }
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}", dir.path().join("flare.db").display());
                TestDb {
                    url,
                    backend,
                    place: Arc::new(Place {
                        _dir: Some(dir),
                        pg_database: None,
                    }),
                }
            }
        })
    }

    /// Keeps the database after the test that owns this handle ends.
    pub fn keep(&self) -> KeptDb {
        KeptDb {
            url: self.url.clone(),
            _place: Arc::clone(&self.place),
        }
    }

    /// A client with workers, a manual clock set to now, and test-friendly settings.
    pub async fn client(&self) -> (Client, ManualClock) {
        self.client_with(test_config()).await
    }

    /// A client with the given engine settings and a manual clock.
    pub async fn client_with(&self, config: EngineConfig) -> (Client, ManualClock) {
        let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
        let client = self.client_on(&clock, config).await;
        (client, clock)
    }

    /// A client with workers and the given engine settings on `clock`, which other clients (the
    /// other nodes of a test) may share.
    pub async fn client_on(&self, clock: &ManualClock, config: EngineConfig) -> Client {
        clocked_client(&self.url, clock, config).await
    }

    /// Runs `sql` on the database itself, over a connection of its own (not through Flare).
    pub async fn execute(&self, sql: &str) {
        match self.backend {
            Backend::Sqlite => {
                let path = self.url.strip_prefix("sqlite://").expect("sqlite path");
                let conn = rusqlite::Connection::open(path).expect("open");
                conn.execute_batch(sql).expect(sql);
            }
            Backend::Postgres => self.pg().await.batch_execute(sql).await.expect(sql),
        }
    }

    /// A PostgreSQL connection of its own to the database (not through Flare).
    pub async fn pg(&self) -> tokio_postgres::Client {
        let (pg, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        pg
    }

    /// A send-only client (no workers) sharing `clock`.
    pub async fn sender(&self, clock: &ManualClock) -> Client {
        Client::builder(&self.url)
            .clock(Arc::new(clock.clone()))
            .workers(false)
            .connect()
            .await
            .expect("connect")
    }
}

/// A client on `url` with workers, the default engine settings and a manual clock set to
/// `start_ms`: what `flare serve` runs, on a clock the test moves.
pub async fn client_at(url: &str, start_ms: i64) -> (Client, ManualClock) {
    let clock = ManualClock::new(start_ms);
    let client = clocked_client(url, &clock, EngineConfig::default()).await;
    (client, clock)
}

/// A client with workers on `url` and `clock`, with `config`.
async fn clocked_client(url: &str, clock: &ManualClock, config: EngineConfig) -> Client {
    Client::builder(url)
        .clock(Arc::new(clock.clone()))
        .config(config)
        .connect()
        .await
        .expect("connect")
}
