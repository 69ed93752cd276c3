//! Signing a body the way a provider would: for `hookgate sign`, the README walk and
//! the tests. Verification never uses this code.

use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, Method};

use crate::provider::hmac_scheme::TimestampSource;
use crate::provider::timestamp::TsFormat;
use crate::provider::{EventIdSource, Inbound, Scheme, Verifier};

/// The headers a provider would send with `body` at `now` (unix seconds), including
/// the event ID header when the route takes its event ID from a header. `url` is the
/// URL the provider calls, for URL-signing schemes.
pub fn headers(
    verifier: &Verifier,
    id_source: &EventIdSource,
    body: &[u8],
    now: u64,
    event_id: &str,
    url: Option<&str>,
) -> Result<Vec<(HeaderName, String)>, String> {
    let (method, empty) = (Method::POST, HeaderMap::new());
    let req = Inbound {
        method: &method,
        headers: &empty,
        body,
        query: url.and_then(|u| u.split_once('?')).map(|(_, q)| q),
        url,
    };
    let mut out = match verifier.scheme() {
        Scheme::Hmac(s) => {
            let ts = match s.ts_format {
                TsFormat::Seconds => now.to_string(),
                TsFormat::Millis => now.saturating_mul(1000).to_string(),
                TsFormat::Iso8601 => {
                    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(now))
                        .to_string()
                }
            };
            let ts = match s.timestamp {
                TimestampSource::None => None,
                _ => Some(ts.as_str()),
            };
            s.sign(&req, ts, Some(event_id))
        }
        Scheme::Standard(s) => s
            .sign(event_id, now, body)
            .ok_or("this route has no HMAC secret to sign with (public keys only verify)")?,
        Scheme::Special(s) => s.sign(&req, now).ok_or_else(|| {
            format!(
                "signing is not available for provider {:?}: its signature lives in the body, needs a private key, or it signs nothing",
                verifier.preset().name()
            )
        })?,
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

/// Re-signs a replay for a test secret at `now`, keeping its body and event ID:
/// the provider's signature headers are replaced. `provider` overrides the one the
/// file names; `public_url` is needed for URL-signing providers.
pub fn resign(
    replay: &mut crate::replay::Replay,
    provider: Option<&str>,
    secret: &str,
    now: u64,
    public_url: Option<&str>,
) -> Result<(), String> {
    use crate::provider::{Credential, Preset};
    let name = provider
        .or(replay.provider.as_deref())
        .ok_or("the replay names no provider: pass --provider")?;
    let preset = Preset::parse(name).ok_or_else(|| format!("unknown provider {name:?}"))?;
    let verifier = preset.verifier(
        &[Credential::Text(crate::secret::Secret::new(
            secret.as_bytes().to_vec(),
        ))],
        None,
        preset.default_tolerance(None),
    )?;
    let id_source = preset
        .default_event_id(None)
        .unwrap_or(EventIdSource::BodySha256);
    // Keep a header-based event ID; body-based ones live in the unchanged body.
    let event_id = match &id_source {
        EventIdSource::Header(names) => names
            .iter()
            .find_map(|n| replay.header(n.as_str()))
            .map(str::to_owned),
        _ => None,
    }
    .unwrap_or_else(random_event_id);
    let url = public_url.map(
        |u| match replay.query.as_deref().filter(|q| !q.is_empty()) {
            Some(q) => format!("{u}?{q}"),
            None => u.to_owned(),
        },
    );
    let body = replay.body_bytes();
    for (name, value) in headers(&verifier, &id_source, &body, now, &event_id, url.as_deref())? {
        replay.set_header(name.as_str(), &value);
    }
    Ok(())
}
