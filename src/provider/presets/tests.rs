//! The catalogue has no gaps: unique names, every row builds a verifier from a
//! credential of its declared shape, and no preset falls back to another's scheme.

use std::collections::{BTreeMap, HashSet};

use super::*;
use crate::provider::{Preset, Scheme};

/// A credential of the shape a row declares (its `credential` text).
fn sample(shape: &str) -> Credential {
    let text = |s: &str| Credential::Text(Secret::new(s.as_bytes().to_vec()));
    let parts = |kv: &[(&str, &str)]| {
        Credential::Parts(
            kv.iter()
                .map(|(k, v)| ((*k).to_owned(), Secret::new(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    match shape {
        "string"
        | "user:password"
        | "API key appId.keyId:keyValue (or the keyValue alone)"
        | "string (normalised to NFKD at load, as EasyPost's libraries do)" => {
            text("sample-secret")
        }
        "the header's value, { username, password } or { bearer }" => text("Bearer sample"),
        // Wise's production key, as its "Event Handling" page publishes it.
        "public key, PEM (Wise's production or sandbox key)" => text(
            "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAvO8vXV+JksBzZAY6GhSO\nXdoTCfhXaaiZ+qAbtaDBiu2AGkGVpmEygFmWP4Li9m5+Ni85BhVvZOodM9epgW3F\nbA5Q1SexvAF1PPjX4JpMstak/QhAgl1qMSqEevL8cmUeTgcMuVWCJmlge9h7B1CS\nD4rtlimGZozG39rUBDg6Qt2K+P4wBfLblL0k4C4YUdLnpGYEDIth+i8XsRpFlogx\nCAFyH9+knYsDbR43UJ9shtc42Ybd40Afihj8KnYKXzchyQ42aC8aZ/h5hyZ28yVy\nOj3Vos0VdBIs/gAyJ/4yyQFCXYte64I7ssrlbGRaco4nKF3HmaNhxwyKyJafz19e\nHwIDAQAB\n-----END PUBLIC KEY-----\n",
        ),
        // The Ed25519 base point as a one-key JWKS.
        "fal's JWKS JSON (or one JWK, or its x in base64url)" => text(
            r#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"WGZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmY"}]}"#,
        ),
        "HMAC key, hex"
        | "secret, hex (as Squarespace returns it)"
        | "webhook secret, hex (as the dashboard shows it)" => {
            text("00112233445566778899aabbccddeeff")
        }
        "macSecretBase64" | "security token, base64" => text("c2FtcGxlLXNlY3JldA=="),
        "whsec_<base64> (or whpk_<base64> public key)" => text("whsec_c2FtcGxlLXNlY3JldA=="),
        "v1,whsec_<base64> as Supabase shows it (whsec_<base64> accepted)" => {
            text("v1,whsec_c2FtcGxlLXNlY3JldA==")
        }
        "the webhook secret, base64 (whsec_<base64> accepted)" => text("c2FtcGxlLXNlY3JldA=="),
        "the secret as Polar shows it (whsec_<base64> is decoded)"
        | "the webhook secret as Increase shows it (whsec_<base64> is decoded)" => {
            text("polar_whs_sample-secret")
        }
        // The Ed25519 base point, a valid public key.
        "public key, hex" => {
            text("5866666666666666666666666666666666666666666666666666666666666666")
        }
        // The Ed25519 base point again, base64.
        "public key, base64" => text("WGZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmY="),
        // SendGrid's test key from the vectors, SubjectPublicKeyInfo DER in base64.
        "public key, base64 DER or PEM" => text(
            "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAECHtwM9GQGOHZKIv3kaymX4Xk1/oJ4o2QqtbjYCsorArpfOkTSBDcN87+q3wY/BkBLpTUklGyvMDDHXudGcKDQw==",
        ),
        "{ app_secret, verify_token }" => parts(&[("app_secret", "a"), ("verify_token", "v")]),
        "{ primary, secondary }" => parts(&[("primary", "p"), ("secondary", "s")]),
        "{ public_key, private_key }" => parts(&[("public_key", "pk"), ("private_key", "sk")]),
        // Plaid's test JWK from the vectors.
        "the JWK as a table { kid, x, y, … }" => parts(&[
            ("kid", "k1"),
            ("x", "c4VmsZutm012GGtRsWLdz2x1QH9AhD4k_BQXAIJmRYQ"),
            ("y", "VZ_ds2TU171FuVy8mQTUOGE99s0HN7myQyPxQrLly1U"),
        ]),
        "{ webhook_id, cert_pem }" => parts(&[
            ("webhook_id", "WH-1"),
            ("cert_pem", include_str!("test_cert.pem")),
        ]),
        "auth token, or { auth_token, accept_v2 = \"true\" }" => text("sample-token"),
        "{ key_id, secret } per key" => parts(&[("key_id", "k1"), ("secret", "s")]),
        // eBay's SDK test key, on one line as eBay's API returns it.
        "{ key_id, public_key, verification_token? } per key (PEM, one line accepted)" => parts(&[
            ("key_id", "k1"),
            (
                "public_key",
                "-----BEGIN PUBLIC KEY-----MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEZhhxXKtR+TOvtDbgTPCkSof02qgBB7IsYOyf76ilExJ/upAa/vKIKheOoCyOpcLmi4t0b4uepb7LLjmMr90FUg==-----END PUBLIC KEY-----",
            ),
        ]),
        // SendGrid's test key from the vectors, under a key ID.
        "{ key_id, public_key } per key (base64 DER or PEM)" => parts(&[
            ("key_id", "k1"),
            (
                "public_key",
                "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAECHtwM9GQGOHZKIv3kaymX4Xk1/oJ4o2QqtbjYCsorArpfOkTSBDcN87+q3wY/BkBLpTUklGyvMDDHXudGcKDQw==",
            ),
        ]),
        "{ topic_arn, cert_pem?, confirm? } per topic" => parts(&[
            ("topic_arn", "arn:aws:sns:us-east-1:123456789012:orders"),
            ("cert_pem", include_str!("test_cert.pem")),
        ]),
        other => panic!("no sample credential for the shape {other:?}: add one here"),
    }
}

#[test]
fn names_are_unique_and_listed_once() {
    let mut seen = HashSet::new();
    for p in all() {
        assert!(seen.insert(p.name), "{} is declared twice", p.name);
        assert!(
            !p.name.is_empty() && p.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{:?} is not a provider key",
            p.name
        );
    }
    assert_eq!(NAMES.len(), seen.len());
    assert!(NAMES.iter().zip(all()).all(|(n, p)| *n == p.name));
    assert_eq!(Preset::HMAC, Preset::parse("hmac").expect("hmac"));
}

#[test]
fn every_row_names_valid_header_names() {
    // Header names in a row are built with `HeaderName::from_static`, which panics on
    // anything but a lower-case token: building every source once proves them.
    let valid = |h: &str| HeaderName::try_from(h).is_ok_and(|n| n.as_str() == h);
    for p in all() {
        let _ = p.event_id.source();
        let _ = Preset::parse(p.name).map(Preset::info);
        if let DefaultId::Header(names) = p.event_id {
            assert!(names.iter().all(|h| valid(h)), "{}: {names:?}", p.name);
        }
        if let Some(EventTypeAt::Header(h) | EventTypeAt::HeaderAndJson(h, _)) = p.event_type {
            assert!(valid(h), "{}: {h}", p.name);
        }
        for at in p.credential_at {
            if let CredentialAt::Header(h) = at {
                assert!(valid(h), "{}: {h}", p.name);
            }
        }
    }
}

#[test]
fn every_row_builds_a_verifier_from_its_credential_shape() {
    let opts = crate::provider::HmacOptions {
        header: "x-signature".into(),
        algorithm: None,
        encoding: None,
        prefix: None,
        separator: None,
        payload: None,
        timestamp_header: None,
        id_header: None,
    };
    for p in Preset::all() {
        let spec = p.spec();
        let creds = [sample(spec.credential)];
        let opts = (p == Preset::HMAC).then_some(&opts);
        let v = p
            .verifier(&creds, opts, spec.tolerance)
            .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        assert_eq!(v.preset(), p);
        // The handshake built is the one declared, keys filled in.
        assert_eq!(
            std::mem::discriminant(&spec.handshake),
            std::mem::discriminant(v.handshake()),
            "{}",
            spec.name
        );
        assert_eq!(v.fixed_reply(), spec.reply.as_ref(), "{}", spec.name);
        assert!(!spec.scheme.is_empty() && !spec.headers.is_empty());
    }
}

#[test]
fn no_preset_falls_back_to_the_generic_hmac() {
    // Every row but `hmac` builds without a `[routes.hmac]` table, and the generic
    // preset refuses to build without one.
    let creds = [sample("string")];
    assert!(Preset::HMAC.verifier(&creds, None, None).is_err());
    for p in Preset::all().filter(|p| *p != Preset::HMAC) {
        let creds = [sample(p.spec().credential)];
        assert!(p.verifier(&creds, None, None).is_ok(), "{}", p.name());
    }
}

#[test]
fn token_presets_verify_no_signature() {
    // A token preset never builds an HMAC or Standard Webhooks scheme: its `auth`
    // column would otherwise understate what it checks.
    for p in Preset::all().filter(|p| p.spec().auth == Auth::Token) {
        let v = p
            .verifier(&[sample(p.spec().credential)], None, None)
            .expect("builds");
        assert!(matches!(v.scheme(), Scheme::Special(_)), "{}", p.name());
    }
}

#[test]
fn every_source_names_a_preset_once() {
    let mut seen = HashSet::new();
    for s in SOURCES {
        assert!(
            Preset::parse(s.preset).is_some(),
            "{} is no preset",
            s.preset
        );
        assert!(seen.insert(s.preset), "{} is listed twice", s.preset);
        assert!(
            !s.scheme.is_empty() && !s.vectors.is_empty(),
            "{}",
            s.preset
        );
    }
}
