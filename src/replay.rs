//! Replay files: one captured or signed delivery as JSON, and sending them.
//!
//! ```json
//! { "hookgate_replay": 1, "method": "POST", "path": "/webhooks/stripe", "query": null,
//!   "headers": [["stripe-signature", "t=…,v1=…"], ["content-type", "application/json"]],
//!   "body": "{…}", "received_at": 1767225600123, "route": "stripe", "provider": "stripe",
//!   "outcome": "forwarded", "status": 200 }
//! ```
//! `body` holds the raw body when it is UTF-8; otherwise `body_base64` holds it.
//! Headers keep their order and repeats.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

/// The format version written by this build.
pub const VERSION: u32 = 1;

/// The header `hookgate replay` adds to every delivery it sends. A gateway strips it
/// before forwarding, and a capturing gateway does not capture such deliveries unless
/// `[capture] replays = true`, so replaying through a capturing gateway does not
/// multiply the files. It proves nothing: anyone can send it, and all it changes is
/// whether the delivery is captured.
pub const REPLAY_HEADER: &str = "hookgate-replay";

/// One delivery as a replay file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replay {
    pub hookgate_replay: u32,
    pub method: String,
    /// The request path; empty when the file has no path of its own (signed without a
    /// route): `replay --target` then takes a route's URL.
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// Unix milliseconds when the gateway received it (or when it was signed).
    #[serde(default)]
    pub received_at: u64,
    #[serde(default)]
    pub route: Option<String>,
    /// The provider preset, used by `--resign`.
    #[serde(default)]
    pub provider: Option<String>,
    /// What the gateway did with it, for captures.
    #[serde(default)]
    pub outcome: Option<String>,
    #[serde(default)]
    pub status: Option<u16>,
    /// The event's type, as the route read it (captures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
}

impl Replay {
    /// A replay of a request.
    pub fn new(
        method: &str,
        path: &str,
        query: Option<&str>,
        headers: Vec<(String, String)>,
        body: &[u8],
    ) -> Self {
        let (text, b64) = match std::str::from_utf8(body) {
            Ok(t) => (Some(t.to_owned()), None),
            Err(_) => (None, Some(STANDARD.encode(body))),
        };
        Self {
            hookgate_replay: VERSION,
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.map(str::to_owned),
            headers,
            body: text,
            body_base64: b64,
            received_at: 0,
            route: None,
            provider: None,
            outcome: None,
            status: None,
            event_type: None,
        }
    }

    /// The raw body bytes.
    pub fn body_bytes(&self) -> Vec<u8> {
        match (&self.body, &self.body_base64) {
            (Some(t), _) => t.as_bytes().to_vec(),
            (None, Some(b)) => STANDARD.decode(b).unwrap_or_default(),
            (None, None) => Vec::new(),
        }
    }

    /// The first value of a header (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Sets a header, replacing every existing value of that name.
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.to_owned()));
    }

    /// Reads one replay file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let r: Self = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: not a replay file: {e}", path.display()))?;
        Ok(r)
    }

    /// The JSON text of the file.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The URL to send it to. `target` is either the gateway's base URL
    /// (`http://host:port`), to which the recorded path is appended, or a route's URL
    /// (`http://host:port/webhooks/github`), used as it is: a target with a path of its
    /// own names the route. A file with no path of its own (signed without `--route`)
    /// needs a route's URL. The recorded query is appended either way.
    ///
    /// The target decides where the request goes, always: a recorded path is only ever
    /// a path on the target's host. A path that would leave it (`@host:port/x`, an
    /// absolute URL, `//host/x`, a backslash) is refused.
    pub fn url(&self, target: &str) -> Result<String, String> {
        let target = target.trim_end_matches('/');
        let base = reqwest::Url::parse(target).map_err(|e| format!("--target {target}: {e}"))?;
        let path_start = target
            .find("://")
            .map(|i| i + 3)
            .and_then(|host| target[host..].find('/').map(|p| host + p));
        let mut url = match path_start {
            Some(_) => target.to_owned(),
            None if self.path.is_empty() => {
                return Err(format!(
                    "{target}: this file records no path; give --target the route's URL, \
                     e.g. {target}/webhooks/<route>"
                ));
            }
            None => {
                let p = &self.path;
                if !p.starts_with('/') || p.starts_with("//") || p.contains(['\\', '?', '#']) {
                    return Err(format!(
                        "the recorded path {:?} is not a path on the target (it must start with one '/'); refused: the target is --target, always",
                        self.path
                    ));
                }
                format!("{target}{p}")
            }
        };
        if let Some(q) = self.query.as_deref().filter(|q| !q.is_empty()) {
            if q.contains('#') {
                return Err("the recorded query holds '#'; refused".to_owned());
            }
            url.push('?');
            url.push_str(q);
        }
        // Whatever the file holds, the request goes to the target's scheme, host and port.
        let parsed = reqwest::Url::parse(&url).map_err(|e| format!("{url}: {e}"))?;
        if parsed.scheme() != base.scheme()
            || parsed.host_str() != base.host_str()
            || parsed.port_or_known_default() != base.port_or_known_default()
            || !parsed.username().is_empty()
            || parsed.password().is_some()
        {
            return Err(format!(
                "the recorded path or query would send this delivery to another host than --target {target}; refused"
            ));
        }
        Ok(url)
    }

    /// The headers to send again: all recorded ones but those a client sets for its own
    /// connection (`Host`, `Content-Length`, `Transfer-Encoding`).
    pub fn request_headers(&self) -> impl Iterator<Item = &(String, String)> {
        self.headers.iter().filter(|(n, _)| {
            !["content-length", "host", "transfer-encoding", REPLAY_HEADER]
                .iter()
                .any(|h| n.eq_ignore_ascii_case(h))
        })
    }

    /// Sends it to `target` (see [`Replay::url`]).
    pub async fn send(&self, client: &reqwest::Client, target: &str) -> Result<Sent, String> {
        let url = self.url(target)?;
        let method =
            reqwest::Method::from_bytes(self.method.as_bytes()).map_err(|e| e.to_string())?;
        let mut req = client.request(method, &url).body(self.body_bytes());
        for (n, v) in self.request_headers() {
            req = req.header(n.as_str(), v.as_str());
        }
        req = req.header(REPLAY_HEADER, "1");
        let resp = req.send().await.map_err(|e| format!("{url}: {e}"))?;
        let status = resp.status().as_u16();
        let outcome = resp
            .headers()
            .get("hookgate-outcome")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = resp.text().await.unwrap_or_default();
        Ok(Sent {
            url,
            status,
            outcome,
            body,
        })
    }
}

/// What the gateway answered to one sent replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// Where it was sent.
    pub url: String,
    pub status: u16,
    /// The `hookgate-outcome` header.
    pub outcome: Option<String>,
    pub body: String,
}

/// The class of an answer, for `replay --expect` and summaries. Each is spelled as the
/// gateway's own outcome names are (`in_flight`); `in-flight` and `inflight` are
/// accepted on the command line too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Forwarded,
    /// Stored by a queue route, delivered by its workers.
    Queued,
    /// Of an event type the route does not take.
    Filtered,
    Duplicate,
    #[value(name = "in_flight", alias = "in-flight", alias = "inflight")]
    InFlight,
    Handshake,
    Rejected,
    Error,
}

impl Verdict {
    /// The name printed and accepted everywhere (`in_flight`, not `InFlight`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Forwarded => "forwarded",
            Self::Queued => "queued",
            Self::Filtered => "filtered",
            Self::Duplicate => "duplicate",
            Self::InFlight => "in_flight",
            Self::Handshake => "handshake",
            Self::Rejected => "rejected",
            Self::Error => "error",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Sent {
    /// Classifies the answer from the gateway's outcome header (or the status).
    pub fn verdict(&self) -> Verdict {
        match self.outcome.as_deref() {
            Some("forwarded" | "forwarded_unclaimed") => Verdict::Forwarded,
            Some("queued") => Verdict::Queued,
            Some("filtered") => Verdict::Filtered,
            Some("duplicate") => Verdict::Duplicate,
            Some("in_flight") => Verdict::InFlight,
            Some("handshake") => Verdict::Handshake,
            Some("upstream_rejected" | "upstream_error" | "store_error") => Verdict::Error,
            Some(_) => Verdict::Rejected,
            None if self.status >= 500 => Verdict::Error,
            None if self.status >= 400 => Verdict::Rejected,
            None => Verdict::Forwarded,
        }
    }

    /// What the answer means, in words.
    pub fn meaning(&self) -> String {
        let why = serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned));
        match (self.verdict(), why) {
            (Verdict::Forwarded, _) => "forwarded to the upstream".into(),
            (Verdict::Queued, _) => "queued: stored, delivered by the gateway's workers".into(),
            (Verdict::Filtered, _) => "filtered: an event type the route does not take".into(),
            (Verdict::Duplicate, _) => "duplicate: acknowledged, not forwarded".into(),
            (Verdict::InFlight, _) => "in flight: another copy is being forwarded".into(),
            (Verdict::Handshake, _) => "handshake answered by the gateway".into(),
            (Verdict::Rejected, Some(w)) => format!("rejected: {w}"),
            (Verdict::Rejected, None) => {
                format!("rejected ({})", self.outcome.as_deref().unwrap_or("status"))
            }
            (Verdict::Error, Some(w)) => format!("error: {w}"),
            (Verdict::Error, None) => {
                format!("error ({})", self.outcome.as_deref().unwrap_or("status"))
            }
        }
    }
}

/// Every replay file named by `inputs` (files, or directories read in name order).
pub fn collect(inputs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for input in inputs {
        if input.is_dir() {
            walk(input, &mut out)?;
        } else {
            out.push(input.clone());
        }
    }
    Ok(out)
}

/// The `*.json` files under `dir`, subdirectories included, in name order.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
    Ok(())
}

/// A client for sending replays: no proxy, no redirects, bounded.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap_or_default()
}
