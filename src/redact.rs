//! The one rule for what a capture file or a delivery record never shows: which
//! header names and query parameter names carry a credential, and which carry a
//! signature. Captures ([`crate::capture`]) and the delivery log
//! (`server::recorder`) both redact through here, so a name one of them hides the
//! other hides too.
//!
//! A name carries a credential when, compared without case and with `_`, `.` and
//! spaces read as `-`, it holds `token`, `secret`, `passw`, `passcode`, `authoriz`,
//! `cookie`, `credential`, `api-key` or `apikey`, or it is `key` or ends in `-key`
//! (`X-Webhook-Key`, `?api_key=`, `?access_token=`, `hub.verify_token`); and
//! whatever the route's preset names as its credential. Names of IDs are not
//! credentials although they look like one: `Idempotency-Key` (an event ID for some
//! providers) and `X-Event-Key` (an event type). The delivery log also hides
//! signatures (`signature`, `-sig`, `hmac`, `auth` in the name, and a generic `hmac`
//! route's configured headers); captures keep them, so a capture replayed as of its
//! own time still verifies. A hidden value reads `[redacted]`; its name stays.

use std::borrow::Cow;

use crate::provider::Preset;
use crate::provider::catalogue::CredentialAt;

/// What a hidden value is replaced with.
pub(crate) const REDACTED: &str = "[redacted]";

/// What is hidden besides credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hide {
    /// Credentials only (captures: their signatures are replayed).
    Credentials,
    /// Credentials and signatures (the delivery log).
    CredentialsAndSignatures,
}

/// Parts of names that carry a credential.
const CREDENTIAL_WORDS: &[&str] = &[
    "token",
    "secret",
    "passw",
    "passcode",
    "authoriz",
    "cookie",
    "credential",
    "api-key",
    "apikey",
];

/// Parts of names that look like a credential's but name an ID.
const NOT_CREDENTIALS: &[&str] = &["idempotency", "event-key"];

/// Parts of names that carry a signature: providers' signature headers all say so
/// (`Stripe-Signature`, `X-Hub-Signature-256`, `X-Shopify-Hmac-Sha256`,
/// `PAYPAL-TRANSMISSION-SIG`, …).
const SIGNATURE_WORDS: &[&str] = &["signature", "-sig", "hmac", "auth"];

/// `name` lowercase with `_`, `.` and spaces as `-`, and a leading `-` (so `-sig`
/// and `-key` match a whole first word), handed to `f`. Names are short: most are
/// read from a buffer on the stack.
fn with_normalized<T>(name: &str, f: impl FnOnce(&[u8]) -> T) -> T {
    let map = |b: u8| match b {
        b'_' | b'.' | b' ' => b'-',
        b => b.to_ascii_lowercase(),
    };
    let mut stack = [0u8; 64];
    if name.len() < stack.len() {
        stack[0] = b'-';
        for (to, b) in stack[1..].iter_mut().zip(name.bytes()) {
            *to = map(b);
        }
        f(&stack[..=name.len()])
    } else {
        let heap: Vec<u8> = std::iter::once(b'-').chain(name.bytes().map(map)).collect();
        f(&heap)
    }
}

fn holds(n: &[u8], words: &[&str]) -> bool {
    words
        .iter()
        .any(|w| n.windows(w.len()).any(|x| x == w.as_bytes()))
}

/// Whether a normalized name carries a credential, whatever the route.
fn credential(n: &[u8]) -> bool {
    !holds(n, NOT_CREDENTIALS) && (holds(n, CREDENTIAL_WORDS) || n.ends_with(b"-key"))
}

/// Whether a name is hidden by its spelling alone (one pass over it).
fn by_name(name: &str, hide: Hide) -> bool {
    with_normalized(name, |n| {
        credential(n) || (hide == Hide::CredentialsAndSignatures && holds(n, SIGNATURE_WORDS))
    })
}

/// Whether a header's value is hidden on a route of `preset`.
pub(crate) fn header(name: &str, preset: Option<Preset>, hide: Hide) -> bool {
    by_name(name, hide)
        || preset.is_some_and(|p| {
            p.credential_locations()
                .iter()
                .any(|l| matches!(l, CredentialAt::Header(h) if name.eq_ignore_ascii_case(h)))
        })
}

/// Whether a query parameter's value (its name decoded) is hidden on a route of
/// `preset`.
fn parameter(name: &str, preset: Option<Preset>, hide: Hide) -> bool {
    by_name(name, hide)
        || preset.is_some_and(|p| {
            p.credential_locations()
                .iter()
                .any(|l| matches!(l, CredentialAt::Query(q) if name == *q))
        })
}

/// A query string with the values of the parameters that carry a credential (or a
/// signature, per `hide`) replaced by `[redacted]`, their names and every other
/// parameter kept as they came; borrowed when nothing is hidden.
pub(crate) fn query(query: &str, preset: Option<Preset>, hide: Hide) -> Cow<'_, str> {
    let hidden = |pair: &str| {
        let raw_key = pair.split_once('=').map_or(pair, |(k, _)| k);
        let key = form_urlencoded::parse(raw_key.as_bytes())
            .next()
            .map(|(k, _)| k)
            .unwrap_or_default();
        pair.contains('=') && parameter(&key, preset, hide)
    };
    if !query.split('&').any(hidden) {
        return Cow::Borrowed(query);
    }
    let redacted: Vec<Cow<'_, str>> = query
        .split('&')
        .map(|pair| {
            if hidden(pair) {
                let raw_key = pair.split_once('=').map_or(pair, |(k, _)| k);
                Cow::Owned(format!("{raw_key}={REDACTED}"))
            } else {
                Cow::Borrowed(pair)
            }
        })
        .collect();
    Cow::Owned(redacted.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_credential(name: &str) -> bool {
        with_normalized(name, credential)
    }

    fn is_signature(name: &str) -> bool {
        with_normalized(name, |n| holds(n, SIGNATURE_WORDS))
    }

    #[test]
    fn credential_names_are_known_in_any_spelling() {
        for name in [
            "Authorization",
            "proxy-authorization",
            "Cookie",
            "X-Gitlab-Token",
            "x-hook-secret",
            "X-Webhook-Key",
            "x-api-key",
            "X-Api-Key-Id-Secret",
            "token",
            "secret",
            "api_key",
            "apikey",
            "access_token",
            "hub.verify_token",
            "key",
            "client_secret",
            "password",
            "X-Telegram-Bot-Api-Secret-Token",
        ] {
            assert!(is_credential(name), "{name}");
        }
        for name in [
            "content-type",
            "user-agent",
            "x-github-event",
            "Idempotency-Key",
            "x-contentful-idempotency-key",
            "i-twilio-idempotency-token",
            "X-Event-Key",
            "x-circle-key-id",
            "keyboard",
            "monkey-id",
        ] {
            assert!(!is_credential(name), "{name}");
        }
    }

    #[test]
    fn signatures_are_hidden_only_when_asked() {
        for name in [
            "Stripe-Signature",
            "x-hub-signature-256",
            "X-Shopify-Hmac-Sha256",
            "paypal-transmission-sig",
            "webhook-signature",
        ] {
            assert!(is_signature(name), "{name}");
            assert!(!header(name, None, Hide::Credentials), "{name}");
            assert!(header(name, None, Hide::CredentialsAndSignatures), "{name}");
        }
        for name in ["content-type", "user-agent", "x-github-event"] {
            assert!(!is_signature(name), "{name}");
        }
    }

    #[test]
    fn query_credentials_are_redacted_and_names_kept() {
        let q = "a=1&token=t0k&secret=s3c&api_key=k3y&hub.verify_token=vt&plain&b=2";
        assert_eq!(
            query(q, None, Hide::Credentials),
            "a=1&token=[redacted]&secret=[redacted]&api_key=[redacted]&hub.verify_token=[redacted]&plain&b=2"
        );
        // An encoded name is recognised; its spelling is kept.
        assert_eq!(
            query("ap%69_key=x", None, Hide::Credentials),
            "ap%69_key=[redacted]"
        );
        // Signatures in the query are hidden in the log only.
        assert_eq!(
            query("signature=abc", None, Hide::Credentials),
            "signature=abc"
        );
        assert_eq!(
            query("signature=abc", None, Hide::CredentialsAndSignatures),
            "signature=[redacted]"
        );
        assert!(matches!(
            query("a=1&b=2", None, Hide::CredentialsAndSignatures),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn long_names_are_read_whole() {
        let long = format!("x-{}-webhook-key", "a".repeat(100));
        assert!(is_credential(&long));
        assert!(!is_credential(&"a".repeat(100)));
    }
}
