//! Capturing deliveries as replay files (`serve --capture DIR` or `[capture]`).
//!
//! Capturing never delays or fails a delivery: requests hand their capture to a
//! bounded queue and move on; a dedicated thread writes the files. A full queue or a
//! failing disk drops captures, counts them (`hookgate_captures_total{result}`) and
//! logs, and the gateway keeps serving. Each file is written to a temporary name and
//! renamed, so a reader never sees half a file; the oldest files are removed beyond
//! `max_files`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::mpsc;

use crate::replay::Replay;
use crate::telemetry::ResultLabel;

/// Captures waiting to be written before new ones are dropped.
const QUEUE: usize = 1024;

/// The capture writer's handle.
#[derive(Debug)]
pub struct Capture {
    tx: mpsc::Sender<Replay>,
    counts: Family<ResultLabel, Counter>,
    dropped: AtomicU64,
}

fn count(counts: &Family<ResultLabel, Counter>, result: &str) {
    counts
        .get_or_create(&ResultLabel {
            result: result.into(),
        })
        .inc();
}

impl Capture {
    /// Starts the writer thread for `dir` (created if missing).
    pub fn start(
        dir: PathBuf,
        max_files: usize,
        counts: Family<ResultLabel, Counter>,
    ) -> std::io::Result<Self> {
        // A directory that cannot be made is logged, not fatal: every write then fails
        // and is counted, and deliveries are served as usual.
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "capture directory unavailable; captures will be dropped");
        }
        let (tx, mut rx) = mpsc::channel::<Replay>(QUEUE);
        let mut existing: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "json"))
                    .collect()
            })
            .unwrap_or_default();
        existing.sort();
        let mut files: VecDeque<PathBuf> = existing.into();
        let writer_counts = counts.clone();
        std::thread::Builder::new().name("hookgate-capture".into()).spawn(move || {
            let mut seq: u64 = 0;
            while let Some(r) = rx.blocking_recv() {
                seq += 1;
                let route = r.route.as_deref().unwrap_or("unrouted");
                let name = format!("{:013}-{seq:06}-{route}.json", r.received_at);
                match write_atomic(&dir, &name, r.to_json().as_bytes()) {
                    Ok(path) => {
                        count(&writer_counts, "written");
                        files.push_back(path);
                        while files.len() > max_files.max(1) {
                            if let Some(old) = files.pop_front() {
                                let _ = std::fs::remove_file(old);
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
            counts,
            dropped: AtomicU64::new(0),
        })
    }

    /// Queues a capture; drops it (and counts) if the writer is behind.
    pub fn record(&self, r: Replay) {
        if self.tx.try_send(r).is_err() {
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
}

fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let path = dir.join(name);
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, &path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    Ok(path)
}
