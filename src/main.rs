//! The `hookgate` binary: parse the command line and hand over to [`hookgate::cli`].

// The future of `main` nests every command's, `serve` down to the admin listener's
// replay and the start-up's store steps: laying it out takes more than the default 128
// nested queries (`queries overflow the depth limit`), and boxing one step more each
// time it grows only moves the edge.
#![recursion_limit = "256"]

use clap::Parser as _;

/// mimalloc instead of the system allocator: a delivery makes a few dozen short-lived
/// allocations on two or more worker threads, and the profile under load showed the
/// system allocator's arena locks and consolidation at ~8 % of the gateway's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = hookgate::cli::Cli::parse();
    match hookgate::cli::run(cli).await {
        Ok(0) => std::process::ExitCode::SUCCESS,
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("hookgate: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
