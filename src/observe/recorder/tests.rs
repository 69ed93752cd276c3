//! The recorder's unit tests.

use super::*;
use crate::admin::AdminContext;

/// The admin listener's context of a gateway on a disk store in `dir`, not serving
/// (its writer not started: a test writes batches itself).
fn disk_admin(dir: &std::path::Path) -> Arc<AdminContext> {
    let text = format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"http://127.0.0.1:9/\"\n",
        dir.join("hookgate.db").display()
    );
    let env = |_: &str| None;
    let cfg = crate::config::parse(&text, std::path::Path::new("test.toml"), &env)
        .unwrap_or_else(|e| panic!("{e}"));
    crate::app::App::build(&cfg, crate::state::Clock::System)
        .expect("state")
        .admin()
        .clone()
}

fn record(n: u64) -> Stored {
    record_with_body(n, None)
}

fn record_with_body(n: u64, body: Option<&[u8]>) -> Stored {
    let id = new_delivery_id(1_764_590_000_000 + n);
    Stored::encode(&View {
        delivery_id: &id,
        received_at: 1_764_590_000_000 + n,
        route: "stripe",
        provider: "stripe",
        peer: "127.0.0.1:5000",
        method: "POST",
        path: "/webhooks/stripe",
        query: None,
        headers: vec![("content-type", "application/json")],
        body: body.map(Raw),
        body_bytes: body.map_or(0, |b| b.len() as u64),
        body_truncated: false,
        event_id: Some("evt"),
        provider_delivery_id: None,
        event_type: None,
        outcome: "forwarded",
        status: 200,
        answer: None,
        duration_us: 1,
        secret: None,
        reason: None,
        replay_of: None,
        queue: None,
    })
}

/// A disk write takes up to BATCH_RECORDS_FRAMED records: an open live stream
/// gets every one of them, and no `lagged` event (which makes every open page
/// read its list again).
#[tokio::test]
async fn one_disk_write_reaches_a_live_stream_whole() {
    use http_body_util::BodyExt as _;
    let dir = tempfile::tempdir().expect("dir");
    let admin = disk_admin(dir.path());
    let req = http::Request::get("/deliveries/stream")
        .body(())
        .expect("request");
    let mut body = crate::admin::deliveries::stream(&admin, &req).into_body();
    let mut batch = Batch {
        records: (0..BATCH_RECORDS_FRAMED as u64).map(record).collect(),
        ..Batch::default()
    };
    admin.recorder.log.prepare(&mut batch);
    admin.recorder.write(batch).await;
    let (mut delivered, mut lagged) = (0, 0);
    let mut text = String::new();
    while delivered + lagged < BATCH_RECORDS_FRAMED {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame()).await;
        let Ok(Some(Ok(frame))) = frame else { break };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        text.push_str(&String::from_utf8_lossy(&data));
        while let Some(cut) = text.find("\n\n") {
            let event: String = text.drain(..cut + 2).collect();
            if event.starts_with("event: delivery\n") {
                delivered += 1;
            } else if let Some(n) = event.strip_prefix("event: lagged\ndata: ") {
                lagged += n.trim().parse::<usize>().unwrap_or(1);
            }
        }
    }
    assert_eq!((delivered, lagged), (BATCH_RECORDS_FRAMED, 0));
}

#[test]
fn an_ipv6_client_has_one_budget_per_64() {
    let mut b = Budgets::default();
    let now = Instant::now();
    let base = u128::from(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, 0));
    // Every request from another address of the same /64.
    let taken = (0..1_000u128)
        .filter(|i| b.take("r", IpAddr::V6((base + i * 7_919 + 1).into()), now))
        .count();
    assert_eq!(taken, REFUSED_BURST as usize);
    // Another /64, and an IPv4 client, have budgets of their own.
    let other = IpAddr::V6((base + (1u128 << 64)).into());
    assert!(b.take("r", other, now));
    assert!(b.take("r", IpAddr::from([192, 0, 2, 1]), now));
    // An IPv4 address written as IPv6 is that IPv4 client.
    let mapped = IpAddr::V6(std::net::Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
    assert!(b.take("r", mapped, now));
    assert_eq!(
        b.buckets.len(),
        3,
        "{:?}",
        b.buckets.keys().collect::<Vec<_>>()
    );
}

#[test]
fn a_full_table_shares_one_bucket_rather_than_record_nothing() {
    let mut b = Budgets::default();
    let now = Instant::now();
    // BUCKETS clients, each still spending its budget.
    for i in 0..BUCKETS as u32 {
        assert!(b.take("r", IpAddr::from((0x0a00_0000 + i).to_be_bytes()), now));
    }
    assert_eq!(b.buckets.len(), BUCKETS);
    // New clients are recorded, all of them from one bucket: its burst, then
    // nothing until it refills.
    let newcomers = (0..100u32)
        .filter(|i| b.take("r", IpAddr::from((0xc000_0200 + i).to_be_bytes()), now))
        .count();
    assert_eq!(newcomers, REFUSED_BURST as usize);
    assert_eq!(b.buckets.len(), BUCKETS);
    // Half a second later, the shared bucket has refilled by one; another route
    // has a shared bucket of its own.
    let later = now + Duration::from_millis(500);
    assert!(b.take("r", IpAddr::from([192, 0, 2, 200]), later));
    assert!(!b.take("r", IpAddr::from([192, 0, 2, 201]), later));
    assert!(b.take("other", IpAddr::from([192, 0, 2, 202]), later));
    // Once the table's clients have refilled, the next sweep forgets them and
    // newcomers get buckets of their own.
    let refilled = now + SWEEP_EVERY;
    assert!(b.take("r", IpAddr::from([192, 0, 2, 203]), refilled));
    assert_eq!(b.buckets.len(), 1);
}

#[test]
fn a_records_headers_are_capped() {
    let big = "x".repeat(3_000);
    let headers: Vec<(String, String)> = (0..10)
        .map(|i| (format!("x-h{i}"), big.clone()))
        .chain([("x-small".to_owned(), "1".to_owned())])
        .collect();
    let mut dropped = String::new();
    let kept = capped(
        headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        &mut dropped,
    );
    let bytes: usize = kept
        .iter()
        .filter(|(n, _)| *n != DROPPED_HEADERS)
        .map(|(n, v)| n.len() + v.len())
        .sum();
    assert!(bytes <= HEADER_BYTES, "{bytes}");
    let names: Vec<&str> = kept.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["x-h0", "x-h1", "x-small", DROPPED_HEADERS]);
    assert_eq!(
        kept.last().map(|(_, v)| *v),
        Some("8 more headers (24032 bytes) not recorded: a record keeps 8 KiB of headers")
    );
    assert!(http::HeaderName::try_from(DROPPED_HEADERS).is_err());
    // Under the cap, nothing changes.
    let mut none = String::new();
    let few = capped([("a", "1"), ("b", "2")].into_iter(), &mut none);
    assert_eq!(few, [("a", "1"), ("b", "2")]);
}

#[test]
fn requests_are_counted_by_route_outcome_and_minute() {
    let minute = 1_764_590_040_000;
    let mut counts = Counts::default();
    for (route, outcome, ms) in [
        ("a", "forwarded", minute),
        ("a", "forwarded", minute + 59_999),
        ("a", "forwarded", minute + 60_000),
        ("a", "duplicate", minute),
        ("b", "forwarded", minute + 1),
    ] {
        count_into(&mut counts, route, outcome, ms);
    }
    let key =
        |route: &str, outcome: &str, ms: u64| (route.to_owned(), outcome.to_owned(), minute_of(ms));
    assert_eq!(counts.len(), 4, "{counts:?}");
    assert_eq!(counts[&key("a", "forwarded", minute)], 2);
    assert_eq!(counts[&key("a", "forwarded", minute + 60_000)], 1);
    assert_eq!(counts[&key("a", "duplicate", minute)], 1);
    assert_eq!(counts[&key("b", "forwarded", minute)], 1);
}

#[cfg(target_os = "linux")]
#[test]
fn the_preparing_thread_runs_in_the_background() {
    use thread_priority::unix::{
        NormalThreadSchedulePolicy, ThreadSchedulePolicy, thread_schedule_policy,
    };
    let policy = std::thread::spawn(|| {
        background();
        thread_schedule_policy().expect("the policy")
    })
    .join()
    .expect("the thread");
    assert_eq!(
        policy,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle)
    );
    // The calling thread is not touched.
    assert_eq!(
        thread_schedule_policy().expect("the policy"),
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other)
    );
}

#[test]
fn signature_headers_are_known_by_name() {
    let hide = crate::observe::redact::Hide::CredentialsAndSignatures;
    for h in [
        "Stripe-Signature",
        "x-hub-signature-256",
        "X-Shopify-Hmac-Sha256",
        "paypal-transmission-sig",
        "webhook-signature",
        "x-gitlab-token",
    ] {
        assert!(crate::observe::redact::header(h, None, hide), "{h}");
    }
    for h in ["content-type", "user-agent", "x-github-event"] {
        assert!(!crate::observe::redact::header(h, None, hide), "{h}");
    }
}

/// The writer's queue holds at most QUEUED_BYTES: records past it are dropped and
/// counted (`dropped_full`), never queued; and the writer is woken once a write's
/// worth (BATCH_BYTES) waits, not only after LINGER.
#[tokio::test]
async fn the_queue_stops_at_its_byte_bound_and_wakes_the_writer_at_a_writes_worth() {
    let dir = tempfile::tempdir().expect("dir");
    let admin = disk_admin(dir.path());
    let rec = &admin.recorder;
    // 4 KiB records: the byte bound comes before the channel's count.
    let body = vec![b'x'; 4096];
    let size = queued_size(&record_with_body(0, Some(&body)));
    let mut woken = None;
    let mut n = 0;
    // Not started: nothing takes from the queue.
    while rec.queued_bytes.load(Ordering::Relaxed) + size <= QUEUED_BYTES {
        rec.enqueue(record_with_body(n, Some(&body)));
        n += 1;
        if woken.is_none()
            && tokio::time::timeout(Duration::ZERO, rec.ready.notified())
                .await
                .is_ok()
        {
            woken = Some(rec.queued_bytes.load(Ordering::Relaxed));
        }
    }
    let woken = woken.expect("the writer was woken");
    assert!(
        (BATCH_BYTES..BATCH_BYTES + size).contains(&woken),
        "woken at {woken} bytes"
    );
    let queued = rec.queued_bytes.load(Ordering::Relaxed);
    let dropped = |r: &Recorder| {
        r.metrics
            .records
            .get_or_create(&ResultLabel {
                result: "dropped_full".to_owned(),
            })
            .get()
    };
    assert_eq!(dropped(rec), 0);
    for i in 0..10 {
        rec.enqueue(record_with_body(n + i, Some(&body)));
    }
    assert_eq!(dropped(rec), 10, "past the bound every record is dropped");
    assert_eq!(rec.queued_bytes.load(Ordering::Relaxed), queued);
    assert!(queued <= QUEUED_BYTES);
}
