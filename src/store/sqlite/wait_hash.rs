//! The hash of a wait's event name, match path and value that SQLite's `run_waits_match`
//! indexes (`0056_wait_match_hash.sql`), computed by the writer for each wait it stores and each
//! value it looks up, and by that migration for the waits stored before it.

use rusqlite::Connection;

use crate::store::Result;

/// The hash `run_waits_match` indexes (`0056_wait_match_hash.sql`): the first 8 bytes of the
/// SHA-256 of the event name, match path and value, each after its length. The same in every
/// process and version (it is stored), and not one a sender can aim at to pile its values on
/// another's: a lookup reads every row of its hash.
pub(super) fn match_hash(name: &str, path: &str, value: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [name, path, value] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let digest = h.finalize();
    i64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

/// Gives `conn` the SQL function `flare_match_hash(name, path, value)`: [`match_hash`], for the
/// migration that hashes the waits stored before it (and the unit tests' rows).
pub(super) fn install(conn: &Connection) -> Result<()> {
    use rusqlite::functions::FunctionFlags;
    conn.create_scalar_function(
        "flare_match_hash",
        3,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            Ok(match_hash(
                &ctx.get::<String>(0)?,
                &ctx.get::<String>(1)?,
                &ctx.get::<String>(2)?,
            ))
        },
    )?;
    Ok(())
}
