//! Every signed delivery of the provider vectors (`tests/vectors/`), sent through the real HTTP
//! server at the vector's own `now`: its verdict, its event ID and, for handshakes,
//! the exact response. Vectors of providers hookgate has no preset for yet are listed,
//! not silently skipped.

use std::collections::BTreeMap;
use std::path::PathBuf;

use hookgate::provider::Preset;
use hookgate::time::Clock;
use serde_json::Value;

use crate::support::{TestGateway, Upstream, send};

pub(crate) fn vectors() -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/vectors.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("vectors.json is JSON")
}

/// A TOML string literal (JSON escapes are valid TOML basic-string escapes).
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("string")
}

fn value_toml(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(toml_str(s)),
        Value::Number(n) => Some(n.to_string()),
        Value::Object(m) => {
            // Null members (an unset JWK field) are left out; TOML has no null.
            let parts: Option<Vec<String>> = m
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| Some(format!("{} = {}", toml_str(k), value_toml(v)?)))
                .collect();
            Some(format!("{{ {} }}", parts?.join(", ")))
        }
        _ => None,
    }
}

fn secrets_toml(secret: &Value) -> Option<String> {
    match secret {
        // Asana and Notion hand out the secret in the handshake itself: the route
        // exists before its secret does.
        Value::String(s) if s.is_empty() => Some("[]".into()),
        Value::Array(items) => {
            let parts: Option<Vec<String>> = items.iter().map(value_toml).collect();
            Some(format!("[{}]", parts?.join(", ")))
        }
        one => Some(format!("[{}]", value_toml(one)?)),
    }
}

/// The key hookgate derives from a vector's expected event ID (docs/configuration.md, "Providers"):
/// a scalar as is, one ID of a list as is, several as `batch-` + SHA-256 of the IDs
/// joined by newlines, and none as the SHA-256 of the body.
fn expected_key(event_id: &Value, body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match event_id {
        Value::Null => hex::encode(Sha256::digest(body)),
        Value::Array(items) if items.len() == 1 => text(&items[0]),
        Value::Array(items) => {
            let joined = items.iter().map(text).collect::<Vec<_>>().join("\n");
            format!("batch-{}", hex::encode(Sha256::digest(joined.as_bytes())))
        }
        other => text(other),
    }
}

/// Presets whose event ID comes from a header the signature does not cover (GitLab
/// signs nothing at all): their deliveries are deduplicated on the signed bytes
/// instead (docs/security.md).
const UNSIGNED_ID_PRESETS: &[&str] = &[
    "github",
    "gitlab",
    "shopify",
    "twilio",
    "linear",
    "bitbucket",
    "jira",
    "sentry",
    "razorpay",
    "woocommerce",
    "sanity",
    "contentful",
    "plivo",
];

fn id_is_unsigned(provider: &str, body: &[u8]) -> bool {
    if provider == "zendesk" {
        // The body `id` is signed; the invocation-ID header fallback is not.
        let id = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|j| j.get("id").cloned());
        return id.is_none();
    }
    UNSIGNED_ID_PRESETS.contains(&provider)
}

/// `sig-` + SHA-256 of the signed bytes: the URL (length-prefixed) for the presets
/// that sign it, then the body.
fn signed_content_key(provider: &str, url: Option<&str>, body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    if let Some(u) = url.filter(|_| matches!(provider, "twilio" | "contentful" | "plivo")) {
        h.update((u.len() as u64).to_be_bytes());
        h.update(u.as_bytes());
    }
    h.update(body);
    format!("sig-{}", hex::encode(h.finalize()))
}

/// The bytes a `sig-` key covers besides the URL: the body, or for Plivo V3 the
/// canonical string of its decoded parameters.
fn signed_content(v: &Value, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let v3 = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("x-plivo-signature-v3"));
    if v["provider"] == "plivo" && v3 {
        let get = v["method"].as_str() == Some("GET");
        let url = v["url"].as_str().unwrap_or_default();
        return hookgate::provider::special::plivo_v3_string(get, url, body).into_bytes();
    }
    body.to_vec()
}

/// Vectors that carry an `expected_response` but are real events: forwarded, with
/// the provider's required answer instead of the upstream's.
const FORWARDED_WITH_FIXED_REPLY: &[(&str, &str)] = &[
    ("adyen", "valid"),
    ("msgraph", "valid notification (clientState)"),
    ("msgraph", "tampered body (clientState intact)"),
];

fn response_matches(expected: &Value, reply: &crate::support::Reply) -> Result<(), String> {
    let status = expected["status"].as_u64().unwrap_or(200);
    if u64::from(reply.status) != status {
        return Err(format!("expected status {status}"));
    }
    if let Some(hs) = expected["headers"].as_object() {
        for (name, val) in hs {
            let have = reply.header(name).unwrap_or_default();
            let want = val.as_str().unwrap_or_default();
            if !have.starts_with(want) {
                return Err(format!("header {name} is {have:?}, expected {want:?}"));
            }
        }
    }
    let want_body = expected["body"].as_str().unwrap_or_default();
    let same = match (
        serde_json::from_str::<Value>(want_body),
        serde_json::from_str::<Value>(&reply.body),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => want_body == reply.body,
    };
    if !same {
        return Err(format!("body {:?} differs from {want_body:?}", reply.body));
    }
    Ok(())
}

/// The config of a one-route gateway for a vector, and the query string to send.
pub(crate) fn vector_config(v: &Value, upstream: &str) -> Option<(String, String)> {
    let provider = v["provider"].as_str().unwrap_or_default();
    let secrets = secrets_toml(&v["secret"])?;
    let (public_url, query) = match v["url"].as_str() {
        Some(u) => {
            let (base, q) = u.split_once('?').map_or((u, None), |(b, q)| (b, Some(q)));
            (
                format!("public_url = {}\n", toml_str(base)),
                q.map(|q| format!("?{q}")).unwrap_or_default(),
            )
        }
        None => (String::new(), String::new()),
    };
    // Route keys a vector needs besides its secret (`auth_header` for a token preset
    // whose header the operator names).
    let mut extra = String::new();
    for (key, value) in v["route"].as_object().into_iter().flatten() {
        extra.push_str(&format!("{key} = {}\n", value_toml(value)?));
    }
    let cfg = format!(
        "[store]\nbackend = \"memory\"\ndedup_ttl = \"3d\"\n\n[[routes]]\nname = \"r\"\npath = \"/hook\"\nprovider = {}\nsecrets = {secrets}\nupstream = {}\n{public_url}{extra}",
        toml_str(provider),
        toml_str(upstream),
    );
    Some((cfg, query))
}

async fn run_vector(v: &Value) -> Result<(), String> {
    let provider = v["provider"].as_str().unwrap_or_default();
    let case = v["case"].as_str().unwrap_or_default();
    let valid = v["valid"].as_bool().unwrap_or(false);
    let now = v["now"].as_u64().ok_or("vector has no now")?;
    let upstream = Upstream::start().await;
    let (cfg, query) =
        vector_config(v, &upstream.url("/up")).ok_or("credential shape not supported")?;
    let gw = TestGateway::start_with_clock(&cfg, Clock::Fixed(now)).await;
    let headers: Vec<(String, String)> = v["headers"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let body = v["body"].as_str().unwrap_or_default().as_bytes().to_vec();
    let method = v["method"].as_str().unwrap_or("POST");
    let target = gw.url(&format!("/hook{query}"));
    let reply = send(method, &target, &headers, body.clone()).await;
    let got = upstream.received();

    let ctx = format!(
        "{provider} / {case}: status {} body {}",
        reply.status, reply.body
    );
    if !valid {
        if !(reply.status == 401 || reply.status == 400) {
            return Err(format!("{ctx}: expected a rejection (401/400)"));
        }
        if !got.is_empty() {
            return Err(format!("{ctx}: a rejected delivery reached the upstream"));
        }
        return Ok(());
    }
    let expected = v.get("expected_response").filter(|e| !e.is_null());
    if reply.outcome() == "handshake" {
        let Some(expected) = expected else {
            return Err(format!(
                "{ctx}: answered as a handshake, but the vector is an event"
            ));
        };
        if FORWARDED_WITH_FIXED_REPLY.contains(&(provider, case)) {
            return Err(format!(
                "{ctx}: this event must be forwarded, not answered as a handshake"
            ));
        }
        response_matches(expected, &reply).map_err(|e| format!("{ctx}: {e}"))?;
        if !got.is_empty() {
            return Err(format!("{ctx}: a handshake was forwarded"));
        }
        return Ok(());
    }
    if reply.outcome() != "forwarded" {
        return Err(format!(
            "{ctx}: expected forwarded, got {:?}",
            reply.outcome()
        ));
    }
    if let Some(expected) = expected {
        response_matches(expected, &reply).map_err(|e| format!("{ctx}: {e}"))?;
    } else if reply.status != 200 {
        return Err(format!("{ctx}: expected the upstream's 200"));
    }
    let [one] = got.as_slice() else {
        return Err(format!(
            "{ctx}: upstream received {} requests, expected 1",
            got.len()
        ));
    };
    let want_id = if id_is_unsigned(provider, &body) {
        signed_content_key(
            provider,
            v["url"].as_str(),
            &signed_content(v, &headers, &body),
        )
    } else {
        expected_key(&v["event_id"], &body)
    };
    if one.header("idempotency-key") != Some(want_id.as_str())
        || one.header("hookgate-event-id") != Some(want_id.as_str())
    {
        return Err(format!(
            "{ctx}: event id forwarded as {:?}, expected {want_id:?}",
            one.header("idempotency-key")
        ));
    }
    if one.body.as_ref() != body.as_slice() {
        return Err(format!("{ctx}: body not forwarded byte for byte"));
    }
    // The same delivery again is a duplicate, never forwarded.
    let again = send(method, &target, &headers, body).await;
    if again.outcome() != "duplicate" || upstream.count() != 1 {
        return Err(format!(
            "{ctx}: replay answered {} {:?}, upstream saw {}",
            again.status,
            again.outcome(),
            upstream.count()
        ));
    }
    match expected {
        Some(e) => response_matches(e, &again)
            .map_err(|e| format!("{ctx}: the duplicate's answer: {e}"))?,
        None if again.status != 200 => {
            return Err(format!("{ctx}: the duplicate's answer is {}", again.status));
        }
        None => {}
    }
    gw.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_vector_of_a_supported_provider_gets_its_verdict() {
    let all = vectors();
    let mut failures = Vec::new();
    let mut passed = 0;
    let mut unsupported: BTreeMap<String, usize> = BTreeMap::new();
    for v in &all {
        let provider = v["provider"].as_str().unwrap_or_default();
        if Preset::parse(provider).is_none() {
            *unsupported.entry(provider.to_owned()).or_default() += 1;
            continue;
        }
        match run_vector(v).await {
            Ok(()) => passed += 1,
            Err(e) => failures.push(e),
        }
    }
    let skipped: usize = unsupported.values().sum();
    eprintln!(
        "provider vectors: {passed} passed, {} failed; {skipped} vectors of {} providers not yet supported: {}",
        failures.len(),
        unsupported.len(),
        unsupported
            .iter()
            .map(|(p, n)| format!("{p} ({n})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(
        failures.is_empty(),
        "vector failures:\n{}",
        failures.join("\n")
    );
    // The presets of this release: every one of their vectors must have run.
    for p in [
        "stripe",
        "github",
        "shopify",
        "slack",
        "standard_webhooks",
        "svix",
        "clerk",
        "resend",
    ] {
        assert!(!unsupported.contains_key(p), "{p} vectors were not run");
    }
    assert_eq!(
        passed + skipped,
        all.len(),
        "every vector is either run or listed as unsupported"
    );
}

#[test]
fn unsupported_providers_are_refused_by_the_config_not_ignored() {
    for v in vectors() {
        let provider = v["provider"].as_str().unwrap_or_default();
        if Preset::parse(provider).is_some() {
            continue;
        }
        let cfg = format!(
            "[[routes]]\nname = \"r\"\npath = \"/h\"\nprovider = {}\nsecrets = [\"x\"]\nupstream = \"http://127.0.0.1:9/\"\n",
            toml_str(provider)
        );
        let err = hookgate::config::parse(&cfg, std::path::Path::new("t.toml"), &|_: &str| None)
            .expect_err("unknown provider must be an error");
        assert!(err.to_string().contains("unknown provider"), "{err}");
    }
}

/// Plivo signs decoded parameters: the same parameters encoded another way (`+` or
/// `%20` for a space) carry the same signature, so they take the same key, and the
/// re-encoded copy (other bytes under a claimed key) is refused, never forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plivo_parameters_encoded_another_way_are_not_a_new_delivery() {
    let v = vectors()
        .into_iter()
        .find(|v| v["provider"] == "plivo" && v["case"] == "official V3, POST without a query")
        .expect("the official Plivo vector");
    let upstream = Upstream::start().await;
    let (cfg, query) = vector_config(&v, &upstream.url("/up")).expect("config");
    let now = v["now"].as_u64().expect("now");
    let gw = TestGateway::start_with_clock(&cfg, Clock::Fixed(now)).await;
    let headers: Vec<(String, String)> = v["headers"]
        .as_object()
        .expect("headers")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    let body = v["body"].as_str().expect("body").to_owned();
    assert!(body.contains('+'), "the vector encodes a space as +");
    let target = gw.url(&format!("/hook{query}"));
    let first = send("POST", &target, &headers, body.clone().into_bytes()).await;
    assert_eq!(first.outcome(), "forwarded", "{}", first.body);
    let again = send(
        "POST",
        &target,
        &headers,
        body.replace('+', "%20").into_bytes(),
    )
    .await;
    assert_eq!(
        (again.status, again.outcome()),
        (422, "mismatch"),
        "{}",
        again.body
    );
    assert_eq!(upstream.count(), 1);
    gw.stop().await;
}
