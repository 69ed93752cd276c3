//! Keyed MACs, signature decoding and constant-time matching shared by every HMAC scheme.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_PAD_INDIFFERENT, URL_SAFE_PAD_INDIFFERENT};
use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::{Sha256, Sha512};
use subtle::ConstantTimeEq;

/// A digest algorithm an HMAC scheme can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Sha1,
    Sha256,
    Sha512,
}

impl Algorithm {
    /// Parses a config name (`sha1`, `sha256`, `sha512`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "sha1" => Some(Self::Sha1),
            "sha256" => Some(Self::Sha256),
            "sha512" => Some(Self::Sha512),
            _ => None,
        }
    }
}

/// How a signature is written in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Hexadecimal, either case.
    Hex,
    /// Standard base64, padded or not.
    Base64,
    /// URL-safe base64, padded or not.
    Base64Url,
}

impl Encoding {
    /// Parses a config name (`hex`, `base64`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "hex" => Some(Self::Hex),
            "base64" => Some(Self::Base64),
            "base64url" => Some(Self::Base64Url),
            _ => None,
        }
    }

    /// Decodes one signature; `None` when it is not valid in this encoding.
    pub fn decode(self, s: &str) -> Option<Vec<u8>> {
        let s = s.trim();
        match self {
            Self::Hex => hex::decode(s).ok(),
            Self::Base64 => STANDARD_PAD_INDIFFERENT.decode(s).ok(),
            Self::Base64Url => URL_SAFE_PAD_INDIFFERENT.decode(s).ok(),
        }
    }

    /// Encodes a tag the way the provider writes it (lowercase hex, padded base64).
    pub fn encode(self, tag: &[u8]) -> String {
        match self {
            Self::Hex => hex::encode(tag),
            Self::Base64 => base64::engine::general_purpose::STANDARD.encode(tag),
            Self::Base64Url => base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag),
        }
    }
}

/// Decodes base64 that a provider or a user may write with or without padding.
pub fn decode_base64(s: &str) -> Option<Vec<u8>> {
    STANDARD_PAD_INDIFFERENT.decode(s.trim()).ok()
}

/// Decodes URL-safe base64 with or without padding (JWTs).
pub fn decode_base64url(s: &str) -> Option<Vec<u8>> {
    URL_SAFE_PAD_INDIFFERENT.decode(s.trim()).ok()
}

/// Standard padded base64.
pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Constant-time equality of two byte strings (a length mismatch is not secret).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// An HMAC keyed once at config load; each request clones the keyed state, so the key
/// schedule is not recomputed per delivery.
#[derive(Clone)]
pub enum MacKey {
    Sha1(Hmac<Sha1>),
    Sha256(Hmac<Sha256>),
    Sha512(Hmac<Sha512>),
}

impl fmt::Debug for MacKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MacKey([redacted])")
    }
}

/// The longest tag any supported algorithm produces (SHA-512).
const MAX_TAG: usize = 64;

/// A computed MAC, kept on the stack.
#[derive(Clone, Copy)]
pub struct Tag {
    buf: [u8; MAX_TAG],
    len: usize,
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tag({} bytes)", self.len)
    }
}

impl Tag {
    fn from_slice(s: &[u8]) -> Self {
        let mut buf = [0u8; MAX_TAG];
        buf[..s.len()].copy_from_slice(s);
        Self { buf, len: s.len() }
    }

    /// The tag bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Constant-time comparison with a candidate signature. A length mismatch returns
    /// false at once: the length of a tag is public.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        self.as_bytes().ct_eq(candidate).into()
    }

    /// Whether any candidate matches. Every candidate is compared (no short circuit),
    /// so the time taken does not depend on which one matched.
    pub fn matches_any(&self, candidates: &[Vec<u8>]) -> bool {
        candidates
            .iter()
            .fold(false, |found, c| self.matches(c) | found)
    }
}

impl MacKey {
    /// Keys an HMAC. HMAC accepts keys of any length, so this cannot fail.
    pub fn new(algorithm: Algorithm, key: &[u8]) -> Self {
        // `new_from_slice` only fails for fixed-size-key MACs; HMAC takes any length.
        match algorithm {
            Algorithm::Sha1 => Self::Sha1(
                <Hmac<Sha1> as KeyInit>::new_from_slice(key).expect("HMAC accepts any key length"),
            ),
            Algorithm::Sha256 => Self::Sha256(
                <Hmac<Sha256> as KeyInit>::new_from_slice(key)
                    .expect("HMAC accepts any key length"),
            ),
            Algorithm::Sha512 => Self::Sha512(
                <Hmac<Sha512> as KeyInit>::new_from_slice(key)
                    .expect("HMAC accepts any key length"),
            ),
        }
    }

    /// The MAC of the concatenation of `parts`.
    pub fn tag(&self, parts: &[&[u8]]) -> Tag {
        fn run<M: Mac + Clone>(m: &M, parts: &[&[u8]]) -> Tag {
            let mut m = m.clone();
            for p in parts {
                m.update(p);
            }
            Tag::from_slice(&m.finalize().into_bytes())
        }
        match self {
            Self::Sha1(m) => run(m, parts),
            Self::Sha256(m) => run(m, parts),
            Self::Sha512(m) => run(m, parts),
        }
    }
}

/// Returns the index of the first key whose tag matches any candidate, testing every
/// pair in constant time per comparison.
pub fn first_match(keys: &[MacKey], parts: &[&[u8]], candidates: &[Vec<u8>]) -> Option<usize> {
    keys.iter()
        .position(|k| k.tag(parts).matches_any(candidates))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4231_case_2_sha256() {
        let k = MacKey::new(Algorithm::Sha256, b"Jefe");
        let t = k.tag(&[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex::encode(t.as_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn tag_rejects_other_lengths_and_bytes() {
        let k = MacKey::new(Algorithm::Sha1, b"k");
        let t = k.tag(&[b"m"]);
        assert!(t.matches(t.as_bytes()));
        assert!(!t.matches(&t.as_bytes()[..19]));
        let mut other = t.as_bytes().to_vec();
        other[0] ^= 1;
        assert!(!t.matches(&other));
    }

    #[test]
    fn decoding_accepts_either_hex_case_and_optional_padding() {
        assert_eq!(Encoding::Hex.decode("ABcd"), Some(vec![0xab, 0xcd]));
        assert_eq!(Encoding::Hex.decode("abc"), None);
        assert_eq!(Encoding::Base64.decode("YQ=="), Some(b"a".to_vec()));
        assert_eq!(Encoding::Base64.decode("YQ"), Some(b"a".to_vec()));
        assert_eq!(Encoding::Base64.decode("Y-_"), None);
    }
}
