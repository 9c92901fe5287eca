//! Endpoints on SQLite (see [`crate::store::endpoints`]). Each write is one operation of the
//! writer thread, in its own savepoint: a refused index leaves nothing behind.

use std::collections::{HashMap, HashSet};

use rusqlite::{params, Connection, OptionalExtension};

use super::jobs::{job_put, schedule_sync};
use super::nodes::live_node_jobs;
use super::rows::endpoint_row;
use super::writer::WriteCtx;
use super::SqliteStore;
use crate::store::endpoints::{
    check_owners, merge_errors, removed_message, EndpointIndex, EndpointReport, EndpointRow,
    IndexApplied, NewEndpoint, StoredEndpoint, ENDPOINT_COLUMNS,
};
use crate::store::nodes::NODE_LIVE_MS;
use crate::store::owners::Put;
use crate::store::{Error, Result};

pub(super) fn endpoint_url(conn: &Connection, id: &str) -> Result<String> {
    conn.prepare_cached("SELECT url FROM endpoints WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .ok_or_else(|| Error::NotFound {
            what: "endpoint",
            id: id.to_string(),
        })
}

/// Cancels the queued runs of `jobs` with the "removed" message, each as any cancel is (its
/// `flare/run.cancelled` sent, a parent waiting for it resumed); returns how many.
pub(super) fn cancel_queued(
    ctx: &mut WriteCtx<'_>,
    jobs: &[String],
    url: &str,
    now: i64,
) -> Result<u64> {
    let mut n = 0;
    for job in jobs {
        let queued: Vec<String> = ctx
            .conn
            // The queue of runs without slots or a priority by its index; runs in slots' queues
            // (a limited job's) or with a priority by the job's runs.
            .prepare_cached(
                "SELECT id FROM runs INDEXED BY runs_runnable \
                   WHERE job_id = ?1 AND status = 'queued' AND slot_a IS NULL AND priority_ms IS NULL \
                 UNION ALL SELECT id FROM runs WHERE job_id = ?1 AND status = 'queued' \
                   AND (slot_a IS NOT NULL OR priority_ms IS NOT NULL)",
            )?
            .query_map([job], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let why = removed_message(job, url);
        for id in &queued {
            n += super::events::cancel_runs(ctx, id, now, Some(&why), None)? as u64;
        }
    }
    Ok(n)
}

/// Writes `index` as endpoint `id`'s jobs; see [`crate::store::Store::endpoint_index`].
pub(super) fn apply_index(
    ctx: &mut WriteCtx<'_>,
    id: &str,
    index: &EndpointIndex,
) -> Result<IndexApplied> {
    let url = endpoint_url(ctx.conn, id)?;
    let mut owners = HashMap::new();
    let mut stmt = ctx
        .conn
        .prepare_cached("SELECT endpoint_id FROM jobs WHERE id = ?1")?;
    for job in &index.jobs {
        if let Some(owner) = stmt
            .query_row([&job.id], |r| r.get::<_, Option<String>>(0))
            .optional()?
        {
            owners.insert(job.id.clone(), owner);
        }
    }
    let urls: HashMap<String, String> = ctx
        .conn
        .prepare_cached("SELECT id, url FROM endpoints")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let live = live_node_jobs(ctx.conn, index.now - NODE_LIVE_MS)?;
    check_owners(id, &index.jobs, &owners, &urls, &live)?;

    let keep: HashSet<&str> = index.jobs.iter().map(|j| j.id.as_str()).collect();
    let removed: Vec<String> = ctx
        .conn
        .prepare_cached("SELECT id FROM jobs WHERE endpoint_id = ?1 ORDER BY id")?
        .query_map([id], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?
        .into_iter()
        .filter(|j| !keep.contains(j.as_str()))
        .collect();
    let mut delete = ctx.conn.prepare_cached("DELETE FROM jobs WHERE id = ?1")?;
    let mut unschedule = ctx
        .conn
        .prepare_cached("DELETE FROM schedules WHERE job_id = ?1")?;
    for job in &removed {
        delete.execute([job])?;
        unschedule.execute([job])?;
    }
    let cancelled_runs = cancel_queued(ctx, &removed, &url, index.now)?;
    for job in &index.jobs {
        if job_put(ctx.conn, job, Some(id), index.now)? == Put::Refused {
            return Err(Error::Conflict(format!(
                "job {:?} is already served by another endpoint",
                job.id
            )));
        }
        schedule_sync(ctx.conn, job, index.now)?;
    }
    ctx.conn
        .prepare_cached(
            "UPDATE endpoints SET jobs = ?2, indexed_at = ?3, last_ok_at = ?3, skipped = ?4, \
             updated_at = max(?3, updated_at + 1) WHERE id = ?1",
        )?
        .execute(params![
            id,
            index.raw.to_string(),
            index.now,
            index.skipped.to_string()
        ])?;
    Ok(IndexApplied {
        removed,
        cancelled_runs,
    })
}

impl SqliteStore {
    /// See [`crate::store::Store::endpoint_create`].
    pub async fn endpoint_create(
        &self,
        ep: NewEndpoint,
        index: EndpointIndex,
    ) -> Result<IndexApplied> {
        self.write(move |ctx| {
            let inserted = ctx
                .conn
                .prepare_cached(
                    "INSERT INTO endpoints (id, url, secret, created_at, updated_at, protocol, client_id) \
                     VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
                )?
                .execute(params![
                    ep.id,
                    ep.url,
                    ep.secret,
                    ep.now,
                    ep.protocol.as_str(),
                    ep.client_id
                ])?;
            if inserted == 0 {
                return Err(Error::Conflict(format!(
                    "the endpoint {} is registered already",
                    ep.url
                )));
            }
            apply_index(ctx, &ep.id, &index)
        })
        .await
    }

    /// See [`crate::store::Store::endpoint_upsert`].
    pub async fn endpoint_upsert(&self, ep: NewEndpoint) -> Result<()> {
        self.write(move |ctx| {
            ctx.conn
                .prepare_cached(
                    "INSERT INTO endpoints (id, url, secret, created_at, updated_at, protocol, client_id) \
                     VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6) \
                     ON CONFLICT (id) DO UPDATE SET secret = excluded.secret, \
                     protocol = excluded.protocol, client_id = excluded.client_id, \
                     updated_at = max(excluded.updated_at, endpoints.updated_at + 1) \
                     WHERE endpoints.secret <> excluded.secret OR endpoints.protocol <> excluded.protocol \
                     OR endpoints.client_id IS NOT excluded.client_id",
                )?
                .execute(params![
                    ep.id,
                    ep.url,
                    ep.secret,
                    ep.now,
                    ep.protocol.as_str(),
                    ep.client_id
                ])?;
            Ok(())
        })
        .await
    }

    /// See [`crate::store::Store::endpoint_index`].
    pub async fn endpoint_index(&self, id: String, index: EndpointIndex) -> Result<IndexApplied> {
        self.write(move |ctx| apply_index(ctx, &id, &index)).await
    }

    /// See [`crate::store::Store::endpoint_report`].
    pub async fn endpoint_report(&self, id: String, report: EndpointReport) -> Result<()> {
        self.write(move |ctx| {
            let Some(stored) = ctx
                .conn
                .prepare_cached("SELECT errors FROM endpoints WHERE id = ?1")?
                .query_row([&id], |r| r.get::<_, String>(0))
                .optional()?
            else {
                return Ok(());
            };
            let errors = merge_errors(&stored, &report.errors)?;
            let last_error = report.errors.iter().map(|(at, _)| *at).max();
            ctx.conn
                .prepare_cached(
                    "UPDATE endpoints SET errors = ?2, \
                     last_ok_at = CASE WHEN ?3 > coalesce(last_ok_at, -1) THEN ?3 ELSE last_ok_at END, \
                     last_error_at = CASE WHEN ?4 > coalesce(last_error_at, -1) THEN ?4 ELSE last_error_at END \
                     WHERE id = ?1",
                )?
                .execute(params![id, errors, report.ok_at, last_error])?;
            Ok(())
        })
        .await
    }

    /// See [`crate::store::Store::endpoint_remove`].
    pub async fn endpoint_remove(&self, id: String, now: i64) -> Result<IndexApplied> {
        self.write(move |ctx| {
            let url = endpoint_url(ctx.conn, &id)?;
            let removed: Vec<String> = ctx
                .conn
                .prepare_cached("SELECT id FROM jobs WHERE endpoint_id = ?1 ORDER BY id")?
                .query_map([&id], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<_>>()?;
            ctx.conn
                .prepare_cached(
                    "DELETE FROM schedules WHERE job_id IN (SELECT id FROM jobs WHERE endpoint_id = ?1)",
                )?
                .execute([&id])?;
            ctx.conn
                .prepare_cached("DELETE FROM jobs WHERE endpoint_id = ?1")?
                .execute([&id])?;
            let cancelled_runs = cancel_queued(ctx, &removed, &url, now)?;
            ctx.conn
                .prepare_cached("DELETE FROM endpoints WHERE id = ?1")?
                .execute([&id])?;
            Ok(IndexApplied {
                removed,
                cancelled_runs,
            })
        })
        .await
    }

    /// See [`crate::store::Store::endpoints_load`].
    pub async fn endpoints_load(&self) -> Result<Vec<StoredEndpoint>> {
        self.read(|c| {
            let rows: Vec<EndpointRow> = c
                .prepare_cached(&format!(
                    "SELECT {ENDPOINT_COLUMNS} FROM endpoints ORDER BY url"
                ))?
                .query_map([], endpoint_row)?
                .collect::<rusqlite::Result<_>>()?;
            rows.into_iter().map(EndpointRow::into_stored).collect()
        })
        .await
    }

    /// See [`crate::store::Store::endpoints_revision`].
    pub async fn endpoints_revision(&self) -> Result<(i64, i64)> {
        self.read(|c| {
            Ok(
                c.prepare_cached("SELECT count(*), coalesce(sum(updated_at), 0) FROM endpoints")?
                    .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?,
            )
        })
        .await
    }
}
