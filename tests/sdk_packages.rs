//! The SDKs' own tests and type checks, run by `cargo test` so that "every test" includes them:
//! `npm test` and `npm run typecheck` in `sdk/typescript`, `pytest` and `mypy` in `sdk/python`.
//!
//! Each needs its ecosystem's tools: `sdk/typescript/node_modules` (`npm ci --prefix
//! sdk/typescript`), and a Python with pytest and mypy (`FLARE_SDK_PYTHON`, else `python3`;
//! `.ci/run` makes a virtual environment and sets it). Without them a test skips with a message
//! saying what is missing, and fails instead when `CI` is set.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `program args` in `dir`, failing the test with its output when it fails.
fn check(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} in {} failed ({}):\n{}\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `Some(why)` when the tools are missing: skipped with a line `cargo test` shows, or a failure
/// under `CI`.
fn skip(why: Option<String>) -> bool {
    let Some(why) = why else { return false };
    support::skip::skip(&why);
    true
}

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|out| out.status.success())
}

#[test]
fn the_typescript_sdk_passes_its_tests_and_type_check() {
    let dir = root().join("sdk/typescript");
    let missing = if !runs("npm", &["--version"]) {
        Some("`npm` is not installed".to_string())
    } else if !dir.join("node_modules").exists() {
        Some("sdk/typescript/node_modules is missing (run `npm ci --prefix sdk/typescript`)".into())
    } else {
        None
    };
    if skip(missing) {
        return;
    }
    check(&dir, "npm", &["run", "--silent", "typecheck"]);
    check(&dir, "npm", &["test", "--silent"]);
}

#[test]
fn the_python_sdk_passes_its_tests_and_type_check() {
    let dir = root().join("sdk/python");
    let python = std::env::var("FLARE_SDK_PYTHON").unwrap_or_else(|_| "python3".into());
    let missing = if !runs(&python, &["--version"]) {
        Some(format!("`{python}` is not installed"))
    } else if !runs(&python, &["-c", "import pytest, mypy"]) {
        Some(format!(
            "`{python}` lacks pytest or mypy (`pip install pytest mypy`, or set FLARE_SDK_PYTHON)"
        ))
    } else {
        None
    };
    if skip(missing) {
        return;
    }
    check(&dir, &python, &["-m", "pytest", "-q"]);
    check(&dir, &python, &["-m", "mypy"]);
}
