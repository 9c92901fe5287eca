//! Nodes on SQLite: a node's beat (alive, and the jobs it defines), its removal, the list of
//! nodes; and the leader leases of the maintenance chores (one upsert each).

use std::collections::HashSet;

use rusqlite::{params, Connection, OptionalExtension};

use super::SqliteStore;
use crate::model::ms_to_time;
use crate::store::nodes::{jobs_of, NodeBeat, NodeSummary, NODE_FORGET_MS, NODE_LIVE_MS};
use crate::store::{Error, Result};

/// Job ids defined by nodes seen since `since`.
pub(super) fn live_node_jobs(conn: &Connection, since: i64) -> Result<HashSet<String>> {
    let mut stmt = conn.prepare_cached("SELECT jobs FROM nodes WHERE seen_at >= ?1")?;
    let mut rows = stmt.query([since])?;
    let mut all = HashSet::new();
    while let Some(r) = rows.next()? {
        let text: String = r.get(0)?;
        all.extend(jobs_of(&text)?);
    }
    Ok(all)
}

impl SqliteStore {
    /// See [`crate::store::Store::node_beat`].
    pub async fn node_beat(&self, beat: NodeBeat) -> Result<()> {
        let jobs = serde_json::to_string(&beat.jobs).map_err(|e| Error::Corrupt(e.to_string()))?;
        self.write(move |ctx| {
            ctx.conn
                .prepare_cached(
                    "INSERT INTO nodes (id, started_at, seen_at, jobs, version, concurrency, running) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                     ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at, jobs = excluded.jobs, \
                     version = excluded.version, concurrency = excluded.concurrency, running = excluded.running",
                )?
                .execute(params![
                    beat.id,
                    beat.started_at,
                    beat.now,
                    jobs,
                    beat.version,
                    i64::try_from(beat.concurrency).unwrap_or(i64::MAX),
                    i64::try_from(beat.running).unwrap_or(i64::MAX)
                ])?;
            ctx.conn
                .prepare_cached("DELETE FROM nodes WHERE seen_at < ?1")?
                .execute([beat.now - NODE_FORGET_MS])?;
            Ok(())
        })
        .await
    }

    /// See [`crate::store::Store::node_remove`].
    pub async fn node_remove(&self, id: String) -> Result<()> {
        self.write(move |ctx| {
            ctx.conn
                .prepare_cached("DELETE FROM nodes WHERE id = ?1")?
                .execute([id])?;
            Ok(())
        })
        .await
    }

    /// See [`crate::store::Store::nodes_list`].
    pub async fn nodes_list(&self, now: i64) -> Result<Vec<NodeSummary>> {
        self.read(move |c| {
            let mut stmt =
                c.prepare_cached("SELECT id, started_at, seen_at, jobs, version, concurrency, running FROM nodes ORDER BY id")?;
            let mut rows = stmt.query([])?;
            let mut nodes = Vec::new();
            while let Some(r) = rows.next()? {
                let seen_at: i64 = r.get(2)?;
                let jobs: String = r.get(3)?;
                nodes.push(NodeSummary {
                    id: r.get(0)?,
                    started_at: ms_to_time(r.get(1)?),
                    seen_at: ms_to_time(seen_at),
                    jobs: jobs_of(&jobs)?,
                    live: seen_at >= now - NODE_LIVE_MS,
                    version: r.get(4)?,
                    concurrency: u64::try_from(r.get::<_, i64>(5)?).unwrap_or(0),
                    running: u64::try_from(r.get::<_, i64>(6)?).unwrap_or(0),
                });
            }
            Ok(nodes)
        })
        .await
    }

    /// See [`crate::store::Store::leader_acquire`].
    pub async fn leader_acquire(
        &self,
        name: String,
        holder: String,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool> {
        self.write(move |ctx| {
            let held = ctx
                .conn
                .prepare_cached(
                    "INSERT INTO leaders (name, holder, expires_at) VALUES (?1, ?2, ?3 + ?4) \
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
                     WHERE leaders.holder = excluded.holder OR leaders.expires_at <= ?3 RETURNING holder",
                )?
                .query_row(params![name, holder, now, ttl_ms], |r| r.get::<_, String>(0))
                .optional()?;
            Ok(held.is_some())
        })
        .await
    }

    /// See [`crate::store::Store::leader_release`].
    pub async fn leader_release(&self, name: String, holder: String) -> Result<()> {
        self.write(move |ctx| {
            ctx.conn
                .prepare_cached("DELETE FROM leaders WHERE name = ?1 AND holder = ?2")?
                .execute(params![name, holder])?;
            Ok(())
        })
        .await
    }
}
