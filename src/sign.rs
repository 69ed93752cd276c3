//! Signing a body the way a provider would: for `hookgate sign`, the README walk and
//! the tests. Verification never uses this code.

use http::HeaderName;

use crate::provider::hmac_scheme::TimestampSource;
use crate::provider::{EventIdSource, Scheme, Verifier};

/// The headers a provider would send with `body`, including the event ID header when
/// the route takes its event ID from a header.
pub fn headers(
    verifier: &Verifier,
    id_source: &EventIdSource,
    body: &[u8],
    now: u64,
    event_id: &str,
) -> Result<Vec<(HeaderName, String)>, String> {
    let ts = now.to_string();
    let mut out = match verifier.scheme() {
        Scheme::Hmac(s) => {
            let ts = match s.timestamp {
                TimestampSource::None => None,
                _ => Some(ts.as_str()),
            };
            s.sign(body, ts, Some(event_id))
        }
        Scheme::Standard(s) => s
            .sign(event_id, now, body)
            .ok_or("this route has no HMAC secret to sign with (public keys only verify)")?,
    };
    if let EventIdSource::Header(names) = id_source {
        if let Some(name) = names.first() {
            if !out.iter().any(|(n, _)| n == name) {
                out.push((name.clone(), event_id.to_owned()));
            }
        }
    }
    if out.is_empty() {
        return Err("this route has no secret to sign with".into());
    }
    Ok(out)
}

/// A random event ID for `hookgate sign` when none is given.
pub fn random_event_id() -> String {
    use rand::Rng as _;
    let bytes: [u8; 12] = rand::rng().random();
    format!("evt_{}", hex::encode(bytes))
}
