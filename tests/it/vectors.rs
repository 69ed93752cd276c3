//! Every signed delivery of the shared provider vectors, sent through the real HTTP
//! server at the vector's own `now`: its verdict, its event ID and, for handshakes,
//! the exact response. Vectors of providers hookgate has no preset for yet are listed,
//! not silently skipped.

use std::collections::BTreeMap;
use std::path::PathBuf;

use hookgate::provider::Preset;
use hookgate::server::Clock;
use serde_json::Value;

use crate::support::{TestGateway, Upstream, send};

fn vectors() -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/providers/vectors.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e} (shared/ must sit beside the repository)",
            path.display()
        )
    });
    serde_json::from_str(&text).expect("vectors.json is JSON")
}

/// A TOML string literal (JSON escapes are valid TOML basic-string escapes).
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("string")
}

fn secrets_toml(secret: &Value) -> Option<String> {
    match secret {
        Value::String(s) => Some(format!("[{}]", toml_str(s))),
        Value::Array(items) => {
            let parts: Option<Vec<String>> =
                items.iter().map(|v| v.as_str().map(toml_str)).collect();
            Some(format!("[{}]", parts?.join(", ")))
        }
        _ => None,
    }
}

async fn run_vector(v: &Value) -> Result<(), String> {
    let provider = v["provider"].as_str().unwrap_or_default();
    let case = v["case"].as_str().unwrap_or_default();
    let valid = v["valid"].as_bool().unwrap_or(false);
    let now = v["now"].as_u64().ok_or("vector has no now")?;
    let upstream = Upstream::start().await;
    let secrets =
        secrets_toml(&v["secret"]).ok_or("credential shape not supported by this preset")?;
    let public_url = v["url"]
        .as_str()
        .map(|u| format!("public_url = {}\n", toml_str(u)))
        .unwrap_or_default();
    let cfg = format!(
        "[store]\nbackend = \"memory\"\ndedup_ttl = \"3d\"\n\n[[routes]]\nname = \"r\"\npath = \"/hook\"\nprovider = {}\nsecrets = {secrets}\nupstream = {}\n{public_url}methods = [\"POST\", \"GET\", \"HEAD\", \"PUT\"]\n",
        toml_str(provider),
        toml_str(&upstream.url("/up")),
    );
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
    let reply = send(method, &gw.url("/hook"), &headers, body.clone()).await;
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
    if let Some(expected) = v.get("expected_response").filter(|e| !e.is_null()) {
        let status = expected["status"].as_u64().unwrap_or(200);
        if u64::from(reply.status) != status {
            return Err(format!("{ctx}: expected handshake status {status}"));
        }
        if let Some(hs) = expected["headers"].as_object() {
            for (name, val) in hs {
                let have = reply.header(name).unwrap_or_default();
                let want = val.as_str().unwrap_or_default();
                if !have.starts_with(want) {
                    return Err(format!(
                        "{ctx}: header {name} is {have:?}, expected {want:?}"
                    ));
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
            return Err(format!("{ctx}: handshake body differs from {want_body:?}"));
        }
        if !got.is_empty() {
            return Err(format!("{ctx}: a handshake was forwarded"));
        }
        return Ok(());
    }
    if reply.status != 200 || reply.outcome() != "forwarded" {
        return Err(format!("{ctx}: expected forwarded with 200"));
    }
    let [one] = got.as_slice() else {
        return Err(format!(
            "{ctx}: upstream received {} requests, expected 1",
            got.len()
        ));
    };
    let want_id = v["event_id"]
        .as_str()
        .ok_or(format!("{ctx}: vector has no scalar event_id"))?;
    if one.header("idempotency-key") != Some(want_id)
        || one.header("hookgate-event-id") != Some(want_id)
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
    let again = send(method, &gw.url("/hook"), &headers, body).await;
    if again.status != 200 || again.outcome() != "duplicate" || upstream.count() != 1 {
        return Err(format!(
            "{ctx}: replay answered {} {:?}, upstream saw {}",
            again.status,
            again.outcome(),
            upstream.count()
        ));
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
