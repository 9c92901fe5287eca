//! Endpoints on PostgreSQL (see [`crate::store::endpoints`]). Each write is one transaction; an
//! index locks its endpoint row first, so two nodes indexing the same endpoint apply one index
//! after the other.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;

use super::jobs::{job_put, schedule_sync};
use super::nodes::live_node_jobs;
use super::rows::{endpoint_row, exec, rows};
use super::PgStore;
use crate::store::endpoints::{
    check_owners, merge_errors, EndpointIndex, EndpointReport, IndexApplied, NewEndpoint,
    StoredEndpoint, ENDPOINT_COLUMNS,
};
use crate::store::nodes::NODE_LIVE_MS;
use crate::store::owners::Put;
use crate::store::{Error, Result, Triggers};

/// Locks endpoint `id` and returns its URL.
pub(super) async fn endpoint_lock<C: GenericClient>(c: &C, id: &str) -> Result<String> {
    match rows(
        c,
        "SELECT url FROM endpoints WHERE id = $1 FOR UPDATE",
        &[&id],
    )
    .await?
    .first()
    {
        Some(r) => Ok(r.try_get(0)?),
        None => Err(Error::NotFound {
            what: "endpoint",
            id: id.to_string(),
        }),
    }
}

/// Removes `jobs` and cancels their queued runs; returns how many runs.
pub(super) async fn jobs_remove<C: GenericClient>(
    c: &C,
    triggers: &Triggers,
    jobs: &[String],
    url: &str,
    now: i64,
) -> Result<u64> {
    let mut cancelled = 0;
    for job in jobs {
        exec(c, "DELETE FROM jobs WHERE id = $1", &[job]).await?;
        exec(c, "DELETE FROM schedules WHERE job_id = $1", &[job]).await?;
        cancelled += super::control::cancel_queued_of_job(
            c,
            triggers,
            job,
            now,
            &crate::store::endpoints::removed_message(job, url),
        )
        .await?;
    }
    Ok(cancelled)
}

/// See [`crate::store::Store::endpoint_index`]; the caller's transaction.
pub(super) async fn apply_index<C: GenericClient>(
    c: &C,
    triggers: &Triggers,
    id: &str,
    index: &EndpointIndex,
) -> Result<IndexApplied> {
    let url = endpoint_lock(c, id).await?;
    let ids: Vec<&str> = index.jobs.iter().map(|j| j.id.as_str()).collect();
    let mut owners = HashMap::new();
    for r in rows(
        c,
        "SELECT id, endpoint_id FROM jobs WHERE id = ANY($1)",
        &[&ids],
    )
    .await?
    {
        owners.insert(
            r.try_get::<_, String>(0)?,
            r.try_get::<_, Option<String>>(1)?,
        );
    }
    let mut urls = HashMap::new();
    for r in rows(c, "SELECT id, url FROM endpoints", &[]).await? {
        urls.insert(r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?);
    }
    let live = live_node_jobs(c, index.now - NODE_LIVE_MS).await?;
    check_owners(id, &index.jobs, &owners, &urls, &live)?;

    let keep: HashSet<&str> = ids.iter().copied().collect();
    let mut removed = Vec::new();
    for r in rows(
        c,
        "SELECT id FROM jobs WHERE endpoint_id = $1 ORDER BY id",
        &[&id],
    )
    .await?
    {
        let job: String = r.try_get(0)?;
        if !keep.contains(job.as_str()) {
            removed.push(job);
        }
    }
    let cancelled_runs = jobs_remove(c, triggers, &removed, &url, index.now).await?;
    for job in &index.jobs {
        if job_put(c, job, Some(id), index.now).await? == Put::Refused {
            return Err(Error::Conflict(format!(
                "job {:?} is already served by another endpoint",
                job.id
            )));
        }
        schedule_sync(c, job, index.now).await?;
    }
    exec(
        c,
        "UPDATE endpoints SET jobs = $2, indexed_at = $3, last_ok_at = $3, skipped = $4, \
         updated_at = GREATEST($3, updated_at + 1) WHERE id = $1",
        &[
            &id,
            &index.raw.to_string(),
            &index.now,
            &index.skipped.to_string(),
        ],
    )
    .await?;
    Ok(IndexApplied {
        removed,
        cancelled_runs,
    })
}

impl PgStore {
    /// See [`crate::store::Store::endpoint_create`].
    pub async fn endpoint_create(
        &self,
        ep: NewEndpoint,
        index: EndpointIndex,
    ) -> Result<IndexApplied> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let inserted = exec(
            &tx,
            "INSERT INTO endpoints (id, url, secret, created_at, updated_at, protocol, client_id) \
             VALUES ($1, $2, $3, $4, $4, $5, $6) ON CONFLICT DO NOTHING",
            &[
                &ep.id,
                &ep.url,
                &ep.secret,
                &ep.now,
                &ep.protocol.as_str(),
                &ep.client_id,
            ],
        )
        .await?;
        if inserted == 0 {
            return Err(Error::Conflict(format!(
                "the endpoint {} is registered already",
                ep.url
            )));
        }
        let applied = apply_index(&tx, self.triggers(), &ep.id, &index).await?;
        tx.commit().await?;
        Ok(applied)
    }

    /// See [`crate::store::Store::endpoint_upsert`].
    pub async fn endpoint_upsert(&self, ep: NewEndpoint) -> Result<()> {
        let client = self.conn().await?;
        self.write_one(
            &client,
            "INSERT INTO endpoints (id, url, secret, created_at, updated_at, protocol, client_id) \
             VALUES ($1, $2, $3, $4, $4, $5, $6) \
             ON CONFLICT (id) DO UPDATE SET secret = excluded.secret, \
             protocol = excluded.protocol, client_id = excluded.client_id, \
             updated_at = GREATEST(excluded.updated_at, endpoints.updated_at + 1) \
             WHERE endpoints.secret <> excluded.secret OR endpoints.protocol <> excluded.protocol \
             OR endpoints.client_id IS DISTINCT FROM excluded.client_id",
            &[
                &ep.id,
                &ep.url,
                &ep.secret,
                &ep.now,
                &ep.protocol.as_str(),
                &ep.client_id,
            ],
        )
        .await?;
        Ok(())
    }

    /// See [`crate::store::Store::endpoint_index`].
    pub async fn endpoint_index(&self, id: String, index: EndpointIndex) -> Result<IndexApplied> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let applied = apply_index(&tx, self.triggers(), &id, &index).await?;
        tx.commit().await?;
        Ok(applied)
    }

    /// See [`crate::store::Store::endpoint_report`].
    pub async fn endpoint_report(&self, id: String, report: EndpointReport) -> Result<()> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let Some(r) = rows(
            &tx,
            "SELECT errors FROM endpoints WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await?
        .into_iter()
        .next() else {
            return Ok(());
        };
        let errors = merge_errors(&r.try_get::<_, String>(0)?, &report.errors)?;
        let last_error = report.errors.iter().map(|(at, _)| *at).max();
        exec(
            &tx,
            "UPDATE endpoints SET errors = $2, \
             last_ok_at = CASE WHEN $3::int8 > coalesce(last_ok_at, -1) THEN $3::int8 ELSE last_ok_at END, \
             last_error_at = CASE WHEN $4::int8 > coalesce(last_error_at, -1) THEN $4::int8 ELSE last_error_at END \
             WHERE id = $1",
            &[&id, &errors, &report.ok_at, &last_error],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// See [`crate::store::Store::endpoint_remove`].
    pub async fn endpoint_remove(&self, id: String, now: i64) -> Result<IndexApplied> {
        let mut client = self.conn().await?;
        let tx = self.begin(&mut client).await?;
        let url = endpoint_lock(&tx, &id).await?;
        let mut removed = Vec::new();
        for r in rows(
            &tx,
            "SELECT id FROM jobs WHERE endpoint_id = $1 ORDER BY id",
            &[&id],
        )
        .await?
        {
            removed.push(r.try_get::<_, String>(0)?);
        }
        let cancelled_runs = jobs_remove(&tx, self.triggers(), &removed, &url, now).await?;
        exec(&tx, "DELETE FROM endpoints WHERE id = $1", &[&id]).await?;
        tx.commit().await?;
        Ok(IndexApplied {
            removed,
            cancelled_runs,
        })
    }

    /// See [`crate::store::Store::endpoints_load`].
    pub async fn endpoints_load(&self) -> Result<Vec<StoredEndpoint>> {
        let client = self.conn().await?;
        rows(
            &client,
            &format!("SELECT {ENDPOINT_COLUMNS} FROM endpoints ORDER BY url"),
            &[],
        )
        .await?
        .iter()
        .map(|r| endpoint_row(r)?.into_stored())
        .collect()
    }

    /// See [`crate::store::Store::endpoints_revision`].
    pub async fn endpoints_revision(&self) -> Result<(i64, i64)> {
        let client = self.conn().await?;
        let r = rows(
            &client,
            "SELECT count(*), coalesce(sum(updated_at), 0)::int8 FROM endpoints",
            &[],
        )
        .await?;
        match r.first() {
            Some(r) => Ok((r.try_get(0)?, r.try_get(1)?)),
            None => Ok((0, 0)),
        }
    }
}
