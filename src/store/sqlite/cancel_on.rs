//! Cancelling runs on an event on SQLite (`0031_cancel_on.sql`): a run of a job with `cancel_on`
//! is armed when it is created (one key per entry), the insert of an event looks up the runs it
//! cancels by that key, and a run's keys are dropped when it ends. Every write goes through the
//! one writer, so an event and a run's creation never overlap: an event cancels exactly the
//! matching runs that existed when it was inserted.

use rusqlite::{params, Connection};
use serde_json::Value;

use super::rows::opt_json;
use super::writer::WriteCtx;
use crate::model::wait::{event_value, match_key};
use crate::model::{EventFields, EventWait, JobSpec};
use crate::store::Result;

/// Arms run `run_id` of `job`, just created at `now` for `event`: one key per `cancel_on` entry
/// whose match field the event has.
pub(super) fn arm(
    conn: &Connection,
    job: &JobSpec,
    run_id: &str,
    event: &EventFields<'_>,
    now: i64,
) -> Result<()> {
    if job.cancel_on.is_empty() {
        return Ok(());
    }
    let run_event = event_value(event.id, event.name, event.payload);
    for (n, on) in job.cancel_on.iter().enumerate() {
        let Some((key, until)) = on.key(&run_event, now) else {
            continue;
        };
        conn.prepare_cached(
            "INSERT OR REPLACE INTO run_cancel_keys \
               (run_id, n, event_name, match_path, match_value, condition, run_event, until) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            run_id,
            n as i64,
            key.event,
            key.match_path,
            key.match_value,
            key.condition,
            key.run_event.as_ref().map(Value::to_string),
            until
        ])?;
        conn.prepare_cached(
            "INSERT OR IGNORE INTO cancel_paths (event_name, match_path) VALUES (?1, ?2)",
        )?
        .execute(params![key.event, key.match_path])?;
    }
    Ok(())
}

/// The queued or running runs (a waiting run is queued) that the event `id` just delivered at
/// `now` cancels: armed with a key it matches, still armed at `now`, and not started by it.
pub(super) fn matched(
    ctx: &mut WriteCtx<'_>,
    id: &str,
    name: &str,
    payload: &Value,
    now: i64,
) -> Result<Vec<String>> {
    let conn = ctx.conn;
    let paths = ctx.paths.cancels(conn, name)?;
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let incoming = event_value(id, name, payload);
    let mut runs: Vec<String> = Vec::new();
    for path in paths.iter() {
        let value = if path.is_empty() {
            String::new()
        } else {
            match match_key(&incoming, path) {
                Some(v) => v,
                None => continue,
            }
        };
        let mut stmt = conn.prepare_cached(
            "SELECT k.run_id, k.condition, k.run_event FROM run_cancel_keys k JOIN runs r ON r.id = k.run_id \
             WHERE k.event_name = ?1 AND k.match_path = ?2 AND k.match_value = ?3 \
               AND (k.until IS NULL OR k.until > ?4) \
               AND r.status IN ('queued', 'running') AND r.event_id <> ?5",
        )?;
        let mut rows = stmt.query(params![name, path, value, now, id])?;
        while let Some(r) = rows.next()? {
            let run: String = r.get(0)?;
            let key = EventWait {
                event: name.to_string(),
                match_path: path.clone(),
                match_value: value.clone(),
                condition: r.get(1)?,
                run_event: opt_json(r.get(2)?)?,
            };
            if key.accepts(&incoming) && !runs.contains(&run) {
                runs.push(run);
            }
        }
    }
    Ok(runs)
}

/// Drops run `run_id`'s keys: it ended.
pub(super) fn disarm(conn: &Connection, run_id: &str) -> Result<()> {
    conn.prepare_cached("DELETE FROM run_cancel_keys WHERE run_id = ?1")?
        .execute([run_id])?;
    Ok(())
}

/// Drops the keys of the runs `ended` (ids first): they ended. One statement for all, and none
/// while no run has keys (one probe instead of one per run).
pub(super) fn disarm_all(conn: &Connection, ended: &[(&str, i64)]) -> Result<()> {
    let armed = || -> Result<bool> {
        Ok(conn
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM run_cancel_keys)")?
            .query_row([], |r| r.get(0))?)
    };
    if ended.is_empty() || !armed()? {
        return Ok(());
    }
    let ids = serde_json::to_string(&ended.iter().map(|e| e.0).collect::<Vec<_>>())
        .map_err(|e| crate::store::Error::Corrupt(e.to_string()))?;
    conn.prepare_cached(
        "DELETE FROM run_cancel_keys WHERE run_id IN (SELECT value FROM json_each(?1))",
    )?
    .execute([ids])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::query::tests::db;

    /// The keys of the runs that ended go, the others stay.
    #[test]
    fn ended_runs_are_disarmed_and_no_other() {
        let (_dir, conn) = db();
        super::disarm_all(&conn, &[("run_a", 1)]).expect("nothing armed");
        for run in ["run_a", "run_b"] {
            conn.execute(
                "INSERT INTO run_cancel_keys (run_id, n, event_name, match_path, match_value) \
                 VALUES (?1, 0, 'order.cancelled', 'payload.id', 'o1')",
                [run],
            )
            .expect("arm");
        }
        super::disarm_all(&conn, &[("run_a", 1), ("run_c", 1)]).expect("disarm");
        let left: Vec<String> = conn
            .prepare("SELECT run_id FROM run_cancel_keys")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        assert_eq!(left, vec!["run_b".to_string()]);
    }
}
