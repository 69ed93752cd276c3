//! The generic `hmac` preset: an HMAC described entirely by the route's
//! `[routes.hmac]` table. Its event ID, window and `public_url` need come from that
//! table too (see [`Preset::default_event_id`](crate::provider::Preset::default_event_id)).

use http::HeaderName;

use super::Auth;
use super::{DefaultId as Id, PresetSpec};
use crate::provider::handshake::Handshake;
use crate::provider::hmac_scheme::{HmacScheme, SigFormat, TimestampSource};
use crate::provider::mac::{Algorithm, Encoding, MacKey};
use crate::provider::timestamp::TsFormat;
use crate::provider::{HmacOptions, Scheme, Template};

/// The generic HMAC preset's row.
pub(in crate::provider) const HMAC: PresetSpec = PresetSpec {
    name: "hmac",
    auth: Auth::Signature,
    scheme: "HMAC as described in the route's [hmac] table",
    headers: "hmac.header",
    credential: "string",
    credential_at: &[],
    event_id: Id::BodySha256,
    event_type: None,
    tolerance: None,
    handshake: Handshake::None,
    reply: None,
    needs_public_url: false,
    extra_methods: &[],
    auth_header: None,
    build: |b| {
        let o = b.opts.ok_or(
            "provider \"hmac\" needs an [routes.hmac] table (header, algorithm, encoding, payload)",
        )?;
        Ok(Scheme::Hmac(generic_scheme(o, &b.texts()?)?))
    },
};

pub(super) const PRESETS: &[PresetSpec] = &[HMAC];

fn header_name(what: &str, s: &str) -> Result<HeaderName, String> {
    HeaderName::try_from(s).map_err(|_| format!("{what} {s:?} is not a valid header name"))
}

fn generic_scheme(o: &HmacOptions, secrets: &[&[u8]]) -> Result<HmacScheme, String> {
    let algorithm = match o.algorithm.as_deref() {
        None => Algorithm::Sha256,
        Some(a) => Algorithm::parse(a)
            .ok_or_else(|| format!("algorithm {a:?}: use sha1, sha256 or sha512"))?,
    };
    let encoding = match o.encoding.as_deref() {
        None => Encoding::Hex,
        Some(e) => Encoding::parse(e)
            .ok_or_else(|| format!("encoding {e:?}: use hex, base64 or base64url"))?,
    };
    let payload = Template::parse(o.payload.as_deref().unwrap_or("{body}"))?;
    let timestamp = match &o.timestamp_header {
        // A window on a header the signature does not cover could be bypassed by
        // sending a fresh value with an old capture.
        Some(_) if !payload.uses_timestamp() => {
            return Err(
                "timestamp_header is set but the payload template does not sign {timestamp}: a window on an unsigned header protects nothing; add {timestamp} to payload or remove timestamp_header".into(),
            );
        }
        Some(h) => TimestampSource::Header(header_name("timestamp_header", h)?),
        None if payload.uses_timestamp() => {
            return Err(
                "the payload template uses {timestamp} but no timestamp_header is set".into(),
            );
        }
        None => TimestampSource::None,
    };
    let id_header = match &o.id_header {
        Some(h) => Some(header_name("id_header", h)?),
        None if payload.uses_id() => {
            return Err("the payload template uses {id} but no id_header is set".into());
        }
        None => None,
    };
    if matches!(o.separator.as_deref(), Some("")) {
        return Err("separator must not be empty".into());
    }
    Ok(HmacScheme {
        headers: vec![header_name("header", &o.header)?],
        format: SigFormat::Plain {
            prefix: o.prefix.clone().unwrap_or_default(),
            separator: o.separator.clone(),
        },
        encoding,
        payload,
        timestamp,
        ts_format: TsFormat::Seconds,
        id_header,
        keys: secrets.iter().map(|s| MacKey::new(algorithm, s)).collect(),
    })
}
