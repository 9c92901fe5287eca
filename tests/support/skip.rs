//! A test that cannot run here says so where `cargo test` shows it. Rust's test harness has no
//! "skipped" outcome decided at run time, and it captures `eprintln!` of a passing test (shown
//! only with `--nocapture`), so a skip used to look like a pass in 0.01 s. [`skip`] writes its
//! line to the process's stderr directly (the harness captures only the print macros), so
//! `cargo test` shows `SKIPPED <test>: <why>` beside the test's `ok`; under `CI` it panics
//! instead, since CI must run every test.

use std::io::Write;

/// Says that the current test is skipped and why (visible without `--nocapture`); panics when
/// `CI` is set. The caller then returns.
pub fn skip(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
        panic!("{test} cannot run, and CI is set (every test must run there): {why}");
    }
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
}
