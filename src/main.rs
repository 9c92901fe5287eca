//! The `flare` command: `serve` runs the service; the rest talk to it or measure it. The command
//! line itself is `flare::App` (`src/app.rs`), which applications use for binaries of their own.

fn main() -> std::process::ExitCode {
    flare::App::flare().run()
}
