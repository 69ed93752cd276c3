//! How one delivery attempt ended, as stored in an event's history and shown by
//! `hookgate events show`, the admin API and the `hookgate_delivery_attempts_total`
//! metric: each variant keeps the lowercase name those have always used.

use serde::{Deserialize, Serialize};

/// How one delivery attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AttemptResult {
    /// The upstream answered 2xx.
    #[serde(rename = "delivered")]
    Delivered,
    /// The upstream answered 4xx (retried like any other failure).
    #[serde(rename = "http_4xx")]
    Http4xx,
    /// The upstream answered another status that is not 2xx.
    #[serde(rename = "http_5xx")]
    Http5xx,
    /// No answer within `upstream_timeout`.
    #[serde(rename = "timeout")]
    Timeout,
    /// The upstream could not be reached.
    #[serde(rename = "connect")]
    Connect,
    /// The connection broke before a whole answer came.
    #[serde(rename = "broken")]
    Broken,
    /// A result this version does not know, written by a newer one (a rolling
    /// upgrade): the record still reads, and the attempt shows as `other`.
    #[serde(rename = "other", other)]
    Other,
}

impl AttemptResult {
    /// Every result, in the order the metrics list them.
    pub const ALL: [Self; 6] = [
        Self::Delivered,
        Self::Http4xx,
        Self::Http5xx,
        Self::Timeout,
        Self::Connect,
        Self::Broken,
    ];

    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Http4xx => "http_4xx",
            Self::Http5xx => "http_5xx",
            Self::Timeout => "timeout",
            Self::Connect => "connect",
            Self::Broken => "broken",
            Self::Other => "other",
        }
    }
}

impl std::fmt::Display for AttemptResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for AttemptResult {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not an attempt result"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_written_by_a_newer_version_still_reads() {
        let r: AttemptResult = serde_json::from_str("\"tls\"").expect("reads");
        assert_eq!(r, AttemptResult::Other);
    }

    #[test]
    fn each_result_is_stored_and_parsed_under_its_name() {
        for r in AttemptResult::ALL {
            let json = serde_json::to_string(&r).expect("serializes");
            assert_eq!(json, format!("\"{}\"", r.as_str()));
            assert_eq!(serde_json::from_str::<AttemptResult>(&json).ok(), Some(r));
            assert_eq!(r.as_str().parse::<AttemptResult>(), Ok(r));
        }
        assert!("http_3xx".parse::<AttemptResult>().is_err());
    }
}
