//! The Standard Webhooks scheme (also sent by Svix, Clerk and Resend under `svix-*`
//! header names): `id.timestamp.body` signed with HMAC-SHA256 (`v1,`) or Ed25519 (`v1a,`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, VerifyingKey};
use http::HeaderName;

use super::mac::{Algorithm, MacKey, decode_base64};
use super::{Inbound, VerifyError, header_once, parse_timestamp};

/// One configured credential, decoded from the form the provider hands out.
#[derive(Debug, Clone)]
pub enum SwKey {
    /// `whsec_<base64>` (or bare base64): the HMAC key is the decoded bytes.
    Hmac(MacKey),
    /// `whpk_<base64>`: an Ed25519 public key.
    Ed25519(VerifyingKey),
}

impl SwKey {
    /// Decodes a secret as Standard Webhooks defines it.
    pub fn parse(secret: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(secret)
            .map_err(|_| "a Standard Webhooks secret must be text".to_string())?
            .trim();
        if let Some(b64) = text.strip_prefix("whpk_") {
            let raw = decode_base64(b64).ok_or("the whpk_ key is not valid base64")?;
            let arr: [u8; 32] = raw
                .as_slice()
                .try_into()
                .map_err(|_| "a whpk_ key must decode to 32 bytes".to_string())?;
            let key = VerifyingKey::from_bytes(&arr)
                .map_err(|_| "the whpk_ key is not a valid Ed25519 public key".to_string())?;
            return Ok(Self::Ed25519(key));
        }
        let b64 = text.strip_prefix("whsec_").unwrap_or(text);
        let raw =
            decode_base64(b64).ok_or("a Standard Webhooks secret is whsec_ followed by base64")?;
        if raw.is_empty() {
            return Err("the Standard Webhooks secret is empty".into());
        }
        Ok(Self::Hmac(MacKey::new(Algorithm::Sha256, &raw)))
    }
}

/// The scheme with its header names (`webhook-*` or `svix-*`) and the route's keys.
#[derive(Debug, Clone)]
pub struct StandardScheme {
    pub id_header: HeaderName,
    pub timestamp_header: HeaderName,
    pub signature_header: HeaderName,
    pub keys: Vec<SwKey>,
}

impl StandardScheme {
    /// The scheme under a header prefix (`webhook` or `svix`).
    pub fn with_prefix(prefix: &str, keys: Vec<SwKey>) -> Self {
        let h = |suffix: &str| {
            HeaderName::try_from(format!("{prefix}-{suffix}"))
                .unwrap_or_else(|_| HeaderName::from_static("webhook-id"))
        };
        Self {
            id_header: h("id"),
            timestamp_header: h("timestamp"),
            signature_header: h("signature"),
            keys,
        }
    }

    /// Verifies and returns (matching secret index, signed timestamp).
    pub fn verify(&self, req: &Inbound<'_>) -> Result<(usize, u64), VerifyError> {
        let id = header_once(req.headers, &self.id_header)?;
        let ts_text = header_once(req.headers, &self.timestamp_header)?;
        let sigs = header_once(req.headers, &self.signature_header)?;
        let ts = parse_timestamp(ts_text)?;
        let mut v1 = Vec::new();
        let mut v1a = Vec::new();
        for entry in sigs.split(' ').filter(|e| !e.is_empty()) {
            let Some((version, value)) = entry.split_once(',') else {
                continue;
            };
            let Some(raw) = decode_base64(value) else {
                continue;
            };
            match version {
                "v1" => v1.push(raw),
                "v1a" => v1a.push(raw),
                _ => {}
            }
        }
        if v1.is_empty() && v1a.is_empty() {
            return Err(VerifyError::Malformed(self.signature_header.to_string()));
        }
        let parts: [&[u8]; 5] = [id.as_bytes(), b".", ts_text.as_bytes(), b".", req.body];
        for (i, key) in self.keys.iter().enumerate() {
            let ok = match key {
                SwKey::Hmac(mac) => {
                    let tag = mac.tag(&parts);
                    tag.matches_any(&v1)
                }
                SwKey::Ed25519(pk) => {
                    let msg = parts.concat();
                    v1a.iter().any(|raw| {
                        <[u8; 64]>::try_from(raw.as_slice())
                            .map(|arr| pk.verify_strict(&msg, &Signature::from_bytes(&arr)).is_ok())
                            .unwrap_or(false)
                    })
                }
            };
            if ok {
                return Ok((i, ts));
            }
        }
        Err(VerifyError::BadSignature)
    }

    /// The three headers for a delivery signed with the first HMAC key (used by
    /// `forward_secret` and `hookgate sign`).
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> Option<Vec<(HeaderName, String)>> {
        let mac = self.keys.iter().find_map(|k| match k {
            SwKey::Hmac(m) => Some(m),
            SwKey::Ed25519(_) => None,
        })?;
        let ts = timestamp.to_string();
        let tag = mac.tag(&[id.as_bytes(), b".", ts.as_bytes(), b".", body]);
        Some(vec![
            (self.id_header.clone(), id.to_string()),
            (self.timestamp_header.clone(), ts),
            (
                self.signature_header.clone(),
                format!("v1,{}", STANDARD.encode(tag.as_bytes())),
            ),
        ])
    }
}
