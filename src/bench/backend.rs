//! Where a repetition of a two-store scenario (`steps`, `drain`) runs: a temporary SQLite file, or
//! a fresh database created for it on the PostgreSQL server of `--database-url` and dropped after
//! it, so every repetition starts from empty tables.

use super::{db_url, Args, Error};

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
    _dir: tempfile::TempDir,
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
                _dir: dir,
                pg: None,
            },
            Backend::Postgres => {
                let server = args.database_url.as_deref().ok_or_else(|| {
                    Error::Stalled("this scenario on PostgreSQL needs --database-url".into())
                })?;
                let name = format!("{prefix}_{:016x}", rand::random::<u64>());
                create_database(server, &name).await?;
                Place {
                    url: with_database(server, &name),
                    _dir: dir,
                    pg: Some((server.to_string(), name)),
                }
            }
        })
    }

    /// The database's URL.
    pub(super) fn url(&self) -> &str {
        &self.url
    }

    /// Drops the PostgreSQL database (the temp dir goes with `self`).
    pub(super) async fn remove(self) {
        if let Some((server, name)) = &self.pg {
            drop_database(server, name).await;
        }
    }
}

async fn create_database(url: &str, name: &str) -> Result<(), Error> {
    let (admin, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| Error::Stalled(format!("cannot connect to {url}: {e}")))?;
    let task = tokio::spawn(conn);
    let created = admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await;
    drop(admin);
    let _ = task.await;
    created.map_err(|e| Error::Stalled(format!("cannot create a database: {e}")))
}

async fn drop_database(url: &str, name: &str) {
    if let Ok((admin, conn)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        let task = tokio::spawn(conn);
        if let Err(e) = admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
        {
            tracing::warn!(error = %e, database = name, "could not drop the benchmark's database");
        }
        drop(admin);
        let _ = task.await;
    }
}

/// `url` with its database name replaced by `db` (query parameters kept).
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    format!("{host}/{db}{query}")
}
