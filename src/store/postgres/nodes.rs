//! Nodes on PostgreSQL: a node's beat (alive, and the jobs it defines), its removal, the list of
//! nodes; and the leader leases of the maintenance chores (one upsert each).

use std::collections::HashSet;

use deadpool_postgres::GenericClient;

use super::rows::{exec, rows};
use super::PgStore;
use crate::model::ms_to_time;
use crate::store::nodes::{jobs_of, NodeBeat, NodeSummary, NODE_FORGET_MS, NODE_LIVE_MS};
use crate::store::{Error, Result};

pub(super) async fn live_node_jobs<C: GenericClient>(c: &C, since: i64) -> Result<HashSet<String>> {
    let mut all = HashSet::new();
    for r in rows(c, "SELECT jobs FROM nodes WHERE seen_at >= $1", &[&since]).await? {
        let text: String = r.try_get(0)?;
        all.extend(jobs_of(&text)?);
    }
    Ok(all)
}

impl PgStore {
    /// See [`crate::store::Store::node_beat`].
    pub async fn node_beat(&self, beat: NodeBeat) -> Result<()> {
        let jobs = serde_json::to_string(&beat.jobs).map_err(|e| Error::Corrupt(e.to_string()))?;
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        exec(
            &tx,
            "INSERT INTO nodes (id, started_at, seen_at, jobs, version, concurrency, running) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at, jobs = excluded.jobs, \
             version = excluded.version, concurrency = excluded.concurrency, running = excluded.running",
            &[
                &beat.id,
                &beat.started_at,
                &beat.now,
                &jobs,
                &beat.version,
                &i64::try_from(beat.concurrency).unwrap_or(i64::MAX),
                &i64::try_from(beat.running).unwrap_or(i64::MAX),
            ],
        )
        .await?;
        exec(
            &tx,
            "DELETE FROM nodes WHERE seen_at < $1",
            &[&(beat.now - NODE_FORGET_MS)],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// See [`crate::store::Store::node_remove`].
    pub async fn node_remove(&self, id: String) -> Result<()> {
        let client = self.conn().await?;
        self.write_one(&client, "DELETE FROM nodes WHERE id = $1", &[&id])
            .await?;
        Ok(())
    }

    /// See [`crate::store::Store::nodes_list`].
    pub async fn nodes_list(&self, now: i64) -> Result<Vec<NodeSummary>> {
        let client = self.conn().await?;
        rows(
            &client,
            "SELECT id, started_at, seen_at, jobs, version, concurrency, running FROM nodes ORDER BY id",
            &[],
        )
        .await?
        .iter()
        .map(|r| {
            let seen_at: i64 = r.try_get(2)?;
            let jobs: String = r.try_get(3)?;
            Ok(NodeSummary {
                id: r.try_get(0)?,
                started_at: ms_to_time(r.try_get(1)?),
                seen_at: ms_to_time(seen_at),
                jobs: jobs_of(&jobs)?,
                live: seen_at >= now - NODE_LIVE_MS,
                version: r.try_get(4)?,
                concurrency: u64::try_from(r.try_get::<_, i64>(5)?).unwrap_or(0),
                running: u64::try_from(r.try_get::<_, i64>(6)?).unwrap_or(0),
            })
        })
        .collect()
    }

    /// See [`crate::store::Store::leader_acquire`]: one statement.
    pub async fn leader_acquire(
        &self,
        name: String,
        holder: String,
        now: i64,
        ttl_ms: i64,
    ) -> Result<bool> {
        let expires = now.saturating_add(ttl_ms);
        let client = self.conn().await?;
        let r = self
            .write_one(
            &client,
            "INSERT INTO leaders (name, holder, expires_at) VALUES ($1, $2, $4) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE leaders.holder = excluded.holder OR leaders.expires_at <= $3 RETURNING holder",
            &[&name, &holder, &now, &expires],
        )
        .await?;
        Ok(!r.is_empty())
    }

    /// See [`crate::store::Store::leader_release`].
    pub async fn leader_release(&self, name: String, holder: String) -> Result<()> {
        let client = self.conn().await?;
        self.write_one(
            &client,
            "DELETE FROM leaders WHERE name = $1 AND holder = $2",
            &[&name, &holder],
        )
        .await?;
        Ok(())
    }
}
