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

use crate::provider::Preset;
use crate::provider::catalogue::CredentialAt;
use crate::redact::REDACTED;
use crate::replay::Replay;
use crate::telemetry::ResultLabel;

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

/// Removes every credential from a capture, wherever it travels: headers and query
/// parameters by the one rule of `crate::redact` (`Authorization`, `Cookie`,
/// `X-Webhook-Key`, `?token=`, `?api_key=`, …, and what the route's preset names),
/// and the preset's body fields (Notion's `verification_token`, Figma's `passcode`,
/// Graph's `clientState`, …). Signatures are kept: useless without the secret, and
/// a capture replayed as of its own time verifies with them.
pub fn redact(r: &mut Replay, preset: Option<Preset>) {
    use crate::redact::Hide;
    for (name, value) in &mut r.headers {
        if crate::redact::header(name, preset, Hide::Credentials) {
            *value = REDACTED.to_owned();
        }
    }
    if let Some(q) = r.query.as_deref()
        && let std::borrow::Cow::Owned(clean) = crate::redact::query(q, preset, Hide::Credentials)
    {
        r.query = Some(clean);
    }
    if body_has_credentials(preset)
        && let Some(clean) = redact_body(&r.body_bytes(), preset)
    {
        // `Replay::new` chooses between `body` and `body_base64`.
        let fresh = Replay::new(&r.method, &r.path, None, Vec::new(), &clean);
        r.body = fresh.body;
        r.body_base64 = fresh.body_base64;
    }
}

/// Whether the preset has a credential in the JSON body.
pub(crate) fn body_has_credentials(preset: Option<Preset>) -> bool {
    preset.is_some_and(|p| {
        p.credential_locations()
            .iter()
            .any(|l| matches!(l, CredentialAt::Json(_) | CredentialAt::JsonEach(..)))
    })
}

/// A body with the preset's credential fields redacted; `None` when it holds none.
pub(crate) fn redact_body(body: &[u8], preset: Option<Preset>) -> Option<Vec<u8>> {
    if !body_has_credentials(preset) {
        return None;
    }
    redact_json(
        body,
        preset.map(Preset::credential_locations).unwrap_or_default(),
    )
}

/// The body with the credential fields' values replaced, or `None` when it holds
/// none. The values are replaced in the text where they appear, so the rest of the
/// body keeps its bytes; a value written with other escapes than serde_json's falls
/// back to re-serialising the whole document.
fn redact_json(body: &[u8], locations: &[CredentialAt]) -> Option<Vec<u8>> {
    let mut doc: serde_json::Value = serde_json::from_slice(body).ok()?;
    let mut found: Vec<serde_json::Value> = Vec::new();
    let mut take = |v: &mut serde_json::Value| {
        if !v.is_null() {
            found.push(std::mem::replace(
                v,
                serde_json::Value::String(REDACTED.into()),
            ));
        }
    };
    for l in locations {
        match l {
            CredentialAt::Json(ptr) => {
                if let Some(v) = doc.pointer_mut(ptr) {
                    take(v);
                }
            }
            CredentialAt::JsonEach(ptr, field) => {
                if let Some(items) = doc.pointer_mut(ptr).and_then(|a| a.as_array_mut()) {
                    for item in items {
                        if let Some(v) = item.get_mut(*field) {
                            take(v);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if found.is_empty() {
        return None;
    }
    let mut text = String::from_utf8_lossy(body).into_owned();
    let quoted = serde_json::to_string(REDACTED).unwrap_or_default();
    for v in &found {
        let literal = serde_json::to_string(v).unwrap_or_default();
        if !literal.is_empty() {
            text = text.replace(&literal, &quoted);
        }
    }
    // Trust the textual replacement only if no credential is left in the document.
    let left = serde_json::from_str::<serde_json::Value>(&text)
        .map(|d| found.iter().any(|v| contains(&d, v)))
        .unwrap_or(true);
    if left {
        return serde_json::to_vec(&doc).ok();
    }
    Some(text.into_bytes())
}

fn contains(doc: &serde_json::Value, needle: &serde_json::Value) -> bool {
    if doc == needle {
        return true;
    }
    match doc {
        serde_json::Value::Array(a) => a.iter().any(|d| contains(d, needle)),
        serde_json::Value::Object(m) => m.values().any(|d| contains(d, needle)),
        _ => false,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_credentials_are_redacted_even_when_escaped_differently() {
        let p = |n| Preset::parse(n);
        // Microsoft Graph: every notification's clientState.
        let mut r = Replay::new(
            "POST",
            "/g",
            None,
            Vec::new(),
            br#"{"value":[{"clientState":"cs-S3CRET","id":1},{"clientState":"cs-S3CRET"}]}"#,
        );
        redact(&mut r, p("msgraph"));
        let body = r.body.clone().unwrap_or_default();
        assert!(
            !body.contains("S3CRET") && body.contains("\"id\":1"),
            "{body}"
        );
        // A value written with escapes serde_json would not use: re-serialised.
        let mut r = Replay::new(
            "POST",
            "/n",
            None,
            vec![("authorization".into(), "Basic x".into())],
            br#"{"verification_token":"secret_\u0053\u0033CRET"}"#,
        );
        redact(&mut r, p("notion"));
        let body = r.body.clone().unwrap_or_default();
        assert!(!body.contains("CRET"), "{body}");
        assert_eq!(r.header("authorization"), Some("[redacted]"));
        // Meta's verify token in the handshake's query; other parameters kept.
        let mut r = Replay::new(
            "GET",
            "/m",
            Some("hub.mode=subscribe&hub.verify_token=vt-S3CRET&hub.challenge=42"),
            Vec::new(),
            b"",
        );
        redact(&mut r, p("meta"));
        assert_eq!(
            r.query.as_deref(),
            Some("hub.mode=subscribe&hub.verify_token=[redacted]&hub.challenge=42")
        );
    }
}
