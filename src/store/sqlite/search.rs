//! The payload search's index (`0014_search.sql`): an FTS5 table with the `trigram` tokenizer
//! over the events' payload text, so a search for rare text over all time reads a few index pages
//! instead of every payload (0.6-0.9 s at a million events with `LIKE '%text%'`).
//!
//! **Fed asynchronously, behind a watermark.** The event insert path is the throughput path, so
//! it does no indexing (no trigger, no extra statement): [`index_chunk`], run through the writer by
//! the maintenance loop, indexes the events whose `seq` is above `search_progress.indexed_seq`,
//! oldest first and a chunk per write, and moves the watermark in the same transaction. Every
//! write goes through the one writer and `seq` grows with each insert, so no event can appear
//! below the watermark after it moved.
//!
//! **Searches are always complete**: the event list (`query.rs`, `events_page`) reads the not-yet-indexed tail
//! (`seq > watermark`, the newest events) with the old `LIKE` walk, then the indexed part through
//! the FTS table, newest first, both in one read snapshot. The index is asked for the events
//! holding the term's first [`MAX_TRIGRAMS`] distinct trigrams (see [`trigrams`]: bounded work
//! and memory whatever the term and the payloads), and each candidate it finds is checked again
//! with the same `LIKE` on `events.payload`, so the results are exactly those of the scan: ASCII
//! letters match either case, other characters exactly (the trigram index folds case more
//! widely, so it finds a superset). Terms shorter than three characters have no trigram and use
//! the scan alone; terms longer than
//! [`MAX_SEARCH_CHARS`](crate::store::events::MAX_SEARCH_CHARS) are refused by the store.
//!
//! **Contentless, deleted by rowid.** The table is `content=''` with `contentless_delete=1`,
//! keyed by `events.seq`: the payload is already stored once in `events` (the re-check reads it
//! there), so a copy in the index would double the history's size for nothing, and an
//! external-content table would need each pruned payload read back to delete its trigrams. Pruning
//! calls [`forget`] inside its transaction, so no index row outlives its event.

use rusqlite::{params, Connection};

use crate::store::Result;

/// Events indexed per write. Every send that arrives while a chunk is written waits for it, and
/// FTS5 merges its segments inside such writes now and then: with chunks of 2,000, `POST
/// /trigger`'s p99 under load was 19–20 ms against 3.5 ms without the index. Catching up on a
/// million events took 33.5 s for 282,500 of them (≈ 30 ms a chunk, merges included), so while
/// the writer is busy the chunk is cut further ([`BUSY_CHUNK`]).
pub const CHUNK: usize = 250;

/// Events indexed per write while the writer is busy (see `SqliteStore::search_index`).
pub const BUSY_CHUNK: usize = 50;

/// The shortest term the trigram index can look up, in characters.
const MIN_TERM: usize = 3;

/// Most trigrams of a term the index looks up (see [`trigrams`]): enough to make a candidate that
/// lacks the term rare, few enough that the lookup's cursors stay small.
const MAX_TRIGRAMS: usize = 16;

/// The highest `seq` indexed so far.
pub(super) fn watermark(conn: &Connection) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT indexed_seq FROM search_progress WHERE id = 1")?
        .query_row([], |r| r.get(0))?)
}

/// Indexes up to `limit` events above the watermark, oldest first, and moves the watermark past
/// them. Returns how many were indexed (fewer than `limit`: caught up).
pub(super) fn index_chunk(conn: &Connection, limit: usize) -> Result<usize> {
    let from = watermark(conn)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let n = conn
        .prepare_cached(
            "INSERT INTO event_search (rowid, body) \
             SELECT seq, payload FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?
        .execute(params![from, limit])?;
    if n > 0 {
        conn.prepare_cached(
            "UPDATE search_progress SET indexed_seq = \
               (SELECT max(seq) FROM (SELECT seq FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2)) \
             WHERE id = 1",
        )?
        .execute(params![from, limit])?;
    }
    Ok(n)
}

/// Removes the events listed in `ids` (a JSON array of ids) from the index; call it in the
/// transaction that deletes them, before the delete.
///
/// Also keeps the watermark at or below the newest event that stays: `seq` is SQLite's rowid
/// (no `AUTOINCREMENT`), so once the newest events are gone the next insert reuses their numbers,
/// and those must count as not indexed yet.
pub(super) fn forget(conn: &Connection, ids: &str) -> Result<()> {
    conn.prepare_cached(
        "DELETE FROM event_search WHERE rowid IN \
           (SELECT seq FROM events WHERE id IN (SELECT value FROM json_each(?1)))",
    )?
    .execute([ids])?;
    conn.prepare_cached(
        "UPDATE search_progress SET indexed_seq = min(indexed_seq, coalesce( \
           (SELECT seq FROM events WHERE id NOT IN (SELECT value FROM json_each(?1)) \
            ORDER BY seq DESC LIMIT 1), 0)) \
         WHERE id = 1",
    )?
    .execute([ids])?;
    Ok(())
}

/// The FTS5 query finding the events that may contain `text`: the first [`MAX_TRIGRAMS`] distinct
/// trigrams of `text`, each a one-token phrase (quotes doubled), all required.
///
/// Not `text` as one phrase: FTS5 gives each token of a phrase its own cursor, and each copies the
/// token's positions in the event at hand, so a phrase of the same trigram repeated (`aaa…a`)
/// over an event holding it at every position cost the term's length times the payload's
/// (523 MB for 1,000 `a` over one event of 500,000). Distinct trigrams hold each position of an
/// event at most once, and a few of them select about as well as all: every candidate is checked
/// again with the scan's `LIKE`, which is what decides.
pub(super) fn trigrams(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut picked: Vec<String> = Vec::new();
    for w in chars.windows(MIN_TERM) {
        let t: String = w.iter().collect();
        // The tokenizer folds case, so the same trigram in another case adds nothing. (Only
        // ASCII is compared folded here; the trigram itself goes to FTS5 as written, which folds
        // it as it folded the payloads.)
        if !picked.iter().any(|p| p.eq_ignore_ascii_case(&t)) {
            picked.push(t);
            if picked.len() == MAX_TRIGRAMS {
                break;
            }
        }
    }
    picked
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// Whether the index can answer a search for `text` (else the scan does).
pub(super) fn indexable(text: &str) -> bool {
    text.chars().count() >= MIN_TERM
}

/// Where the index differs from the events, one line per event; empty when they agree. For the
/// tests' drift check: an index row whose event is gone (pruned without [`forget`]), or an event
/// at or below the watermark that is not indexed.
pub(super) fn drift(conn: &Connection) -> Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT 'search: index row ' || rowid || ' has no event' FROM event_search \
           WHERE rowid NOT IN (SELECT seq FROM events) \
         UNION ALL \
         SELECT 'search: event ' || seq || ' is below the watermark but not indexed' FROM events \
           WHERE seq <= (SELECT indexed_seq FROM search_progress) \
             AND seq NOT IN (SELECT rowid FROM event_search)",
    )?;
    let lines = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(lines)
}

/// How far the index has come: the watermark and the events above it.
pub(super) fn backlog(conn: &Connection) -> Result<(i64, u64)> {
    let at = watermark(conn)?;
    let behind: u64 = conn
        .prepare_cached("SELECT count(*) FROM events WHERE seq > ?1")?
        .query_row([at], |r| r.get(0))?;
    Ok((at, behind))
}

#[cfg(test)]
mod tests {
    use super::super::query::{events_page, events_where, Walk};
    use super::*;
    use crate::store::EventQuery;
    use rusqlite::params_from_iter;

    fn db() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut conn = Connection::open(dir.path().join("search.db")).expect("open");
        super::super::migrate(&mut conn).expect("migrate");
        (dir, conn)
    }

    fn insert(conn: &Connection, id: &str, payload: &str) -> i64 {
        conn.execute(
            "INSERT INTO events (id, name, payload, source, timestamp, delivered_at) \
             VALUES (?1, 'n', ?2, 'api', 0, 0)",
            params![id, payload],
        )
        .expect("insert");
        conn.last_insert_rowid()
    }

    fn found(conn: &Connection, text: &str) -> Vec<String> {
        let q = EventQuery {
            q: Some(text.into()),
            ..EventQuery::default()
        };
        events_page(conn, &q, text, |r| Ok(r.get::<_, String>(0)?)).expect("search")
    }

    #[test]
    fn the_bundled_sqlite_has_fts5_trigram_with_contentless_delete() {
        let (_dir, conn) = db();
        insert(&conn, "a", r#"{"email":"Ada@Example.com"}"#);
        assert_eq!(index_chunk(&conn, 10).expect("index"), 1);
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM event_search WHERE event_search MATCH '\"ada@ex\"'",
                [],
                |r| r.get(0),
            )
            .expect("match");
        assert_eq!(n, 1);
        conn.execute("DELETE FROM event_search WHERE rowid = 1", [])
            .expect("contentless delete");
    }

    #[test]
    fn search_reads_the_index_and_the_tail_with_the_scans_semantics() {
        let (_dir, conn) = db();
        insert(&conn, "old", r#"{"email":"ada@example.com","n":"50%"}"#);
        insert(&conn, "other", r#"{"email":"bob@example.com"}"#);
        index_chunk(&conn, CHUNK).expect("index");
        insert(&conn, "new", r#"{"email":"ADA@example.com"}"#);
        assert_eq!(backlog(&conn).expect("backlog"), (2, 1));
        // Newest first, the tail's match before the indexed one.
        assert_eq!(found(&conn, "ada@exa"), ["new", "old"]);
        assert_eq!(found(&conn, "\"n\":\"50%"), ["old"]);
        // LIKE folds ASCII only: the index's wider folding is checked away.
        insert(&conn, "e", r#"{"name":"ÉMILE"}"#);
        index_chunk(&conn, CHUNK).expect("index");
        assert!(found(&conn, "émile").is_empty());
        assert_eq!(found(&conn, "ÉMILE"), ["e"]);
    }

    #[test]
    fn the_index_is_asked_for_a_few_distinct_trigrams() {
        // One cursor per distinct trigram, not one per position: `aaa…a` is one lookup.
        assert_eq!(trigrams(&"a".repeat(256)), "\"aaa\"");
        assert_eq!(trigrams("AaAab"), "\"AaA\" AND \"Aab\"");
        assert_eq!(
            trigrams("say \"hi\""),
            "\"say\" AND \"ay \" AND \"y \"\"\" AND \" \"\"h\" AND \"\"\"hi\" AND \"hi\"\"\""
        );
        let long: String = ('a'..='z').chain('A'..='Z').collect();
        assert_eq!(trigrams(&long).split(" AND ").count(), MAX_TRIGRAMS);
    }

    #[test]
    fn candidates_of_the_trigrams_are_checked_with_the_scans_like() {
        let (_dir, conn) = db();
        // Every trigram of the term, in another order: the index finds it, LIKE refuses it.
        insert(&conn, "scattered", r#"{"a":"pqrX","b":"qrsX","c":"rstX"}"#);
        // The same first 21 characters (the 16 trigrams asked for and more), then a difference.
        let term = "0123456789abcdefghij-tail";
        insert(&conn, "near", r#"{"t":"0123456789abcdefghij-TAIX"}"#);
        insert(
            &conn,
            "exact",
            &format!(r#"{{"t":"{}"}}"#, term.to_uppercase()),
        );
        index_chunk(&conn, CHUNK).expect("index");
        assert!(found(&conn, "pqrst").is_empty());
        assert_eq!(found(&conn, "qrsX"), ["scattered"]);
        assert_eq!(found(&conn, term), ["exact"]);
        assert_eq!(found(&conn, &"a".repeat(40)), Vec::<String>::new());
    }

    #[test]
    fn pages_continue_from_the_tail_into_the_index() {
        let (_dir, conn) = db();
        for i in 0..5 {
            insert(&conn, &format!("e{i}"), r#"{"tag":"needle"}"#);
        }
        index_chunk(&conn, 3).expect("index");
        let q = EventQuery {
            q: Some("needle".into()),
            limit: 3,
            ..EventQuery::default()
        };
        let seqs = events_page(&conn, &q, "needle", |r| Ok(r.get::<_, i64>(10)?)).expect("page");
        assert_eq!(seqs, [5, 4, 3, 2]);
        let next = EventQuery {
            cursor: Some(crate::store::query::Cursor::after(3)),
            ..q
        };
        let seqs = events_page(&conn, &next, "needle", |r| Ok(r.get::<_, i64>(10)?)).expect("page");
        assert_eq!(seqs, [2, 1]);
    }

    #[test]
    fn forgetting_events_removes_their_index_rows_and_lowers_the_watermark() {
        let (_dir, conn) = db();
        insert(&conn, "a", r#"{"x":"needle"}"#);
        insert(&conn, "b", r#"{"x":"needle"}"#);
        index_chunk(&conn, CHUNK).expect("index");
        forget(&conn, r#"["a","b"]"#).expect("forget");
        conn.execute("DELETE FROM events", []).expect("delete");
        let left: i64 = conn
            .query_row("SELECT count(*) FROM event_search", [], |r| r.get(0))
            .expect("count");
        assert_eq!(left, 0);
        // The next insert reuses seq 1: it must count as not indexed.
        assert_eq!(insert(&conn, "c", r#"{"x":"needle"}"#), 1);
        assert_eq!(found(&conn, "needle"), ["c"]);
        assert_eq!(index_chunk(&conn, CHUNK).expect("index"), 1);
        assert_eq!(found(&conn, "needle"), ["c"]);
    }

    #[test]
    fn the_index_drives_the_search_newest_first() {
        let (_dir, conn) = db();
        conn.execute("UPDATE search_progress SET indexed_seq = 10", [])
            .expect("watermark");
        // A time bound is a filter here: the index bounds the walk, and finding the window's
        // smallest seq would read every entry of events_timestamp in the window.
        let q = EventQuery {
            q: Some("needle".into()),
            from: Some(crate::model::ms_to_time(1_000)),
            ..EventQuery::default()
        };
        let mut w = events_where(&q, Walk::Bounded);
        let m = w.param(trigrams("needle"));
        let sql = format!(
            "EXPLAIN QUERY PLAN SELECT events.seq FROM event_search CROSS JOIN events \
               ON events.seq = event_search.rowid WHERE event_search MATCH {m} AND {} \
             ORDER BY event_search.rowid DESC LIMIT 51",
            w.conds.join(" AND ")
        );
        let plan: Vec<String> = conn
            .prepare(&sql)
            .expect("plan")
            .query_map(params_from_iter(w.params.iter()), |r| r.get(3))
            .expect("plan")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        let plan = plan.join("\n");
        assert!(plan.contains("VIRTUAL TABLE INDEX"), "{plan}");
        assert!(
            plan.contains("SEARCH events USING INTEGER PRIMARY KEY"),
            "{plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        assert!(!plan.contains("events_timestamp"), "{plan}");
    }
}
