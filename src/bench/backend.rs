//! Where a repetition of a two-store scenario (`steps`, `drain`) runs: a temporary SQLite file, or
//! a fresh database created for it on the PostgreSQL server of `--database-url` and dropped after
//! it, so every repetition starts from empty tables.

use super::args::{db_url, Args, Error};
use crate::store::postgres::{database_create, database_drop};

/// The store a repetition runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Backend {
    /// A temporary SQLite file.
    Sqlite,
    /// A fresh database on the server of `--database-url`.
    Postgres,
}

impl Backend {
    pub(super) fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// SQLite, and PostgreSQL too when `--database-url` is a `postgres://` URL.
    pub(super) fn selected(args: &Args) -> Vec<Backend> {
        let mut backends = vec![Backend::Sqlite];
        if args
            .database_url
            .as_deref()
            .is_some_and(crate::store::postgres::is_postgres_url)
        {
            backends.push(Backend::Postgres);
        }
        backends
    }
}

/// One repetition's empty database; [`Place::remove`] deletes it.
pub(super) struct Place {
    url: String,
    dir: tempfile::TempDir,
    /// The server's URL and the database created on it.
    pg: Option<(String, String)>,
}

impl Place {
    /// A temp SQLite file, or a database `<prefix>_<random>` on the server of `--database-url`.
    pub(super) async fn new(args: &Args, backend: Backend, prefix: &str) -> Result<Place, Error> {
        let dir = tempfile::tempdir()?;
        Ok(match backend {
            Backend::Sqlite => Place {
                url: db_url(dir.path()),
                dir,
                pg: None,
            },
            Backend::Postgres => {
                let server = args.database_url.as_deref().ok_or_else(|| {
                    Error::Stalled("this scenario on PostgreSQL needs --database-url".into())
                })?;
                let name = format!("{prefix}_{:016x}", rand::random::<u64>());
                let url = database_create(server, &name).await.map_err(|e| {
                    Error::Stalled(format!("cannot create a database on {server}: {e}"))
                })?;
                Place {
                    url,
                    dir,
                    pg: Some((server.to_string(), name)),
                }
            }
        })
    }

    /// The database's URL.
    pub(super) fn url(&self) -> &str {
        &self.url
    }

    /// The megabytes the repetition left stored, for comparing how much two scenarios wrote for
    /// as many runs: SQLite's pages (read through the WAL), PostgreSQL's tables with their
    /// indexes and TOAST (dead row versions not vacuumed yet included). NaN when unreadable.
    pub(super) async fn stored_mb(&self) -> f64 {
        let bytes = match &self.pg {
            None => {
                let path = self.dir.path().join("flare.db");
                tokio::task::spawn_blocking(move || sqlite_bytes(&path))
                    .await
                    .ok()
                    .flatten()
            }
            Some(_) => postgres_bytes(&self.url).await,
        };
        bytes.map_or(f64::NAN, |b| b / 1e6)
    }

    /// Drops the PostgreSQL database (the temp dir goes with `self`).
    pub(super) async fn remove(self) {
        if let Some((server, name)) = &self.pg {
            if let Err(e) = database_drop(server, name).await {
                tracing::warn!(error = %e, database = %name, "could not drop the benchmark's database");
            }
        }
    }
}

/// The size of the SQLite database at `path`: its pages, those still in the WAL too.
fn sqlite_bytes(path: &std::path::Path) -> Option<f64> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .ok()?;
    conn.query_row(
        "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
        [],
        |r| r.get::<_, i64>(0),
    )
    .ok()
    .map(|b| b as f64)
}

/// The size of the tables (with their indexes and TOAST) of the PostgreSQL database at `url`.
async fn postgres_bytes(url: &str) -> Option<f64> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .ok()?;
    let task = tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::float8 FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')",
            &[],
        )
        .await;
    drop(client);
    let _ = task.await;
    row.ok().map(|r| r.get::<_, f64>(0))
}
