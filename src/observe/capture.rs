//! Capturing deliveries as replay files (`serve --capture DIR` or `[capture]`).
//!
//! Capturing never delays or fails a delivery: requests hand their capture to a
//! bounded queue and move on; a dedicated thread writes the files. A full queue or a
//! failing disk drops captures, counts them (`hookgate_captures_total{result}`) and
//! logs, and the gateway keeps serving. Each file is written to a temporary name and
//! renamed, so a reader never sees half a file; the oldest files are removed beyond
//! `max_files` or `max_bytes`.
//!
//! What an outsider sends cannot fill the disk: requests the gateway refused are
//! captured only with `refused = true`; captures waiting in memory are bounded by
//! bytes; a body that JSON would escape into more bytes than base64 is written as
//! base64; files are created readable by their owner only (0600, the folder 0700); and
//! no capture is written while the filesystem has less free space than the store's
//! reserve (`store.min_free_space`).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::mpsc;

use crate::observe::metrics::ResultLabel;
use crate::replay::Replay;

/// Captures waiting to be written before new ones are dropped.
const QUEUE: usize = 1024;
/// Body bytes of the captures waiting to be written, at most.
const QUEUE_BYTES: usize = 16 << 20;

/// The capture writer's handle.
#[derive(Debug)]
pub struct Capture {
    tx: mpsc::Sender<Replay>,
    /// Whether deliveries sent by `hookgate replay` (marked with
    /// [`crate::replay::REPLAY_HEADER`]) are captured too (`[capture] replays`).
    replays: bool,
    counts: Family<ResultLabel, Counter>,
    dropped: AtomicU64,
    /// Body bytes waiting in the queue.
    queued: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Whether refused requests are captured.
    refused: bool,
}

fn count(counts: &Family<ResultLabel, Counter>, result: &str) {
    counts
        .get_or_create(&ResultLabel {
            result: result.into(),
        })
        .inc();
}

impl Capture {
    /// Starts the writer thread for `cfg.dir` (created if missing, 0700), which keeps
    /// `reserve` bytes free on its filesystem.
    pub fn start(
        cfg: &crate::config::CaptureConfig,
        reserve: u64,
        counts: Family<ResultLabel, Counter>,
    ) -> std::io::Result<Self> {
        let dir = cfg.dir.clone();
        let (max_files, max_bytes) = (cfg.max_files.max(1), cfg.max_bytes);
        // A directory that cannot be made is logged, not fatal: every write then fails
        // and is counted, and deliveries are served as usual.
        if let Err(e) = crate::files::private_dir(&dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "capture directory unavailable; captures will be dropped");
        }
        let (tx, mut rx) = mpsc::channel::<Replay>(QUEUE);
        let mut existing: Vec<(PathBuf, u64)> = std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| (e.path(), e.metadata().map_or(0, |m| m.len())))
                    .filter(|(p, _)| p.extension().is_some_and(|e| e == "json"))
                    .collect()
            })
            .unwrap_or_default();
        existing.sort();
        let mut total: u64 = existing.iter().map(|(_, n)| n).sum();
        let mut files: VecDeque<(PathBuf, u64)> = existing.into();
        let writer_counts = counts.clone();
        let queued = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let writer_queued = queued.clone();
        std::thread::Builder::new().name("hookgate-capture".into()).spawn(move || {
            let mut seq: u64 = 0;
            while let Some(r) = rx.blocking_recv() {
                writer_queued.fetch_sub(body_len(&r), Ordering::Relaxed);
                let json = r.to_json();
                if crate::files::free_space(&dir).is_some_and(|free| free < reserve.saturating_add(json.len() as u64)) {
                    count(&writer_counts, "low_space");
                    continue;
                }
                seq += 1;
                let route = r.route.as_deref().unwrap_or("unrouted");
                let name = format!("{:013}-{seq:06}-{route}.json", r.received_at);
                match write_atomic(&dir, &name, json.as_bytes()) {
                    Ok(path) => {
                        count(&writer_counts, "written");
                        total += json.len() as u64;
                        files.push_back((path, json.len() as u64));
                        while files.len() > max_files || (total > max_bytes && files.len() > 1) {
                            if let Some((old, n)) = files.pop_front() {
                                let _ = std::fs::remove_file(old);
                                total = total.saturating_sub(n);
                            }
                        }
                    }
                    Err(e) => {
                        count(&writer_counts, "failed");
                        tracing::warn!(dir = %dir.display(), error = %e, "capture not written; serving goes on");
                    }
                }
            }
        })?;
        Ok(Self {
            tx,
            replays: false,
            counts,
            dropped: AtomicU64::new(0),
            queued,
            refused: cfg.refused,
        })
    }

    /// Whether a request with this outcome is captured: verified deliveries always,
    /// refused ones only when asked.
    pub fn wants_outcome(&self, verified: bool) -> bool {
        verified || self.refused
    }

    /// Captures replayed deliveries too (`[capture] replays = true`).
    #[must_use]
    pub fn with_replays(mut self, replays: bool) -> Self {
        self.replays = replays;
        self
    }

    /// Whether a request with these headers is captured: not one `hookgate replay`
    /// sent, unless asked, so replay → capture → replay does not multiply files.
    pub fn wants(&self, headers: &http::HeaderMap) -> bool {
        self.replays || !headers.contains_key(crate::replay::REPLAY_HEADER)
    }

    /// Queues a capture; drops it (and counts) if the writer is behind.
    pub fn record(&self, mut r: Replay) {
        compact(&mut r);
        let len = body_len(&r);
        let queued = self.queued.fetch_add(len, Ordering::Relaxed);
        if queued.saturating_add(len) > QUEUE_BYTES {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            self.note_dropped();
            return;
        }
        if self.tx.try_send(r).is_err() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            self.note_dropped();
        }
    }

    fn note_dropped(&self) {
        count(&self.counts, "dropped");
        let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                dropped = n,
                "capture queue full or writer gone: captures dropped; serving goes on"
            );
        }
    }
}

/// The body bytes a capture holds.
fn body_len(r: &Replay) -> usize {
    r.body.as_ref().map_or(0, String::len) + r.body_base64.as_ref().map_or(0, String::len)
}

/// Writes the body as base64 when JSON would escape it into more bytes (control
/// characters become six bytes each; base64 is four for three).
fn compact(r: &mut Replay) {
    use base64::Engine as _;
    let Some(body) = &r.body else { return };
    let escaped: usize = body
        .chars()
        .map(|c| match c {
            '"' | '\\' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum();
    let encoded = body.len().div_ceil(3) * 4;
    if escaped > encoded {
        r.body_base64 = Some(base64::engine::general_purpose::STANDARD.encode(body.as_bytes()));
        r.body = None;
    }
}

fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let path = dir.join(name);
    {
        use std::io::Write as _;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        opts.open(&tmp)?.write_all(bytes)?;
    }
    std::fs::rename(&tmp, &path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    Ok(path)
}
