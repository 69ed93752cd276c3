//! `hookgate serve`: run the gateway.

use std::path::PathBuf;

use crate::app::{App, Listeners};
use crate::config::LogFormat;
use crate::config::{self, Backend, Config};
use crate::observe::logging;
use crate::state::Clock;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The config file.
    #[arg(long, short, default_value = "config.toml")]
    config: PathBuf,
    /// Log format (pretty on a terminal, json for log pipelines); overrides
    /// `server.log_format`.
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
    /// Write every received delivery as a replay file into this directory
    /// (overrides `[capture] dir`).
    #[arg(long)]
    capture: Option<PathBuf>,
}

pub(super) async fn run(args: ServeArgs) -> anyhow::Result<i32> {
    let ServeArgs {
        config,
        log_format,
        capture,
    } = args;
    let mut cfg = match config::load(&config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return Ok(1);
        }
    };
    if let Some(dir) = capture {
        cfg.capture = Some(match cfg.capture.take() {
            Some(c) => config::CaptureConfig { dir, ..c },
            None => config::CaptureConfig::into_dir(dir),
        });
    }
    let _log = logging::init(
        log_format
            .or(cfg.server.log_format)
            .unwrap_or(LogFormat::Pretty),
    );
    serve(cfg).await?;
    Ok(0)
}

/// Runs the gateway until SIGTERM or SIGINT; SIGHUP reloads the config.
pub async fn serve(cfg: Config) -> anyhow::Result<()> {
    let mut signals = crate::shutdown::Signals::install();
    raise_open_files(&cfg);
    let listeners = Listeners::bind(&cfg.server).await?;
    let app = App::build(&cfg, Clock::System)?;
    tracing::info!(
        listen = %listeners.public.local_addr()?,
        admin = ?cfg.server.admin_listen,
        store = app.store().kind(),
        routes = cfg.routes.len(),
        "hookgate serving"
    );
    if matches!(cfg.store.backend, Backend::Memory) {
        tracing::info!(
            "memory store: dedup state is lost on restart and not shared between replicas"
        );
    }
    #[cfg(unix)]
    if let Some(mut hup) = signals.take_hangup() {
        let reloader = app.reloader().clone();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP received: reloading the config");
                let _ = reloader.reload().await;
            }
        });
    }
    app.run(listeners, signals.stopped()).await
}

/// Raises the soft limit on open files to the hard one (where the system allows it):
/// the common soft limit of 1 024 is below `server.max_connections`, and a gateway at
/// it stops accepting connections. Says so when even the hard limit is below.
fn raise_open_files(cfg: &Config) {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let mut raised = limit;
        if limit.current < limit.maximum {
            raised.current = limit.maximum;
            if setrlimit(Resource::Nofile, raised).is_err() {
                raised = limit;
            }
        }
        let want = cfg.server.max_connections as u64 + 64;
        if let Some(soft) = raised.current
            && soft < want
        {
            tracing::warn!(
                open_files = soft,
                max_connections = cfg.server.max_connections,
                "the open-file limit is below server.max_connections: raise it (systemd: LimitNOFILE; a container: --ulimit nofile) or lower max_connections"
            );
        }
    }
    #[cfg(not(unix))]
    let _ = cfg;
}
