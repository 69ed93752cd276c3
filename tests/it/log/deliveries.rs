//! The delivery log and its admin API, on the memory, disk and Redis stores: real
//! signed requests to a real gateway, a counting upstream, the admin listener's
//! answers, and the store's own size measured.

use std::time::Duration;

use crate::support::{RedisServer, TestGateway, Upstream, client, send, stripe_body};

/// The three stores, as `[store]` tables.
enum Backend {
    Memory,
    Disk(tempfile::TempDir),
    Redis(RedisServer),
}

impl Backend {
    fn disk() -> Self {
        Self::Disk(tempfile::tempdir().expect("dir"))
    }

    fn redis() -> Self {
        Self::Redis(RedisServer::start())
    }

    fn store(&self) -> String {
        match self {
            Self::Memory => "[store]\nbackend = \"memory\"\n".to_owned(),
            Self::Disk(d) => format!(
                "[store]\nbackend = \"disk\"\npath = \"{}\"\n",
                d.path().join("hookgate.db").display()
            ),
            Self::Redis(r) => format!("[store]\nbackend = \"redis\"\nurl = \"{}\"\n", r.url()),
        }
    }
}

fn config(backend: &Backend, up: &Upstream, log: &str, route_extra: &str) -> String {
    format!(
        r#"{}
[log]
{log}
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
upstream = "{}"
{route_extra}
"#,
        backend.store(),
        up.url("/hooks/stripe")
    )
}

/// Calls the admin listener: the status and the JSON body.
async fn admin(gw: &TestGateway, method: &str, path: &str) -> (u16, serde_json::Value) {
    let headers = [("X-Requested-By".to_owned(), "hookgate-tests".to_owned())];
    let r = send(method, &gw.admin_url(path), &headers, Vec::new()).await;
    (r.status, serde_json::from_str(&r.body).unwrap_or_default())
}

/// The list's records for a query, once it has at least `n` (the log is written in
/// the background).
async fn list_at_least(gw: &TestGateway, query: &str, n: usize) -> Vec<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (status, body) = admin(gw, "GET", &format!("/deliveries{query}")).await;
        assert_eq!(status, 200, "{body}");
        let records = body["deliveries"].as_array().cloned().unwrap_or_default();
        if records.len() >= n || tokio::time::Instant::now() > deadline {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn header<'a>(record: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    record["headers"]
        .as_array()?
        .iter()
        .find_map(|h| (h[0].as_str()? == name).then(|| h[1].as_str()).flatten())
}

/// Reads a live stream until a `delivery` event whose data holds `needle`.
async fn stream_until(resp: &mut reqwest::Response, needle: &str, limit: Duration) -> bool {
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        let left = deadline - tokio::time::Instant::now();
        match tokio::time::timeout(left, resp.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                seen.push_str(&String::from_utf8_lossy(&chunk));
                if seen
                    .split("\n\n")
                    .any(|ev| ev.starts_with("event: delivery\n") && ev.contains(needle))
                {
                    return true;
                }
            }
            _ => return false,
        }
    }
    false
}

/// A verified delivery is listed (without body), shown (with a redacted signature and
/// its body), streamed, filtered, paged and replayed; refused ones show their reason
/// and no body.
async fn the_log_shows_and_replays_deliveries(backend: Backend) {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(&backend, &up, "", "")).await;
    let mut stream = client()
        .get(gw.admin_url("/deliveries/stream?route=stripe&outcome=forwarded"))
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status(), 200);
    assert_eq!(
        stream.headers()["content-type"].to_str().ok(),
        Some("text/event-stream")
    );

    let body = stripe_body("evt_log_1");
    let r = gw.deliver("stripe", &body, "evt_log_1").await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    assert!(
        stream_until(&mut stream, "evt_log_1", Duration::from_secs(2)).await,
        "the stream delivers the new record within 2 s"
    );

    // Refused: a signature no secret matches, and none at all.
    let mut forged = gw.sign("stripe", &body, "evt_log_1");
    for (n, v) in &mut forged {
        if n.eq_ignore_ascii_case("stripe-signature") {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            *v = format!("t={now},v1={}", "00".repeat(32));
        }
    }
    let r = crate::support::post(
        &gw.url("/webhooks/stripe"),
        &forged,
        body.clone().into_bytes(),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
    let r = crate::support::post(&gw.url("/webhooks/stripe"), &[], body.clone().into_bytes()).await;
    assert_eq!(r.status, 401, "{}", r.body);

    let all = list_at_least(&gw, "", 3).await;
    assert_eq!(all.len(), 3, "{all:?}");
    // Newest first: the two refused, then the delivery.
    let ids: Vec<&str> = all
        .iter()
        .filter_map(|r| r["delivery_id"].as_str())
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(ids, sorted);
    assert!(
        all.iter()
            .all(|r| r.get("body").is_none() && r.get("answer").is_none())
    );
    let missing = &all[0];
    assert_eq!(missing["outcome"], "missing_header");
    assert!(
        missing["reason"]
            .as_str()
            .is_some_and(|r| r.contains("stripe-signature header is missing")),
        "{missing}"
    );
    let forged_rec = &all[1];
    assert_eq!(forged_rec["outcome"], "bad_signature");
    let reason = forged_rec["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("no configured secret matched"), "{reason}");
    assert!(!reason.contains("whsec_test"), "{reason}");
    let verified = &all[2];
    assert_eq!(verified["event_id"], "evt_log_1");
    assert_eq!(verified["outcome"], "forwarded");
    assert_eq!(verified["status"], 200);
    assert_eq!(verified["secret"], "secrets[0]");
    assert_eq!(verified["route"], "stripe");
    assert_eq!(verified["provider"], "stripe");

    // Shown whole: the body as sent, the signature redacted, the upstream's answer.
    let id = verified["delivery_id"].as_str().expect("id");
    let (status, shown) = admin(&gw, "GET", &format!("/deliveries/{id}")).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["body"], body);
    assert_eq!(shown["body_base64"], false);
    assert_eq!(shown["body_bytes"], body.len());
    assert_eq!(header(&shown, "stripe-signature"), Some("[redacted]"));
    assert!(shown["answer"].is_string(), "{shown}");
    let refused_id = forged_rec["delivery_id"].as_str().expect("id");
    let (_, refused) = admin(&gw, "GET", &format!("/deliveries/{refused_id}")).await;
    assert!(refused["body"].is_null(), "{refused}");
    assert_eq!(refused["body_bytes"], body.len(), "its size is still told");
    assert_eq!(header(&refused, "stripe-signature"), Some("[redacted]"));
    let (status, _) = admin(&gw, "GET", "/deliveries/0000000000ff-00000000").await;
    assert_eq!(status, 404);

    // Filters and paging.
    let forwarded = list_at_least(&gw, "?outcome=forwarded", 1).await;
    assert_eq!(forwarded.len(), 1);
    let by_id = list_at_least(&gw, "?event_id=evt_log_1", 1).await;
    assert_eq!(by_id.len(), 1);
    assert!(list_at_least(&gw, "?route=other", 0).await.is_empty());
    let (_, page1) = admin(&gw, "GET", "/deliveries?limit=2").await;
    assert_eq!(page1["deliveries"].as_array().map(Vec::len), Some(2));
    let cursor = page1["next_cursor"].as_str().expect("a cursor");
    let (_, page2) = admin(&gw, "GET", &format!("/deliveries?limit=2&cursor={cursor}")).await;
    let page2 = page2["deliveries"].as_array().cloned().unwrap_or_default();
    assert_eq!(page2.len(), 1);
    assert_eq!(page2[0]["delivery_id"], id);
    let (status, bad) = admin(&gw, "GET", "/deliveries?limit=100000").await;
    assert_eq!(status, 400, "{bad}");
    let (_, later) = admin(&gw, "GET", "/deliveries?since=2100-01-01T00:00:00Z").await;
    assert_eq!(later["deliveries"].as_array().map(Vec::len), Some(0));

    // Replay: the upstream gets it again, with the same Idempotency-Key; recorded.
    assert_eq!(up.count(), 1);
    let (status, replayed) = admin(&gw, "POST", &format!("/deliveries/{id}/replay")).await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["outcome"], "forwarded");
    assert_eq!(up.count(), 2);
    let received = up.received();
    assert_eq!(received[1].header("idempotency-key"), Some("evt_log_1"));
    assert_eq!(received[1].body, received[0].body);
    let new_id = replayed["delivery_id"].as_str().expect("new id").to_owned();
    let replays = list_at_least(&gw, "?outcome=forwarded", 2).await;
    assert_eq!(replays[0]["delivery_id"], new_id.as_str());
    assert_eq!(replays[0]["replay_of"], id);
    // A refused delivery has no body to replay.
    let (status, _) = admin(&gw, "POST", &format!("/deliveries/{refused_id}/replay")).await;
    assert_eq!(status, 409);

    let (status, overview) = admin(&gw, "GET", "/overview").await;
    assert_eq!(status, 200, "{overview}");
    let route = &overview["routes"][0];
    assert_eq!(route["route"], "stripe");
    assert_eq!(route["delivery"], "sync");
    assert_eq!(route["last_hour"]["forwarded"], 2, "{overview}");
    assert_eq!(route["last_hour"]["bad_signature"], 1, "{overview}");
    assert_eq!(overview["log"]["enabled"], true, "{overview}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_shows_and_replays_deliveries_on_memory() {
    the_log_shows_and_replays_deliveries(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_shows_and_replays_deliveries_on_disk() {
    the_log_shows_and_replays_deliveries(Backend::disk()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_shows_and_replays_deliveries_on_redis() {
    the_log_shows_and_replays_deliveries(Backend::redis()).await;
}

/// An outsider's flood of refused requests: a burst is recorded, the rest counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_log_off_requests_are_only_counted() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(&Backend::Memory, &up, "enabled = false", "")).await;
    let r = gw
        .deliver("stripe", &stripe_body("evt_off"), "evt_off")
        .await;
    assert_eq!(r.outcome(), "forwarded");
    let r = crate::support::post(&gw.url("/webhooks/stripe"), &[], b"{}".to_vec()).await;
    assert_eq!(r.status, 401);
    assert_eq!(up.count(), 1, "the delivery goes on as ever");
    // Counted for the overview (written in the background), recorded nowhere.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let overview = loop {
        let (_, overview) = admin(&gw, "GET", "/overview").await;
        if overview["routes"][0]["last_hour"]["forwarded"] == 1
            || tokio::time::Instant::now() > deadline
        {
            break overview;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        overview["routes"][0]["last_hour"]["forwarded"], 1,
        "{overview}"
    );
    assert_eq!(
        overview["routes"][0]["last_hour"]["missing_header"], 1,
        "{overview}"
    );
    assert_eq!(overview["log"]["enabled"], false, "{overview}");
    let (status, body) = admin(&gw, "GET", "/deliveries").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["deliveries"], serde_json::json!([]), "{body}");
    let only_counted = gw
        .metric("hookgate_log_records_total{result=\"not_recorded\"}")
        .await;
    assert_eq!(only_counted, 2.0);
    assert_eq!(
        gw.metric("hookgate_log_records_total{result=\"written\"}")
            .await,
        0.0
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refused_requests_from_one_client_is_bounded() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(&Backend::Memory, &up, "", "")).await;
    let started = std::time::Instant::now();
    for _ in 0..200 {
        let r = crate::support::post(&gw.url("/webhooks/stripe"), &[], b"{}".to_vec()).await;
        assert_eq!(r.status, 401);
    }
    let secs = started.elapsed().as_secs_f64();
    // A valid delivery afterwards is recorded as ever.
    let r = gw
        .deliver("stripe", &stripe_body("evt_after"), "evt_after")
        .await;
    assert_eq!(r.outcome(), "forwarded");
    // Written in order: once the delivery is listed, every refused record before it is.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let recorded = loop {
        let recorded = list_at_least(&gw, "?limit=500", 1).await;
        if recorded
            .first()
            .is_some_and(|r| r["event_id"] == "evt_after")
        {
            break recorded;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a delivery still gets in"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let refused = recorded.len() - 1;
    let bound = 20.0 + 2.0 * secs + 1.0;
    assert!(
        (refused as f64) <= bound && refused >= 20,
        "{refused} refused requests recorded in {secs:.1} s (at most {bound:.0})"
    );
    let not_recorded = gw
        .metric("hookgate_log_records_total{result=\"not_recorded\"}")
        .await;
    assert_eq!(not_recorded as usize, 200 - refused);
    let (_, overview) = admin(&gw, "GET", "/overview").await;
    assert_eq!(
        overview["routes"][0]["last_hour"]["missing_header"], 200,
        "every request is counted: {overview}"
    );
    gw.stop().await;
}

// Issue 38: requests for no route are recorded (method, path, peer, time; no body, no
// query), and a flood of them from many clients (a scanner behind a proxy) is counted
// whole but recorded within its share of the log (a 64th of max_size at once, a 16th
// per keep): the routes' records stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_requests_for_no_route_is_bounded_and_crowds_out_nothing() {
    let up = Upstream::start().await;
    let text = config(
        &Backend::Memory,
        &up,
        "max_size = \"1MiB\"\nkeep = \"1h\"",
        "",
    )
    .replace(
        "[log]",
        "[server]\ntrusted_proxies = [\"127.0.0.0/8\"]\n[log]",
    );
    let gw = TestGateway::start(&text).await;
    let r = gw
        .deliver("stripe", &stripe_body("evt_before"), "evt_before")
        .await;
    assert_eq!(r.outcome(), "forwarded");
    // One as a provider set up with a wrong path sends it.
    let headers = [
        ("user-agent".to_owned(), "Stripe/1.0".to_owned()),
        ("authorization".to_owned(), "Bearer not-kept".to_owned()),
    ];
    let r = send(
        "POST",
        &gw.url("/webhook/stripe?token=s3cret"),
        &headers,
        b"{\"secret\":\"body-not-kept\"}".to_vec(),
    )
    .await;
    assert_eq!(r.status, 404);
    let first = list_at_least(&gw, "?route=%23unrouted", 1).await;
    let rec = &first[0];
    assert_eq!(rec["outcome"], "no_route", "{rec}");
    assert_eq!(rec["method"], "POST", "{rec}");
    assert_eq!(rec["path"], "/webhook/stripe", "{rec}");
    assert_eq!(rec["status"], 404, "{rec}");
    assert!(
        rec["peer"]
            .as_str()
            .is_some_and(|p| p.starts_with("127.0.0.1:")),
        "{rec}"
    );
    assert_eq!(
        rec["headers"],
        serde_json::json!([["user-agent", "Stripe/1.0"], ["content-length", "26"]]),
        "{rec}"
    );
    let (_, whole) = admin(
        &gw,
        "GET",
        &format!(
            "/deliveries/{}",
            rec["delivery_id"].as_str().unwrap_or_default()
        ),
    )
    .await;
    assert!(whole["body"].is_null(), "{whole}");
    for hidden in ["s3cret", "not-kept", "body-not-kept"] {
        assert!(!whole.to_string().contains(hidden), "{hidden}: {whole}");
    }
    // The flood: 400 requests for no route, each from another client, each path 900
    // bytes long.
    let started = std::time::Instant::now();
    let sent = 400;
    let long = "x".repeat(900);
    for i in 0..sent {
        let headers = [(
            "x-forwarded-for".to_owned(),
            format!("10.0.{}.{}", i / 250, i % 250 + 1),
        )];
        let r = send(
            "POST",
            &gw.url(&format!("/scan/{i}/{long}")),
            &headers,
            Vec::new(),
        )
        .await;
        assert_eq!(r.status, 404);
    }
    let secs = started.elapsed().as_secs_f64();
    let r = gw
        .deliver("stripe", &stripe_body("evt_after"), "evt_after")
        .await;
    assert_eq!(r.outcome(), "forwarded");
    list_at_least(&gw, "?route=stripe", 2).await;
    // With the first one, which spent the same budget.
    let recorded = list_at_least(&gw, "?route=%23unrouted&limit=500", 1)
        .await
        .len();
    // Each record of the flood costs at least its path and the log's per-record
    // overhead (256 bytes): the budget is a 64th of 1 MiB, plus a 16th per hour.
    let budget = (1u64 << 20) as f64 / 64.0 + (1u64 << 20) as f64 / 16.0 / 3600.0 * secs;
    let bound = (budget / (900.0 + 256.0)).ceil() as usize + 1;
    assert!(
        recorded >= 1 && recorded <= bound,
        "{recorded} of {sent} requests for no route recorded in {secs:.1} s (bound {bound})"
    );
    // Every one is counted, and the routes' records are all there.
    let (_, overview) = admin(&gw, "GET", "/overview").await;
    assert_eq!(overview["unrouted"]["last_hour"], sent + 1, "{overview}");
    let stripe = list_at_least(&gw, "?route=stripe", 2).await;
    assert_eq!(stripe.len(), 2, "{stripe:?}");
    eprintln!("{sent} requests for no route in {secs:.2} s: {recorded} recorded (bound {bound})");
    gw.stop().await;
}

/// `keep`: a record older than it is gone once the log writes again.
async fn old_records_go_after_keep(backend: Backend) {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(&backend, &up, "keep = \"2s\"", "")).await;
    gw.deliver("stripe", &stripe_body("evt_old"), "evt_old")
        .await;
    let old = list_at_least(&gw, "", 1).await;
    assert_eq!(old.len(), 1);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    gw.deliver("stripe", &stripe_body("evt_new"), "evt_new")
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, body) = admin(&gw, "GET", "/deliveries").await;
        let ids: Vec<String> = body["deliveries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["event_id"].as_str().map(str::to_owned))
            .collect();
        if ids == ["evt_new"] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still {ids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let id = old[0]["delivery_id"].as_str().expect("id");
    let (status, _) = admin(&gw, "GET", &format!("/deliveries/{id}")).await;
    assert_eq!(status, 404);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_records_go_after_keep_on_memory() {
    old_records_go_after_keep(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_records_go_after_keep_on_disk() {
    old_records_go_after_keep(Backend::disk()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_records_go_after_keep_on_redis() {
    old_records_go_after_keep(Backend::redis()).await;
}

/// The margin the store may take beyond `max_size`, as docs/operations.md states it ("The
/// delivery log"): measured 2.3 to 3.4 × max_size for the file (redb grows it in
/// steps, then reuses freed pages: the same after every round), 1.15 × for Redis.
const MAX_SIZE: u64 = 1 << 20;
const DISK_MARGIN: u64 = 2 * MAX_SIZE + (1 << 20);
const REDIS_MARGIN: u64 = MAX_SIZE / 4 + (512 << 10);

/// Writes ten times `max_size` of deliveries (60 KiB bodies): the log keeps the
/// newest within `max_size`, and the space is given back. Each body is new
/// random letters and digits, which the log's compression cannot shrink, so what is
/// written is what the bound is measured against. Each `round` sends new events (a
/// copy's record keeps no body).
async fn write_far_past_max_size(gw: &TestGateway, round: u64) -> Vec<serde_json::Value> {
    use rand::{Rng as _, SeedableRng as _};
    let mut rng = rand::rngs::StdRng::seed_from_u64(25 + round);
    for i in 0..170 {
        let pad: String = (0..60 << 10)
            .map(|_| char::from(rng.sample(rand::distr::Alphanumeric)))
            .collect();
        let id = format!("evt_big_{round}_{i}");
        let body = format!(r#"{{"id":"{id}","object":"event","type":"t","pad":"{pad}"}}"#);
        let r = gw.deliver("stripe", &body, &id).await;
        assert!(
            matches!(r.outcome(), "forwarded" | "duplicate"),
            "{i}: {}",
            r.body
        );
    }
    let newest = list_at_least(gw, "?limit=500", 1).await;
    let size = gw.app.delivery_log_size().await.expect("the log's size");
    assert!(size <= MAX_SIZE, "the log counts {size} bytes");
    // About max_size / 62 KiB records are kept: the oldest went.
    assert!(
        (10..=17).contains(&newest.len()),
        "{} records kept",
        newest.len()
    );
    newest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_file_stays_within_max_size_plus_the_margin() {
    let up = Upstream::start().await;
    let backend = Backend::disk();
    let Backend::Disk(dir) = &backend else {
        unreachable!()
    };
    // The log's own file, beside the store's.
    let file = dir.path().join("hookgate.db.deliveries");
    let log = "max_size = \"1MiB\"\nmax_body = \"64KiB\"";
    let gw = TestGateway::start(&config(&backend, &up, log, "")).await;
    eprintln!(
        "the empty disk file is {} bytes",
        std::fs::metadata(&file).expect("file").len()
    );
    for round in 0..3 {
        write_far_past_max_size(&gw, round).await;
        let len = std::fs::metadata(&file).expect("file").len();
        eprintln!("round {round}: the disk file is {len} bytes");
        assert!(
            len <= MAX_SIZE + DISK_MARGIN,
            "round {round}: the file is {len} bytes"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_memory_stays_within_max_size_plus_the_margin() {
    let up = Upstream::start().await;
    let backend = Backend::redis();
    let Backend::Redis(redis) = &backend else {
        unreachable!()
    };
    let used = || -> u64 {
        let info: String = redis.cmd(redis::cmd("INFO").arg("memory"));
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("used_memory")
    };
    let log = "max_size = \"1MiB\"\nmax_body = \"64KiB\"";
    let gw = TestGateway::start(&config(&backend, &up, log, "")).await;
    // Connected, with the scripts loaded: the baseline.
    gw.deliver("stripe", &stripe_body("evt_first"), "evt_first")
        .await;
    list_at_least(&gw, "", 1).await;
    let before = used();
    for round in 0..3 {
        write_far_past_max_size(&gw, round).await;
        let grown = used().saturating_sub(before);
        eprintln!("round {round}: Redis used_memory grew by {grown} bytes");
        assert!(
            grown <= MAX_SIZE + REDIS_MARGIN,
            "round {round}: Redis grew by {grown} bytes"
        );
    }
    gw.stop().await;
}

/// On a queue route the record links the stored event, shows each destination's
/// state, and a replay queues the event again for delivery.
async fn queue_route_records_link_their_event_and_replay(backend: Backend) {
    let up = Upstream::start().await;
    let route = "delivery = \"queue\"\nretry = { max_attempts = 5, initial = \"50ms\", max_delay = \"100ms\", max_age = \"1h\" }";
    let gw = TestGateway::start(&config(&backend, &up, "", route)).await;
    let r = gw
        .deliver("stripe", &stripe_body("evt_q_1"), "evt_q_1")
        .await;
    assert_eq!(r.outcome(), "queued", "{}", r.body);
    assert!(
        crate::support::eventually(Duration::from_secs(5), || up.count() == 1).await,
        "delivered"
    );
    let listed = list_at_least(&gw, "?outcome=queued", 1).await;
    let id = listed[0]["delivery_id"].as_str().expect("id").to_owned();
    assert_eq!(listed[0]["queue"]["event_id"], "evt_q_1");
    assert_eq!(listed[0]["queue"]["route"], "stripe");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let shown = loop {
        let (status, shown) = admin(&gw, "GET", &format!("/deliveries/{id}")).await;
        assert_eq!(status, 200, "{shown}");
        if shown["destinations"][0]["state"] == "delivered" {
            break shown;
        }
        assert!(tokio::time::Instant::now() < deadline, "{shown}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(shown["destinations"][0]["destination"], "stripe", "{shown}");
    assert!(
        shown["destinations"][0]["attempts"].as_u64() >= Some(1),
        "{shown}"
    );

    let (status, _) = admin(
        &gw,
        "POST",
        &format!("/deliveries/{id}/replay?destination=nope"),
    )
    .await;
    assert_eq!(status, 404);
    let (status, replayed) = admin(&gw, "POST", &format!("/deliveries/{id}/replay")).await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["outcome"], "queued");
    assert!(
        crate::support::eventually(Duration::from_secs(5), || up.count() == 2).await,
        "the replay reaches the upstream again"
    );
    let received = up.received();
    assert_eq!(received[1].header("idempotency-key"), Some("evt_q_1"));
    assert_eq!(received[1].body, received[0].body);
    let replays = list_at_least(&gw, "?outcome=queued", 2).await;
    assert_eq!(replays[0]["replay_of"], id.as_str());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_route_records_link_their_event_and_replay_on_disk() {
    queue_route_records_link_their_event_and_replay(Backend::disk()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_route_records_link_their_event_and_replay_on_redis() {
    queue_route_records_link_their_event_and_replay(Backend::redis()).await;
}

/// `max_body` cuts what is kept, `bodies = "none"` keeps nothing (and nothing to
/// replay), and a provider's unsigned delivery ID is shown beside the signed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_cut_at_max_body_or_not_kept_and_unsigned_ids_are_shown() {
    let up = Upstream::start().await;
    let github = format!(
        "[[routes]]\nname = \"github\"\npath = \"/gh\"\nprovider = \"github\"\nsecrets = [\"gh-secret\"]\nupstream = \"{}\"\n",
        up.url("/gh")
    );
    let gw = TestGateway::start(&format!(
        "{}\n{github}",
        config(&Backend::Memory, &up, "max_body = \"16\"", "")
    ))
    .await;
    let body = stripe_body("evt_cut");
    gw.deliver("stripe", &body, "evt_cut").await;
    let gh_body = r#"{"action":"opened","number":1}"#;
    let r = gw.deliver("github", gh_body, "d-0001").await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let all = list_at_least(&gw, "", 2).await;
    let gh = all
        .iter()
        .find(|r| r["route"] == "github")
        .expect("the github delivery");
    assert_eq!(gh["provider_delivery_id"], "d-0001", "{gh}");
    assert_ne!(gh["event_id"], "d-0001", "deduplicated on the signed bytes");
    assert_eq!(
        list_at_least(&gw, "?event_id=d-0001", 1).await.len(),
        1,
        "found by the provider's ID"
    );
    let cut = all
        .iter()
        .find(|r| r["route"] == "stripe")
        .expect("the stripe delivery");
    let id = cut["delivery_id"].as_str().expect("id");
    let (_, shown) = admin(&gw, "GET", &format!("/deliveries/{id}")).await;
    assert_eq!(shown["body"], &body[..16]);
    assert_eq!(shown["body_truncated"], true);
    assert_eq!(shown["body_bytes"], body.len());
    let (status, _) = admin(&gw, "POST", &format!("/deliveries/{id}/replay")).await;
    assert_eq!(status, 409, "a cut body is not replayed");
    gw.stop().await;

    let gw = TestGateway::start(&config(&Backend::Memory, &up, "bodies = \"none\"", "")).await;
    gw.deliver("stripe", &body, "evt_none").await;
    let all = list_at_least(&gw, "", 1).await;
    let id = all[0]["delivery_id"].as_str().expect("id");
    let (_, shown) = admin(&gw, "GET", &format!("/deliveries/{id}")).await;
    assert!(shown["body"].is_null(), "{shown}");
    assert_eq!(shown["body_bytes"], body.len());
    let (status, _) = admin(&gw, "POST", &format!("/deliveries/{id}/replay")).await;
    assert_eq!(status, 409);
    gw.stop().await;
}

/// The log's endpoints, the stream included, sit behind the admin listener's guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_needs_the_admin_token_and_refuses_other_sites() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nadmin_token = \"tok-123\"\n{}",
        config(&Backend::Memory, &up, "", "")
    ))
    .await;
    for path in ["/deliveries", "/deliveries/stream", "/overview"] {
        let r = client().get(gw.admin_url(path)).send().await.expect("send");
        assert_eq!(r.status(), 401, "{path} without the token");
        let r = client()
            .get(gw.admin_url(path))
            .bearer_auth("tok-123")
            .header("Origin", "https://evil.example")
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 403, "{path} from another origin");
    }
    let mut stream = client()
        .get(gw.admin_url("/deliveries/stream"))
        .bearer_auth("tok-123")
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status(), 200);
    gw.deliver("stripe", &stripe_body("evt_tok"), "evt_tok")
        .await;
    assert!(stream_until(&mut stream, "evt_tok", Duration::from_secs(2)).await);
    drop(stream);
    gw.stop().await;
}
