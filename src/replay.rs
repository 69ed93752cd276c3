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

/// One delivery as a replay file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replay {
    pub hookgate_replay: u32,
    pub method: String,
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

    /// The URL to send it to on `base` (`http://host:port`): path and query as recorded.
    pub fn url(&self, base: &str) -> String {
        let mut url = format!("{}{}", base.trim_end_matches('/'), self.path);
        if let Some(q) = self.query.as_deref().filter(|q| !q.is_empty()) {
            url.push('?');
            url.push_str(q);
        }
        url
    }

    /// The headers to send again: all recorded ones but those a client sets for its own
    /// connection (`Host`, `Content-Length`, `Transfer-Encoding`).
    pub fn request_headers(&self) -> impl Iterator<Item = &(String, String)> {
        self.headers.iter().filter(|(n, _)| {
            !["content-length", "host", "transfer-encoding"]
                .iter()
                .any(|h| n.eq_ignore_ascii_case(h))
        })
    }

    /// Sends it to `base` (`http://host:port`), path and query as recorded.
    pub async fn send(&self, client: &reqwest::Client, base: &str) -> Result<Sent, String> {
        let url = self.url(base);
        let method =
            reqwest::Method::from_bytes(self.method.as_bytes()).map_err(|e| e.to_string())?;
        let mut req = client.request(method, &url).body(self.body_bytes());
        for (n, v) in self.request_headers() {
            req = req.header(n.as_str(), v.as_str());
        }
        let resp = req.send().await.map_err(|e| format!("{url}: {e}"))?;
        let status = resp.status().as_u16();
        let outcome = resp
            .headers()
            .get("hookgate-outcome")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = resp.text().await.unwrap_or_default();
        Ok(Sent {
            status,
            outcome,
            body,
        })
    }
}

/// What the gateway answered to one sent replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub status: u16,
    /// The `hookgate-outcome` header.
    pub outcome: Option<String>,
    pub body: String,
}

/// The class of an answer, for `replay --expect` and summaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Forwarded,
    Duplicate,
    InFlight,
    Handshake,
    Rejected,
    Error,
}

impl Sent {
    /// Classifies the answer from the gateway's outcome header (or the status).
    pub fn verdict(&self) -> Verdict {
        match self.outcome.as_deref() {
            Some("forwarded" | "forwarded_unclaimed") => Verdict::Forwarded,
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
