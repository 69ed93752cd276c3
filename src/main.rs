//! The `hookgate` binary: parse the command line and hand over to [`hookgate::cli`].

use clap::Parser as _;

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
