//! The process signals: the first SIGTERM or SIGINT stops the gateway, SIGHUP reloads.
//!
//! Each is registered before the listeners are bound: a signal that arrives before
//! its handler exists takes the default action, and for SIGHUP that ends the process.

/// The signals the gateway answers, registered when this is built.
#[allow(missing_debug_implementations)] // tokio's Signal has no Debug
pub struct Signals {
    #[cfg(unix)]
    stop: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
    #[cfg(unix)]
    hangup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Registers SIGTERM, SIGINT and SIGHUP now (inside a Tokio runtime).
    pub fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let stop = signal(SignalKind::terminate())
                .and_then(|term| Ok((term, signal(SignalKind::interrupt())?)))
                .ok();
            let hangup = signal(SignalKind::hangup()).ok();
            Self { stop, hangup }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// The SIGHUP stream, taken once by the reloader.
    #[cfg(unix)]
    pub fn take_hangup(&mut self) -> Option<tokio::signal::unix::Signal> {
        self.hangup.take()
    }

    /// Resolves on SIGTERM or SIGINT (Ctrl-C).
    pub async fn stopped(self) {
        #[cfg(unix)]
        if let Some((mut term, mut int)) = self.stop {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = int.recv() => tracing::info!("SIGINT received"),
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
