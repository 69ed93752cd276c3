//! Property tests standing in for coverage-guided fuzzing (only the stable toolchain is
//! available here): the config parser, every preset's header parsing, event-ID
//! extraction (checked against serde_json) and the whole pipeline over HTTP.
//!
//! CI runs a bounded number of cases; run longer with
//! `PROPTEST_CASES=20000 cargo test --test it providers::fuzz::`. A failure prints the minimal
//! input; add it as a regression case in the test that found it.

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use proptest::prelude::*;

use hookgate::provider::{Inbound, Preset, accept};

use crate::support::parse_config;

fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const HEADERS: &[&str] = &[
    "stripe-signature",
    "x-hub-signature-256",
    "x-hub-signature",
    "x-shopify-hmac-sha256",
    "x-slack-signature",
    "x-slack-request-timestamp",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "x-twilio-signature",
    "paddle-signature",
    "linear-signature",
    "x-signature-ed25519",
    "x-signature-timestamp",
    "x-twilio-email-event-webhook-signature",
    "x-twilio-email-event-webhook-timestamp",
    "twitch-eventsub-message-signature",
    "twitch-eventsub-message-id",
    "twitch-eventsub-message-timestamp",
    "twitch-eventsub-message-type",
    "x-zm-signature",
    "x-zm-request-timestamp",
    "x-hubspot-signature-v3",
    "x-hubspot-request-timestamp",
    "x-hubspot-signature",
    "x-square-hmacsha256-signature",
    "x-gitlab-token",
    "authorization",
    "calendly-webhook-signature",
    "mux-signature",
    "sanity-webhook-signature",
    "recurly-signature",
    "box-signature-primary",
    "box-delivery-timestamp",
    "box-signature-version",
    "box-signature-algorithm",
    "x-docusign-signature-1",
    "x-contentful-signature",
    "x-contentful-signed-headers",
    "x-contentful-timestamp",
    "plaid-verification",
    "paypal-transmission-sig",
    "paypal-transmission-id",
    "paypal-transmission-time",
    "paypal-cert-url",
    "paypal-auth-algo",
    "x-webhook-signature",
    "x-webflow-signature",
    "x-webflow-timestamp",
    "x-hook-secret",
    "x-mandrill-signature",
    "x-zendesk-webhook-signature",
    "x-zendesk-webhook-signature-timestamp",
];

/// A route of every preset, with credentials of the right shape.
fn routes() -> Vec<hookgate::config::Route> {
    let mut text = String::from("[store]\ndedup_ttl = \"3d\"\n");
    // A pinned certificate: arbitrary bodies must never make the gateway fetch one.
    let sns = format!(
        "{{ topic_arn = \"*\", cert_pem = {} }}",
        serde_json::to_string(include_str!("../../fixtures/aws_sns/test_cert.pem")).expect("json")
    );
    for p in Preset::all().filter(|p| *p != Preset::HMAC) {
        let name = p.name();
        let secret = match name {
            "standard_webhooks" | "svix" | "clerk" | "resend" | "openai" | "replicate" | "brex"
            | "lithic" | "incident_io" | "stytch" | "render" | "pleo" | "supabase" | "gemini"
            | "etsy" | "loops" | "vanta" | "finch" | "dodopayments" => {
                "\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\""
            }
            "aws_sns" => sns.as_str(),
            "worldline" => "{ key_id = \"k1\", secret = \"s\" }",
            "ebay" => {
                "{ key_id = \"k1\", verification_token = \"t\", public_key = \"-----BEGIN PUBLIC KEY-----MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEZhhxXKtR+TOvtDbgTPCkSof02qgBB7IsYOyf76ilExJ/upAa/vKIKheOoCyOpcLmi4t0b4uepb7LLjmMr90FUg==-----END PUBLIC KEY-----\" }"
            }
            "circle" => {
                "{ key_id = \"k1\", public_key = \"MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEVs/o5+uQbTjL3chynL4wXgUg2R9q9UU8I5mEovUf86QZ7kOBIjJwqnzD1omageEHWwHdBO6B+dFabmdT9POxg==\" }"
            }
            "adyen" | "adyen_platform" | "squarespace" | "onfleet" => "\"00ff\"",
            "airtable" | "msteams" => "\"c2VjcmV0\"",
            "meta" => "{ app_secret = \"s\", verify_token = \"v\" }",
            "box" => "{ primary = \"p\" }",
            "braintree" => "{ public_key = \"pk\", private_key = \"sk\" }",
            "discord" => "\"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a\"",
            "telnyx" => "\"WGZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmY=\"",
            "sendgrid" => {
                "\"MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEVs/o5+uQbTjL3chynL4wXgUg2R9q9UU8I5mEovUf86QZ7kOBIjJwqnzD1omageEHWwHdBO6B+dFabmdT9POxg==\""
            }
            "plaid" => {
                "{ kid = \"k\", x = \"WKn-ZIGevcwGIyyrzFoZNBdaq9_TsqzGl96oc0CWuis\", y = \"y77t-RvAHRKTsSGdIYUfweuOvwrvDD-Q3Hv5J0fSKbE\" }"
            }
            "wise" => {
                "\"-----BEGIN PUBLIC KEY-----MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAvO8vXV+JksBzZAY6GhSOXdoTCfhXaaiZ+qAbtaDBiu2AGkGVpmEygFmWP4Li9m5+Ni85BhVvZOodM9epgW3FbA5Q1SexvAF1PPjX4JpMstak/QhAgl1qMSqEevL8cmUeTgcMuVWCJmlge9h7B1CSD4rtlimGZozG39rUBDg6Qt2K+P4wBfLblL0k4C4YUdLnpGYEDIth+i8XsRpFlogxCAFyH9+knYsDbR43UJ9shtc42Ybd40Afihj8KnYKXzchyQ42aC8aZ/h5hyZ28yVyOj3Vos0VdBIs/gAyJ/4yyQFCXYte64I7ssrlbGRaco4nKF3HmaNhxwyKyJafz19eHwIDAQAB-----END PUBLIC KEY-----\""
            }
            "falai" => "\"WGZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmY\"",
            "paypal" => continue,
            _ => "\"s\"",
        };
        text.push_str(&format!(
            "[[routes]]\nname = \"{name}\"\npath = \"/{name}\"\nprovider = \"{name}\"\nsecrets = [{secret}]\nupstream = \"http://127.0.0.1:9/\"\npublic_url = \"https://h.example/{name}\"\n"
        ));
    }
    parse_config(&text).routes
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn the_config_parser_never_panics(text in "\\PC{0,400}") {
        let _ = hookgate::config::parse(&text, "fuzz.toml".as_ref(), &|_: &str| None);
    }

    #[test]
    fn mutated_configs_never_panic(cut in 0usize..600, insert in "[\\[\\]{}=\"#\\n a-z0-9${}:/.]{0,12}") {
        let base = include_str!("../../../config.toml");
        let at = base.char_indices().map(|(i, _)| i).nth(cut % base.chars().count()).unwrap_or(0);
        let text = format!("{}{insert}{}", &base[..at], &base[at..]);
        let _ = hookgate::config::parse(&text, "fuzz.toml".as_ref(), &|_: &str| None);
    }

    #[test]
    fn json_pointer_lookup_agrees_with_serde_json(
        body in prop_oneof![
            "\\PC{0,200}",
            r#"\{"(id|a|b)":("[a-z0-9_~/]{0,8}"|[0-9]{1,4}|-?[0-9]{1,3}\.[0-9]|true|null|\[[0-9,"x]{0,10}\]|\{"id":"[a-z]{0,4}"\}),?("(id|a)":"[a-z]{0,4}")?\}"#,
        ],
        pointer in "(/(id|a|b|0|1|a~1b|~0)){0,3}",
    ) {
        let mine = hookgate::provider::json_pointer::scalar(body.as_bytes(), &pointer);
        let reference = serde_json::from_str::<serde_json::Value>(&body).ok().and_then(|v| match v.pointer(&pointer)? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
            _ => None,
        });
        prop_assert_eq!(mine, reference, "body {:?} pointer {:?}", body, pointer);
    }
}

proptest! {
    #![proptest_config(cases(48))]

    #[test]
    fn every_preset_survives_arbitrary_headers_and_bodies(
        picks in proptest::collection::vec((0usize..HEADERS.len(), "[ -~]{0,120}"), 0..8),
        body in proptest::collection::vec(any::<u8>(), 0..300),
        method in prop_oneof![Just(Method::POST), Just(Method::GET), Just(Method::HEAD)],
        query in proptest::option::of("[a-zA-Z0-9=&._%-]{0,40}"),
    ) {
        let mut headers = HeaderMap::new();
        for (i, value) in &picks {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.append(HeaderName::from_static(HEADERS[*i]), v);
            }
        }
        for route in routes() {
            let url = route.public_url.as_ref().map(|u| match &query { Some(q) => format!("{u}?{q}"), None => u.clone() });
            let req = Inbound { method: &method, headers: &headers, body: &body, query: query.as_deref(), url: url.as_deref() };
            // Random input must never verify as an event (a handshake is possible: some are unsigned).
            let verdict = accept(&route.verifier, &route.event_id, &req, 1_767_225_600);
            let unsigned = matches!(route.verifier.preset().info().auth, hookgate::provider::catalogue::Auth::Token);
            prop_assert!(unsigned || !matches!(verdict, Ok(hookgate::provider::Accepted::Delivery(_))), "{} accepted random input", route.name);
        }
    }
}

proptest! {
    #![proptest_config(cases(32))]

    #[test]
    fn the_whole_pipeline_answers_arbitrary_requests_without_forwarding_them(
        path in prop_oneof![Just("/webhooks/stripe".to_string()), Just("/webhooks/github".to_string()), "/[a-z/]{0,12}"],
        method in prop_oneof![Just("POST"), Just("GET"), Just("PUT"), Just("DELETE")],
        picks in proptest::collection::vec((0usize..HEADERS.len(), "[ -~]{0,80}"), 0..6),
        body in proptest::collection::vec(any::<u8>(), 0..2000),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let up = crate::support::Upstream::start().await;
            let gw = crate::support::TestGateway::start(&format!(
                "[server]\nmax_body = \"1KiB\"\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nupstream = \"{u}\"\n[[routes]]\nname = \"github\"\npath = \"/webhooks/github\"\nprovider = \"github\"\nsecrets = [\"g\"]\nupstream = \"{u}\"\n",
                u = up.url("/u")
            )).await;
            let headers: Vec<(String, String)> = picks.iter().map(|(i, v)| (HEADERS[*i].to_string(), v.clone())).collect();
            let r = crate::support::send(method, &gw.url(&path), &headers, body.clone()).await;
            assert!(matches!(r.status, 400 | 401 | 404 | 405 | 413 | 429), "status {} for {method} {path}", r.status);
            assert!(!r.outcome().is_empty(), "every answer says its outcome");
            assert_eq!(up.count(), 0, "nothing random was forwarded");
            gw.stop().await;
        });
    }
}
