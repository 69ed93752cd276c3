//! Micro-benchmarks of the hot path: signature verification per scheme family,
//! event-ID extraction, and the claim on each store.
//!
//! `cargo bench --bench hot_path` (the Redis claim needs `redis-server` on PATH; it is
//! skipped otherwise). `cargo test --benches` runs each once as a smoke test.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use hookgate::config;
use hookgate::provider::{Fingerprint, Inbound, accept};
use hookgate::store::{DedupKey, DedupStore, MemoryStore, RedisStore, Store};

/// A route of `provider` and a delivery for it, from the provider vectors (tests/vectors/) where the
/// scheme needs keys only the vectors have (Ed25519, ECDSA).
/// A vector's route config, headers, body, URL and `now`.
type Case = (config::Config, HeaderMap, Vec<u8>, Option<String>, u64);

fn vector_case(provider: &str, case: &str) -> Option<Case> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/vectors.json");
    let all: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let v = all
        .as_array()?
        .iter()
        .find(|v| v["provider"] == provider && v["case"] == case)?;
    let secret = serde_json::to_string(v["secret"].as_str()?).ok()?;
    let url = v["url"].as_str().map(|u| {
        format!(
            "public_url = {}\n",
            serde_json::to_string(u.split('?').next().unwrap_or(u)).unwrap_or_default()
        )
    });
    let text = format!(
        "[store]\ndedup_ttl = \"3d\"\n[[routes]]\nname = \"r\"\npath = \"/r\"\nprovider = \"{provider}\"\nsecrets = [{secret}]\nupstream = \"http://127.0.0.1:9/\"\n{}",
        url.unwrap_or_default()
    );
    let cfg = config::parse(&text, "bench.toml".as_ref(), &|_: &str| None).ok()?;
    let mut headers = HeaderMap::new();
    for (k, val) in v["headers"].as_object()? {
        headers.insert(
            HeaderName::try_from(k.as_str()).ok()?,
            HeaderValue::from_str(val.as_str()?).ok()?,
        );
    }
    Some((
        cfg,
        headers,
        v["body"].as_str()?.as_bytes().to_vec(),
        v["url"].as_str().map(str::to_owned),
        v["now"].as_u64()?,
    ))
}

fn bench_verify(c: &mut Criterion) {
    let mut g = c.benchmark_group("verify");
    for (provider, case) in [
        ("stripe", "valid"),
        ("github", "valid"),
        ("standard_webhooks", "valid"),
        ("standard_webhooks", "v1a (ed25519) valid"),
        ("discord", "valid interaction"),
        ("sendgrid", "valid batch"),
        ("twilio", "valid"),
        ("contentful", "valid"),
    ] {
        let Some((cfg, headers, body, url, now)) = vector_case(provider, case) else {
            eprintln!("skipping {provider}/{case}: vectors not found");
            continue;
        };
        let route = &cfg.routes[0];
        let query = url
            .as_deref()
            .and_then(|u| u.split_once('?'))
            .map(|(_, q)| q.to_owned());
        g.bench_function(format!("{provider}/{case}"), |b| {
            b.iter(|| {
                let req = Inbound {
                    method: &Method::POST,
                    headers: &headers,
                    body: &body,
                    query: query.as_deref(),
                    url: url.as_deref(),
                };
                black_box(accept(&route.verifier, &route.event_id, &req, now).is_ok())
            })
        });
    }
    g.finish();
}

fn bench_event_id(c: &mut Criterion) {
    let mut g = c.benchmark_group("event_id");
    let body = format!(
        r#"{{"id":"evt_1","object":"event","type":"invoice.paid","data":{{"pad":"{}"}}}}"#,
        "x".repeat(1000)
    );
    let big = "x".repeat(64 * 1024);
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-github-delivery",
        HeaderValue::from_static("72d3162e-cc78-11e3-81ab-4c9367dc0958"),
    );
    let json = hookgate::provider::EventIdSource::Json("/id".into());
    let header = hookgate::provider::EventIdSource::headers(&["x-github-delivery"]);
    g.bench_function("json pointer, 1 KiB body", |b| {
        b.iter(|| black_box(json.extract(&headers, body.as_bytes())))
    });
    g.bench_function("header", |b| {
        b.iter(|| black_box(header.extract(&headers, body.as_bytes())))
    });
    g.bench_function("body fingerprint, 1 KiB", |b| {
        b.iter(|| black_box(Fingerprint::of(body.as_bytes())))
    });
    g.bench_function("body fingerprint, 64 KiB", |b| {
        b.iter(|| black_box(Fingerprint::of(big.as_bytes())))
    });
    g.finish();
}

fn bench_claim(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut g = c.benchmark_group("claim");
    g.measurement_time(Duration::from_secs(3));
    let memory = Store::Memory(MemoryStore::new());
    let mut n = 0u64;
    g.bench_function("memory", |b| {
        b.iter(|| {
            n += 1;
            let key = DedupKey::new("bench:", "r", &format!("evt_{n}"));
            black_box(
                rt.block_on(memory.claim(&key, "fp", Duration::from_secs(30)))
                    .is_ok(),
            )
        })
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0);
    let redis = std::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(std::process::Stdio::null())
        .spawn();
    if let Ok(mut child) = redis {
        std::thread::sleep(Duration::from_millis(300));
        // The connection manager needs a runtime to spawn its connection task on.
        let _guard = rt.enter();
        if let Ok(store) =
            RedisStore::new(&format!("redis://127.0.0.1:{port}"), Duration::from_secs(1))
        {
            let store = Store::Redis(store);
            g.bench_function("redis (one round trip)", |b| {
                b.iter(|| {
                    n += 1;
                    let key = DedupKey::new("bench:", "r", &format!("evt_{n}"));
                    black_box(
                        rt.block_on(store.claim(&key, "fp", Duration::from_secs(30)))
                            .is_ok(),
                    )
                })
            });
        }
        let _ = child.kill();
        let _ = child.wait();
    } else {
        eprintln!("skipping the redis claim: redis-server not found");
    }
    g.finish();
}

criterion_group!(benches, bench_verify, bench_event_id, bench_claim);
criterion_main!(benches);
