//! `hookgate sign` signs as each provider would: for every preset with a signing side,
//! a signed body verifies; the presets without one say so.

use http::{HeaderMap, HeaderValue, Method};

use hookgate::provider::{Inbound, Preset, Verdict};

use crate::support::parse_config;

fn credential(preset: &str) -> &'static str {
    match preset {
        "standard_webhooks" | "svix" | "clerk" | "resend" | "openai" | "replicate" | "brex"
        | "lithic" | "incident_io" | "stytch" | "render" | "pleo" | "supabase" | "gemini"
        | "etsy" | "loops" | "vanta" | "finch" | "dodopayments" => {
            "\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\""
        }
        "adyen_platform" | "adyen" | "squarespace" | "onfleet" => {
            "\"0123456789abcdef0123456789abcdef\""
        }
        "airtable" | "msteams" => "\"c2VjcmV0LWtleQ==\"",
        "meta" => "{ app_secret = \"s\", verify_token = \"v\" }",
        "box" => "{ primary = \"p\", secondary = \"q\" }",
        "braintree" => "{ public_key = \"pk\", private_key = \"sk\" }",
        "discord" => "\"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a\"",
        "telnyx" => "\"WGZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmZmY=\"",
        "aws_sns" => "{ topic_arn = \"*\" }",
        "worldline" => "{ key_id = \"k1\", secret = \"s\" }",
        _ => "\"test-secret\"",
    }
}

/// Presets that cannot be signed with a secret: asymmetric (no private key held; the
/// Ed25519 ones sign with `--private-key`, tested below), signatures inside the body,
/// or a credential that travels in the body or the query. A token sent in a header
/// (GitLab, Okta, Basic auth, …) is "signed" by sending it.
const UNSIGNABLE: &[&str] = &[
    "discord",
    "telnyx",
    "sendgrid",
    "plaid",
    "paypal",
    "aws_sns",
    "mailgun",
    "adyen",
    "braintree",
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
        if matches!(
            name,
            "sendgrid" | "plaid" | "paypal" | "circle" | "ebay" | "wise" | "falai"
        ) {
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

/// Runs the hookgate binary; returns (exit code, stdout, stderr).
fn hookgate(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(args)
        .env_remove("HOOKGATE_PRIVATE_KEY")
        .output()
        .expect("run hookgate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn keygen() -> (String, String, String, String) {
    let (code, out, _) = hookgate(&["keygen"]);
    assert_eq!(code, Some(0));
    let field = |label: &str| {
        out.lines()
            .find(|l| l.starts_with(label))
            .and_then(|l| l.rsplit(' ').next())
            .expect(label)
            .to_owned()
    };
    (
        field("private key"),
        field("public key, standard_webhooks"),
        field("public key, discord"),
        field("public key, telnyx"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ed25519_routes_are_signed_with_a_generated_private_key() {
    use crate::support::{TestGateway, Upstream, post};
    let (private, whpk, discord_hex, telnyx_b64) = keygen();
    assert!(private.starts_with("whsk_") && whpk.starts_with("whpk_"));
    assert_eq!(discord_hex.len(), 64);
    let up = Upstream::start().await;
    let config = format!(
        "[[routes]]\nname = \"sw\"\npath = \"/sw\"\nprovider = \"standard_webhooks\"\nsecrets = [\"{whpk}\"]\nupstream = \"{up}\"\n[[routes]]\nname = \"discord\"\npath = \"/discord\"\nprovider = \"discord\"\nsecrets = [\"{discord_hex}\"]\nupstream = \"{up}\"\n[[routes]]\nname = \"telnyx\"\npath = \"/telnyx\"\nprovider = \"telnyx\"\nsecrets = [\"{telnyx_b64}\"]\nupstream = \"{up}\"\n",
        up = up.url("/up")
    );
    let gw = TestGateway::start(&config).await;
    let dir = tempfile::tempdir().expect("dir");
    let cfg = dir.path().join("hookgate.toml");
    std::fs::write(&cfg, &config).expect("config");
    let cfg = cfg.to_string_lossy().into_owned();

    for (route, path, body) in [
        ("sw", "/sw", r#"{"type":"invoice.paid"}"#),
        ("discord", "/discord", r#"{"id":"disc_1","type":1}"#),
        (
            "telnyx",
            "/telnyx",
            r#"{"data":{"id":"tx_1","event_type":"call.initiated"}}"#,
        ),
    ] {
        let (code, out, err) = hookgate(&[
            "sign",
            "--headers",
            "--route",
            route,
            "--config",
            &cfg,
            "--private-key",
            &private,
            "--event-id",
            "msg_ed_1",
            body,
        ]);
        assert_eq!(code, Some(0), "{route}: {err}");
        let headers: Vec<(String, String)> = out
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect();
        let url = gw.url(path);
        let first = post(&url, &headers, body.as_bytes().to_vec()).await;
        assert_eq!(first.outcome(), "forwarded", "{route}: {}", first.body);
        let again = post(&url, &headers, body.as_bytes().to_vec()).await;
        assert_eq!(again.outcome(), "duplicate", "{route}");
        let tampered = post(&url, &headers, b"{}".to_vec()).await;
        assert_eq!(tampered.status, 401, "{route}");
    }
    assert_eq!(up.count(), 3);

    // A replay file re-signed with the private key (fresh timestamp) goes through too.
    let (code, file, err) = hookgate(&[
        "sign",
        "--route",
        "discord",
        "--config",
        &cfg,
        "--private-key",
        &private,
        r#"{"id":"disc_2","type":1}"#,
    ]);
    assert_eq!(code, Some(0), "{err}");
    let replay = dir.path().join("disc_2.json");
    std::fs::write(&replay, file).expect("replay file");
    let (code, out, err) = hookgate(&[
        "replay",
        &replay.to_string_lossy(),
        "--target",
        &gw.url(""),
        "--resign",
        &private,
        "--expect",
        "forwarded",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(up.count(), 4);

    // Another key is refused before anything is signed; a preset works without a config.
    let (other, _, _, _) = keygen();
    let (code, _, err) = hookgate(&[
        "sign",
        "--headers",
        "--route",
        "sw",
        "--config",
        &cfg,
        "--private-key",
        &other,
        "{}",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("not the private half"), "{err}");
    let (code, out, err) = hookgate(&[
        "sign",
        "--headers",
        "--provider",
        "discord",
        "--private-key",
        &private,
        "{}",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("x-signature-ed25519: "), "{out}");
    let (code, _, err) = hookgate(&[
        "sign",
        "--headers",
        "--provider",
        "stripe",
        "--private-key",
        &private,
        "{}",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("does not sign with Ed25519"), "{err}");
    gw.stop().await;
}
