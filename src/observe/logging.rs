//! Logging: `tracing` with a pretty format on a terminal and JSON on request.
//! `RUST_LOG` overrides the default filter (`info`).

use tracing_subscriber::EnvFilter;

pub use crate::config::LogFormat;

/// Installs the global subscriber. Logs go to stderr, in colour only when stderr is a
/// terminal (a log file or a pipe gets plain text). Keep the returned guard for as long
/// as the process logs: dropping it writes what is still buffered.
#[must_use = "dropping the guard stops the log writer"]
pub fn init(format: LogFormat) -> LogGuard {
    use std::io::IsTerminal as _;
    let (writer, guard) = LogBuffer::start();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer);
    let _ = match format {
        // The same line, written faster (`log_line.rs`).
        LogFormat::Pretty => builder
            .fmt_fields(super::log_line::FastFields)
            .event_format(super::log_line::FastEvent::default())
            .try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    guard
}

/// How often buffered log lines are written.
const LOG_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(20);
/// Past this many buffered bytes, the thread that logs writes them itself.
const LOG_BUFFER_MAX: usize = 1 << 20;

/// Log lines collected in memory and written to stderr every [`LOG_FLUSH_EVERY`] by a
/// thread of their own. A line is formatted where it is logged and appended under a
/// lock; nothing wakes another thread per line and no line costs a system call of its
/// own (the profile showed both: a write per line on the request's thread, or, with a
/// channel to a writer thread, a wake-up per line). A burst past [`LOG_BUFFER_MAX`] is
/// written by the thread that logs, so memory stays bounded and nothing is dropped.
/// Hand-written: the usual non-blocking writers hand each line over a channel.
#[derive(Debug, Clone)]
struct LogBuffer {
    buf: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

/// Stops the log writer, writing what is left, when dropped.
#[derive(Debug)]
pub struct LogGuard {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LogBuffer {
    fn start() -> (Self, LogGuard) {
        let me = Self {
            buf: std::sync::Arc::default(),
        };
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let writer = me.clone();
        let thread = std::thread::Builder::new()
            .name("hookgate-log".into())
            .spawn(move || {
                loop {
                    let done = !matches!(
                        stopped.recv_timeout(LOG_FLUSH_EVERY),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                    );
                    writer.flush_to_stderr();
                    if done {
                        return;
                    }
                }
            })
            .ok();
        (
            me,
            LogGuard {
                stop: Some(stop),
                thread,
            },
        )
    }

    fn take(&self) -> Vec<u8> {
        std::mem::take(
            &mut *self
                .buf
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn flush_to_stderr(&self) {
        use std::io::Write as _;
        let data = self.take();
        if !data.is_empty() {
            let _ = std::io::stderr().lock().write_all(&data);
        }
    }
}

/// The writer of one log line.
#[derive(Debug)]
struct LogLine<'a>(&'a LogBuffer);

impl std::io::Write for LogLine<'_> {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        let full = {
            let mut buf = self
                .0
                .buf
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            buf.extend_from_slice(line);
            buf.len() >= LOG_BUFFER_MAX
        };
        if full {
            self.0.flush_to_stderr();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogLine<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LogLine(self)
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the log line shows for a field the request never reached (no route, no ID).
pub(crate) const NONE: &str = "-";

/// Which of the route's secrets matched, for the log line: its 0-based position in
/// `secrets`, or `none` (not verified, or a provider that signs nothing).
struct SecretUsed(Option<usize>);

impl std::fmt::Display for SecretUsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(i) => write!(f, "{i}"),
            None => f.write_str("none"),
        }
    }
}

/// The one log line of a request, at `warn` when the gateway or its store failed.
pub(crate) fn delivery_line(
    rec: &super::RequestRecord,
    outcome: crate::outcome::Outcome,
    status: u16,
    elapsed_us: u64,
) {
    use crate::outcome::Outcome;
    let route = rec.route.as_deref().unwrap_or(NONE);
    let event_id = rec.event_id.as_deref().unwrap_or(NONE);
    let event_type = rec.event_type.as_deref().unwrap_or(NONE);
    let detail = rec.detail.as_deref().unwrap_or("");
    let secret = SecretUsed(rec.secret_index);
    macro_rules! line {
        ($level:ident) => {
            tracing::$level!(
                route,
                event_id,
                event_type,
                outcome = outcome.as_str(),
                status,
                elapsed_us,
                %secret,
                detail,
                "delivery"
            )
        };
    }
    match outcome {
        Outcome::UpstreamError | Outcome::StoreError | Outcome::ForwardedUnclaimed => {
            line!(warn)
        }
        _ => line!(info),
    }
}
