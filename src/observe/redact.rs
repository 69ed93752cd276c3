//! The one rule for what a capture file or a delivery record never shows: which
//! header names and query parameter names carry a credential, and which carry a
//! signature, and which JSON body fields a preset's credential travels in. Captures
//! ([`capture`] here, for [`crate::observe::capture`]) and the delivery log
//! (`observe/recorder.rs`) both redact through this module only, so what one of them
//! hides the other hides too.
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
use crate::replay::Replay;

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

/// Removes every credential from a capture, wherever it travels: headers and query
/// parameters by the one rule above (`Authorization`, `Cookie`,
/// `X-Webhook-Key`, `?token=`, `?api_key=`, …, and what the route's preset names),
/// and the preset's body fields (Notion's `verification_token`, Figma's `passcode`,
/// Graph's `clientState`, …). Signatures are kept: useless without the secret, and
/// a capture replayed as of its own time verifies with them.
pub(crate) fn capture(r: &mut Replay, preset: Option<Preset>) {
    for (name, value) in &mut r.headers {
        if header(name, preset, Hide::Credentials) {
            *value = REDACTED.to_owned();
        }
    }
    if let Some(q) = r.query.as_deref()
        && let std::borrow::Cow::Owned(clean) = query(q, preset, Hide::Credentials)
    {
        r.query = Some(clean);
    }
    if body_has_credentials(preset)
        && let Some(clean) = redact_body(&r.body_bytes(), preset)
    {
        // `Replay::new` chooses between `body` and `body_base64`.
        let fresh = Replay::new(&r.method, &r.path, None, Vec::new(), &clean);
        r.body = fresh.body;
        r.body_base64 = fresh.body_base64;
    }
}

/// Hides the value of the header a route names for its credential (`auth_header`),
/// whatever its spelling.
pub(crate) fn named_header(r: &mut Replay, name: &http::HeaderName) {
    for (n, value) in &mut r.headers {
        if n.eq_ignore_ascii_case(name.as_str()) {
            *value = REDACTED.to_owned();
        }
    }
}

/// Whether the preset has a credential in the JSON body.
pub(crate) fn body_has_credentials(preset: Option<Preset>) -> bool {
    preset.is_some_and(|p| {
        p.credential_locations()
            .iter()
            .any(|l| matches!(l, CredentialAt::Json(_) | CredentialAt::JsonEach(..)))
    })
}

/// A body with the preset's credential fields redacted; `None` when it holds none.
pub(crate) fn redact_body(body: &[u8], preset: Option<Preset>) -> Option<Vec<u8>> {
    if !body_has_credentials(preset) {
        return None;
    }
    redact_json(
        body,
        preset.map(Preset::credential_locations).unwrap_or_default(),
    )
}

/// The body with the credential fields' values replaced, or `None` when it holds
/// none. The values are replaced in the text where they appear, so the rest of the
/// body keeps its bytes; a value written with other escapes than serde_json's falls
/// back to re-serialising the whole document.
fn redact_json(body: &[u8], locations: &[CredentialAt]) -> Option<Vec<u8>> {
    let mut doc: serde_json::Value = serde_json::from_slice(body).ok()?;
    let mut found: Vec<serde_json::Value> = Vec::new();
    let mut take = |v: &mut serde_json::Value| {
        if !v.is_null() {
            found.push(std::mem::replace(
                v,
                serde_json::Value::String(REDACTED.into()),
            ));
        }
    };
    for l in locations {
        match l {
            CredentialAt::Json(ptr) => {
                if let Some(v) = doc.pointer_mut(ptr) {
                    take(v);
                }
            }
            CredentialAt::JsonEach(ptr, field) => {
                if let Some(items) = doc.pointer_mut(ptr).and_then(|a| a.as_array_mut()) {
                    for item in items {
                        if let Some(v) = item.get_mut(*field) {
                            take(v);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if found.is_empty() {
        return None;
    }
    let mut text = String::from_utf8_lossy(body).into_owned();
    let quoted = serde_json::to_string(REDACTED).unwrap_or_default();
    for v in &found {
        let literal = serde_json::to_string(v).unwrap_or_default();
        if !literal.is_empty() {
            text = text.replace(&literal, &quoted);
        }
    }
    // Trust the textual replacement only if no credential is left in the document.
    let left = serde_json::from_str::<serde_json::Value>(&text)
        .map(|d| found.iter().any(|v| contains(&d, v)))
        .unwrap_or(true);
    if left {
        return serde_json::to_vec(&doc).ok();
    }
    Some(text.into_bytes())
}

fn contains(doc: &serde_json::Value, needle: &serde_json::Value) -> bool {
    if doc == needle {
        return true;
    }
    match doc {
        serde_json::Value::Array(a) => a.iter().any(|d| contains(d, needle)),
        serde_json::Value::Object(m) => m.values().any(|d| contains(d, needle)),
        _ => false,
    }
}

#[cfg(test)]
mod capture_tests {
    use super::*;

    #[test]
    fn body_credentials_are_redacted_even_when_escaped_differently() {
        let p = |n| Preset::parse(n);
        // Microsoft Graph: every notification's clientState.
        let mut r = Replay::new(
            "POST",
            "/g",
            None,
            Vec::new(),
            br#"{"value":[{"clientState":"cs-S3CRET","id":1},{"clientState":"cs-S3CRET"}]}"#,
        );
        capture(&mut r, p("msgraph"));
        let body = r.body.clone().unwrap_or_default();
        assert!(
            !body.contains("S3CRET") && body.contains("\"id\":1"),
            "{body}"
        );
        // A value written with escapes serde_json would not use: re-serialised.
        let mut r = Replay::new(
            "POST",
            "/n",
            None,
            vec![("authorization".into(), "Basic x".into())],
            br#"{"verification_token":"secret_\u0053\u0033CRET"}"#,
        );
        capture(&mut r, p("notion"));
        let body = r.body.clone().unwrap_or_default();
        assert!(!body.contains("CRET"), "{body}");
        assert_eq!(r.header("authorization"), Some("[redacted]"));
        // Meta's verify token in the handshake's query; other parameters kept.
        let mut r = Replay::new(
            "GET",
            "/m",
            Some("hub.mode=subscribe&hub.verify_token=vt-S3CRET&hub.challenge=42"),
            Vec::new(),
            b"",
        );
        capture(&mut r, p("meta"));
        assert_eq!(
            r.query.as_deref(),
            Some("hub.mode=subscribe&hub.verify_token=[redacted]&hub.challenge=42")
        );
    }
}
