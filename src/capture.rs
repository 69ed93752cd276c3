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

use crate::provider::Preset;
use crate::provider::catalogue::CredentialAt;
use crate::replay::Replay;
use crate::telemetry::ResultLabel;

/// Captures waiting to be written before new ones are dropped.
const QUEUE: usize = 1024;

/// The capture writer's handle.
#[derive(Debug)]
pub struct Capture {
    tx: mpsc::Sender<Replay>,
    /// Whether deliveries sent by `hookgate replay` (marked with
    /// [`crate::replay::REPLAY_HEADER`]) are captured too (`[capture] replays`).
    replays: bool,
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
            replays: false,
            counts,
            dropped: AtomicU64::new(0),
        })
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

/// Headers whose value is a credential for any route, never written to a capture
/// (signatures are kept: useless without the secret, and replays re-sign anyway).
const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-gitlab-token",
    "x-hook-secret",
];

const REDACTED: &str = "[redacted]";

/// Removes every credential the route's preset knows from a capture, wherever it
/// travels: headers, query parameters and body fields (Mailchimp's `?token=`,
/// Notion's `verification_token`, Figma's `passcode`, Graph's `clientState`, …).
/// Credential headers (`Authorization`, `Cookie`, …) are redacted for every route.
pub fn redact(r: &mut Replay, preset: Option<Preset>) {
    let locations = preset.map(Preset::credential_locations).unwrap_or_default();
    for (name, value) in &mut r.headers {
        let listed = CREDENTIAL_HEADERS
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h))
            || locations
                .iter()
                .any(|l| matches!(l, CredentialAt::Header(h) if name.eq_ignore_ascii_case(h)));
        if listed {
            *value = REDACTED.to_owned();
        }
    }
    let params: Vec<&str> = locations
        .iter()
        .filter_map(|l| match l {
            CredentialAt::Query(p) => Some(*p),
            _ => None,
        })
        .collect();
    if let (Some(query), false) = (&r.query, params.is_empty()) {
        let redacted: Vec<String> = query
            .split('&')
            .map(|pair| {
                let raw_key = pair.split_once('=').map_or(pair, |(k, _)| k);
                let key = form_urlencoded::parse(raw_key.as_bytes())
                    .next()
                    .map(|(k, _)| k.into_owned())
                    .unwrap_or_default();
                if params.contains(&key.as_str()) {
                    format!("{raw_key}={REDACTED}")
                } else {
                    pair.to_owned()
                }
            })
            .collect();
        r.query = Some(redacted.join("&"));
    }
    if locations
        .iter()
        .any(|l| matches!(l, CredentialAt::Json(_) | CredentialAt::JsonEach(..)))
    {
        let body = r.body_bytes();
        if let Some(clean) = redact_json(&body, locations) {
            // `Replay::new` chooses between `body` and `body_base64`.
            let fresh = Replay::new(&r.method, &r.path, None, Vec::new(), &clean);
            r.body = fresh.body;
            r.body_base64 = fresh.body_base64;
        }
    }
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

fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let path = dir.join(name);
    std::fs::write(&tmp, bytes)?;
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
