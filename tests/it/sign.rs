//! `hookgate sign` signs as each provider would: for every preset with a signing side,
//! a signed body verifies; the presets without one say so.

use http::{HeaderMap, HeaderValue, Method};

use hookgate::provider::{Inbound, Preset, Verdict};

use crate::support::parse_config;

fn credential(preset: &str) -> &'static str {
    match preset {
        "standard_webhooks" | "svix" | "clerk" | "resend" => {
            "\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\""
        }
        "adyen_platform" | "adyen" => "\"0123456789abcdef0123456789abcdef\"",
        "airtable" => "\"c2VjcmV0LWtleQ==\"",
        "meta" => "{ app_secret = \"s\", verify_token = \"v\" }",
        "box" => "{ primary = \"p\", secondary = \"q\" }",
        "braintree" => "{ public_key = \"pk\", private_key = \"sk\" }",
        "discord" => "\"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a\"",
        _ => "\"test-secret\"",
    }
}

/// Presets that cannot be signed by the gateway: asymmetric (no private key held),
/// signatures inside the body, or nothing signed at all.
const UNSIGNABLE: &[&str] = &[
    "discord",
    "sendgrid",
    "plaid",
    "paypal",
    "mailgun",
    "adyen",
    "braintree",
    "gitlab",
    "okta",
    "postmark",
    "chargebee",
    "pipedrive",
    "figma",
    "mailchimp",
    "msgraph",
];

#[test]
fn every_signable_preset_verifies_what_it_signs() {
    let now = 1_767_225_600;
    let body = br#"{"id":"evt_1","event_id":"evt_1","webhookTimestamp":1767225600000}"#;
    for p in Preset::all().filter(|p| *p != Preset::HMAC) {
        let name = p.name();
        if matches!(name, "sendgrid" | "plaid" | "paypal") {
            continue; // their credentials are public keys; covered by the vectors
        }
        let cfg = parse_config(&format!(
            "[store]\ndedup_ttl = \"3d\"\n[[routes]]\nname = \"r\"\npath = \"/r\"\nprovider = \"{name}\"\nsecrets = [{}]\nupstream = \"http://127.0.0.1:9/\"\npublic_url = \"https://hooks.example/x\"\n",
            credential(name)
        ));
        let route = &cfg.routes[0];
        let url = "https://hooks.example/x";
        let signed = hookgate::sign::headers(
            &route.verifier,
            &route.event_id,
            body,
            now,
            "evt_1",
            Some(url),
        );
        if UNSIGNABLE.contains(&name) {
            assert!(signed.is_err(), "{name} should say it cannot sign");
            continue;
        }
        let headers = signed.unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.insert(n, HeaderValue::from_str(&v).expect("header value"));
        }
        let req = Inbound {
            method: &Method::POST,
            headers: &map,
            body,
            query: None,
            url: Some(url),
        };
        let verdict = route.verifier.verify(&req, now);
        assert!(
            matches!(verdict, Ok(Verdict::Authentic { secret_index: 0 })),
            "{name}: {verdict:?}"
        );
    }
}
