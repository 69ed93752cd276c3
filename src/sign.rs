//! Signing a body the way a provider would: for `hookgate sign`, the walk and
//! the tests. Verification never uses this code.

use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, Method};

use crate::provider::hmac_scheme::TimestampSource;
use crate::provider::mac::encode_base64;
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
    let method = Method::POST;
    // The event ID header, where the route reads one, for a scheme that signs it
    // (Mercado Pago's x-request-id); the others ignore it.
    let mut id_header = HeaderMap::new();
    if let EventIdSource::Header(names) = id_source
        && let Some(name) = names.first()
        && let Ok(v) = http::HeaderValue::from_str(event_id)
    {
        id_header.insert(name.clone(), v);
    }
    let req = Inbound {
        method: &method,
        headers: &id_header,
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
    add_event_id_header(&mut out, id_source, event_id);
    if out.is_empty() {
        return Err("this route has no secret to sign with".into());
    }
    Ok(out)
}

/// Adds the event ID header when the route takes its event ID from a header and the
/// signature headers do not already carry it.
fn add_event_id_header(
    out: &mut Vec<(HeaderName, String)>,
    id_source: &EventIdSource,
    event_id: &str,
) {
    if let EventIdSource::Header(names) = id_source
        && let Some(name) = names.first()
        && !out.iter().any(|(n, _)| n == name)
    {
        out.push((name.clone(), event_id.to_owned()));
    }
}

/// A random event ID for `hookgate sign` when none is given.
pub fn random_event_id() -> String {
    use rand::Rng as _;
    let bytes: [u8; 12] = rand::rng().random();
    format!("evt_{}", hex::encode(bytes))
}

/// A random event ID shaped as `preset`'s provider makes them: a GUID for those that
/// send one (GitHub's `X-GitHub-Delivery`, Bitbucket's `X-Request-UUID`, Linear's
/// `Linear-Delivery`), else `evt_` and 24 hex digits.
pub fn random_event_id_for(preset: crate::provider::Preset) -> String {
    use rand::Rng as _;
    if !matches!(preset.name(), "github" | "bitbucket" | "linear") {
        return random_event_id();
    }
    // A version 4 UUID: 122 random bits, the version and variant bits set.
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
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
    // A `whsk_` private key re-signs with Ed25519 (Discord, Standard Webhooks v1a): the
    // verifier then holds its public half.
    let private = secret
        .starts_with("whsk_")
        .then(|| PrivateKey::parse(secret))
        .transpose()?;
    let credential = match &private {
        Some(k) => k.public_for(preset.name()),
        None => secret.to_owned(),
    };
    let verifier = preset.verifier(
        &[Credential::Text(crate::secret::Secret::new(
            credential.into_bytes(),
        ))],
        None,
        preset.default_tolerance(None),
    )?;
    let id_source = preset
        .default_event_id(None)
        .unwrap_or(EventIdSource::BodySha256);
    sign_replay(
        replay,
        &verifier,
        &id_source,
        private.as_ref(),
        now,
        public_url,
    )
}

/// Re-signs a replay file as `route` signs (its provider, options and first secret),
/// with a fresh timestamp, for `hookgate replay --config`. A route that verifies
/// Ed25519 holds only public keys, and cannot sign.
pub fn resign_as_route(
    replay: &mut crate::replay::Replay,
    route: &crate::config::Route,
    now: u64,
) -> Result<(), String> {
    sign_replay(
        replay,
        &route.verifier,
        &route.event_id,
        None,
        now,
        route.public_url.as_deref(),
    )
}

/// Sets the signature headers of `replay` for `now`, keeping its event ID.
fn sign_replay(
    replay: &mut crate::replay::Replay,
    verifier: &crate::provider::Verifier,
    id_source: &EventIdSource,
    private: Option<&PrivateKey>,
    now: u64,
    public_url: Option<&str>,
) -> Result<(), String> {
    // Keep a header-based event ID; body-based ones live in the unchanged body.
    let event_id = match id_source {
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
    let signed = match private {
        Some(k) => headers_ed25519(verifier, id_source, &body, now, &event_id, k)?,
        None => headers(verifier, id_source, &body, now, &event_id, url.as_deref())?,
    };
    for (name, value) in signed {
        replay.set_header(name.as_str(), &value);
    }
    Ok(())
}

/// An Ed25519 private key, for signing as Discord or a Standard Webhooks sender using
/// `v1a` (asymmetric) signatures do. A route only holds public keys, so `hookgate sign
/// --private-key` brings the private half.
pub struct PrivateKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrivateKey([redacted])")
    }
}

impl PrivateKey {
    /// Parses `whsk_<base64 seed>` (the Standard Webhooks format), 64 hex digits, or
    /// base64 of the 32-byte seed.
    pub fn parse(text: &str) -> Result<Self, String> {
        use crate::provider::mac::decode_base64;
        let text = text.trim();
        let raw = if let Some(b64) = text.strip_prefix("whsk_") {
            decode_base64(b64).ok_or("the whsk_ key is not valid base64")?
        } else if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            hex::decode(text).map_err(|_| "the key is not valid hex".to_string())?
        } else {
            decode_base64(text)
                .ok_or("a private key is whsk_<base64>, 64 hex digits or base64 of 32 bytes")?
        };
        let seed: [u8; 32] = raw
            .as_slice()
            .try_into()
            .map_err(|_| "an Ed25519 private key is 32 bytes".to_string())?;
        Ok(Self(ed25519_dalek::SigningKey::from_bytes(&seed)))
    }

    /// A new random key.
    pub fn generate() -> Self {
        use rand::Rng as _;
        let seed: [u8; 32] = rand::rng().random();
        Self(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// The private key as `whsk_<base64>`.
    pub fn to_whsk(&self) -> String {
        format!("whsk_{}", encode_base64(&self.0.to_bytes()))
    }

    /// The public key as `whpk_<base64>` (Standard Webhooks).
    pub fn public_whpk(&self) -> String {
        format!("whpk_{}", encode_base64(self.0.verifying_key().as_bytes()))
    }

    /// The public key in hex (Discord's "public key").
    pub fn public_hex(&self) -> String {
        hex::encode(self.0.verifying_key().as_bytes())
    }

    /// The public key in the form `provider`'s routes take in `secrets`: hex for
    /// Discord, `whpk_` otherwise.
    pub fn public_for(&self, provider: &str) -> String {
        match provider {
            "discord" => self.public_hex(),
            "telnyx" => encode_base64(self.0.verifying_key().as_bytes()),
            _ => self.public_whpk(),
        }
    }

    fn sign(&self, msg: &[u8]) -> ed25519_dalek::Signature {
        use ed25519_dalek::Signer as _;
        self.0.sign(msg)
    }
}

/// The headers a Discord or Standard Webhooks (`v1a`) sender would send, signed with
/// `key`. Refused when the route's scheme is not Ed25519, or when `key` is not the
/// private half of one of the route's public keys (a replay would then be refused).
pub fn headers_ed25519(
    verifier: &Verifier,
    id_source: &EventIdSource,
    body: &[u8],
    now: u64,
    event_id: &str,
    key: &PrivateKey,
) -> Result<Vec<(HeaderName, String)>, String> {
    use crate::provider::special::Special;
    use crate::provider::standard_webhooks::SwKey;
    let public = key.0.verifying_key();
    let ts = now.to_string();
    let mismatch =
        || "the private key is not the private half of any of the route's public keys".to_string();
    let mut out = match verifier.scheme() {
        Scheme::Standard(s) => {
            if !s
                .keys
                .iter()
                .any(|k| matches!(k, SwKey::Ed25519(pk) if *pk == public))
            {
                return Err(mismatch());
            }
            let msg = [event_id.as_bytes(), b".", ts.as_bytes(), b".", body].concat();
            let sig = encode_base64(&key.sign(&msg).to_bytes());
            vec![
                (s.id_header.clone(), event_id.to_owned()),
                (s.timestamp_header.clone(), ts),
                (s.signature_header.clone(), format!("v1a,{sig}")),
            ]
        }
        Scheme::Special(Special::Discord { keys }) => {
            if !keys.contains(&public) {
                return Err(mismatch());
            }
            let msg = [ts.as_bytes(), body].concat();
            vec![
                (
                    HeaderName::from_static("x-signature-ed25519"),
                    hex::encode(key.sign(&msg).to_bytes()),
                ),
                (HeaderName::from_static("x-signature-timestamp"), ts),
            ]
        }
        Scheme::Special(Special::Telnyx { keys }) => {
            if !keys.contains(&public) {
                return Err(mismatch());
            }
            let msg = [ts.as_bytes(), b"|", body].concat();
            vec![
                (
                    HeaderName::from_static("telnyx-signature-ed25519"),
                    encode_base64(&key.sign(&msg).to_bytes()),
                ),
                (HeaderName::from_static("telnyx-timestamp"), ts),
            ]
        }
        _ => {
            return Err(format!(
                "provider {:?} does not sign with Ed25519: use --secret",
                verifier.preset().name()
            ));
        }
    };
    add_event_id_header(&mut out, id_source, event_id);
    Ok(out)
}
