//! One conformance suite for the delivery log's contract (`hookgate::store::log`, the
//! doc of `DeliveryLog`), run on its three backends: the memory store's ring, the disk
//! store's log file and a real Redis. Each property is a test per backend
//! (`<property>_on_<backend>`), so a failure names its backend.
//!
//! Records are written straight to the log, as the recorder writes them: what a record
//! holds (redacted credentials and signatures, a body cut at `log.max_body`, the
//! refused-request budget) is the recorder's, tested through a gateway in `log/`; a
//! backend keeps what it is given. What each backend takes beyond `max_size` (the file,
//! Redis's memory) is measured in `log/deliveries.rs`, and the store's reserve in
//! `log/budgets.rs`.

use std::time::Duration;

use hookgate::store::log::{
    Appended, Batch, Bounds, COUNT_TENS, Counts, DeliveryLog, DeliveryRecord, LogQuery, QueueLink,
    Stored, Width, minute_of,
};
use hookgate::store::{DiskStore, MemoryStore, RedisStore, Store};

use crate::support::RedisServer;

/// The routes the log is told are configured (Redis keeps each route's records apart,
/// and reads only these).
const ROUTES: [&str; 2] = ["stripe", "github"];

/// Bounds that drop nothing in a test.
const ROOMY: Bounds = Bounds {
    keep: Duration::from_secs(3600),
    max_size: 1 << 30,
};

/// A delivery ID: `<ms, 12 hex digits>-<n, 8 hex digits>`, as the gateway makes them.
fn id(ms: u64, n: u32) -> String {
    format!("{ms:012x}-{n:08x}")
}

fn now_ms() -> u64 {
    hookgate::queue::now_ms()
}

/// A forwarded Stripe delivery received at `id`'s millisecond.
fn record(id: &str, body: &str) -> DeliveryRecord {
    let received_at = u64::from_str_radix(&id[..12], 16).expect("an ID");
    DeliveryRecord {
        delivery_id: id.to_owned(),
        received_at,
        route: "stripe".into(),
        provider: "stripe".into(),
        peer: "203.0.113.9:5000".into(),
        method: "POST".into(),
        path: "/webhooks/stripe".into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("stripe-signature".into(), "[redacted]".into()),
        ],
        body: Some(body.to_owned()),
        body_base64: false,
        body_bytes: body.len() as u64,
        body_truncated: false,
        event_id: Some("evt_1".into()),
        provider_delivery_id: None,
        event_type: Some("invoice.paid".into()),
        outcome: "forwarded".into(),
        status: 200,
        answer: Some(r#"{"status":"forwarded"}"#.into()),
        duration_us: 900,
        secret: Some("secrets[0]".into()),
        reason: None,
        replay_of: None,
        queue: None,
    }
}

/// The record as a list shows it: without its body and answer.
fn summary(r: &DeliveryRecord) -> DeliveryRecord {
    DeliveryRecord {
        body: None,
        answer: None,
        ..r.clone()
    }
}

/// The backends.
#[derive(Debug, Clone, Copy)]
enum On {
    Memory,
    Disk,
    Redis,
}

/// A log on one backend, and what it needs kept while the test runs.
struct Log {
    log: DeliveryLog,
    routes: Vec<String>,
    _dir: Option<tempfile::TempDir>,
    _store: Store,
    _redis: Option<RedisServer>,
}

impl On {
    fn open(self, bounds: Bounds) -> Log {
        let (store, dir, redis) = match self {
            Self::Memory => (Store::Memory(MemoryStore::new()), None, None),
            Self::Disk => {
                let dir = tempfile::tempdir().expect("dir");
                let store = DiskStore::open(&dir.path().join("hookgate.db")).expect("open");
                (Store::Disk(store), Some(dir), None)
            }
            Self::Redis => {
                let redis = RedisServer::start();
                let store = RedisStore::new(&redis.url(), Duration::from_secs(2)).expect("store");
                (Store::Redis(store), None, Some(redis))
            }
        };
        let log = DeliveryLog::open(&store, bounds, "hookgate:").expect("the log");
        Log {
            log,
            routes: ROUTES.iter().map(|r| (*r).to_owned()).collect(),
            _dir: dir,
            _store: store,
            _redis: redis,
        }
    }
}

impl Log {
    /// Writes one batch of records (and counts), as one write of the recorder.
    async fn write(&self, records: &[&DeliveryRecord], counts: Counts) {
        let mut batch = Batch {
            records: records.iter().copied().map(Stored::from_record).collect(),
            counts,
            encoded: None,
        };
        self.log.prepare(&mut batch);
        assert_eq!(
            self.log.append(batch, &self.routes).await.expect("append"),
            Appended::Written
        );
    }

    /// Writes records of these IDs (empty bodies), one batch.
    async fn write_ids(&self, ids: &[&str]) {
        let records: Vec<DeliveryRecord> = ids.iter().map(|i| record(i, "{}")).collect();
        self.write(&records.iter().collect::<Vec<_>>(), Counts::default())
            .await;
    }

    async fn page(&self, q: &LogQuery) -> hookgate::store::log::LogPage {
        self.log.list(q, &self.routes).await.expect("list")
    }

    /// The IDs a query lists, newest first (one page of up to `q.limit`).
    async fn listed(&self, q: &LogQuery) -> Vec<String> {
        self.page(q)
            .await
            .records
            .into_iter()
            .map(|r| r.delivery_id)
            .collect()
    }

    async fn get(&self, id: &str) -> Option<DeliveryRecord> {
        self.log.get(id, &self.routes).await.expect("get")
    }

    async fn size(&self) -> u64 {
        self.log.size(&self.routes).await.expect("size")
    }
}

fn all(limit: usize) -> LogQuery {
    LogQuery {
        limit,
        ..LogQuery::default()
    }
}

/// Five records whose IDs are out of the order they are written in: `a` took longer
/// than `b` and `c`, so it comes in the second write; `b2` was received in the same
/// millisecond as `b`, and comes in the second write too. Their IDs, oldest first,
/// and the millisecond of the first.
async fn written_out_of_order(log: &Log) -> ([String; 5], u64) {
    let now = now_ms();
    let (a, b, b2, c, d) = (
        id(now, 1),
        id(now + 1, 2),
        id(now + 1, 6),
        id(now + 2, 3),
        id(now + 3, 4),
    );
    log.write_ids(&[&b, &c]).await;
    log.write_ids(&[&d, &b2, &a]).await;
    ([a, b, b2, c, d], now)
}

// ---- The properties ----

/// A record reads back whole as it was written, whatever it holds (a body that is not
/// UTF-8 kept as base64, a queue link, a replay's origin, no body at all); a list
/// shows it without its body and answer; an ID the log does not hold, or that is no
/// ID, is not found.
async fn a_record_reads_back_as_it_was_written(on: On) {
    let log = on.open(ROOMY);
    let now = now_ms();
    let sync = DeliveryRecord {
        path: "/webhooks/stripe?a=1".into(),
        ..record(&id(now, 1), r#"{"id":"evt_1","object":"event"}"#)
    };
    let queued = DeliveryRecord {
        body: Some("AP/+".into()),
        body_base64: true,
        body_bytes: 3,
        event_id: Some("evt_2".into()),
        outcome: "queued".into(),
        status: 202,
        answer: Some(r#"{"status":"queued"}"#.into()),
        replay_of: Some(id(now, 1)),
        queue: Some(QueueLink {
            route: "stripe".into(),
            event_id: "evt_2".into(),
        }),
        ..record(&id(now + 1, 2), "")
    };
    let refused = DeliveryRecord {
        route: "github".into(),
        provider: "github".into(),
        body: None,
        body_bytes: 120,
        event_id: None,
        event_type: None,
        outcome: "bad_signature".into(),
        status: 401,
        answer: None,
        secret: None,
        reason: Some("no configured secret matched the signature".into()),
        ..record(&id(now + 2, 3), "")
    };
    log.write(&[&sync, &queued], Counts::default()).await;
    log.write(&[&refused], Counts::default()).await;
    for r in [&sync, &queued, &refused] {
        assert_eq!(log.get(&r.delivery_id).await.as_ref(), Some(r), "{on:?}");
    }
    let page = log.page(&all(10)).await;
    assert_eq!(
        page.records,
        [summary(&refused), summary(&queued), summary(&sync)],
        "{on:?}"
    );
    assert_eq!(page.next_cursor, None);
    assert_eq!(log.get(&id(now, 9)).await, None);
    assert_eq!(log.get("not an id").await, None);
}

/// Records are listed newest first in ID order, however they were written (a record
/// written after newer ones), and each is found by its ID.
async fn records_are_listed_newest_first_in_id_order(on: On) {
    let log = on.open(ROOMY);
    let ([a, b, b2, c, d], _) = written_out_of_order(&log).await;
    assert_eq!(
        log.listed(&all(10)).await,
        [d.as_str(), c.as_str(), b2.as_str(), b.as_str(), a.as_str()],
        "{on:?}"
    );
    for want in [&a, &b, &b2, &c, &d] {
        let got = log.get(want).await.expect("found");
        assert_eq!(&got.delivery_id, want);
        assert_eq!(got.body.as_deref(), Some("{}"));
    }
}

/// Pages follow the cursor to the end: each cursor falls between writes or inside a
/// millisecond, no record is listed twice or left out, and the last page has none.
async fn pages_follow_the_cursor_to_the_end(on: On) {
    let log = on.open(ROOMY);
    let ([a, b, b2, c, d], _) = written_out_of_order(&log).await;
    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let page = log
            .page(&LogQuery {
                cursor: cursor.clone(),
                ..all(2)
            })
            .await;
        pages.push(
            page.records
                .into_iter()
                .map(|r| r.delivery_id)
                .collect::<Vec<_>>(),
        );
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
        assert!(pages.len() < 10, "{on:?}: the cursor never ends: {pages:?}");
    }
    assert_eq!(pages, [vec![d, c], vec![b2, b], vec![a]], "{on:?}");
}

/// `since` (inclusive) and `before` (exclusive) bound a page by the time received.
async fn since_and_before_bound_a_page_by_time(on: On) {
    let log = on.open(ROOMY);
    let ([a, b, b2, c, d], now) = written_out_of_order(&log).await;
    let window = LogQuery {
        since: Some(now + 1),
        before: Some(now + 2),
        ..all(10)
    };
    assert_eq!(
        log.listed(&window).await,
        [b2.as_str(), b.as_str()],
        "{on:?}"
    );
    let since = LogQuery {
        since: Some(now + 2),
        ..all(10)
    };
    assert_eq!(log.listed(&since).await, [d.as_str(), c.as_str()], "{on:?}");
    let before = LogQuery {
        before: Some(now + 1),
        ..all(10)
    };
    assert_eq!(log.listed(&before).await, [a.as_str()], "{on:?}");
}

/// A list across routes merges them newest first; each filter (route, outcome, event
/// type, event ID, which also finds a provider's own delivery ID) selects its records,
/// and filters combine.
async fn filters_select_by_route_outcome_type_and_event_id(on: On) {
    let log = on.open(ROOMY);
    let now = now_ms();
    let paid = record(&id(now, 1), "{}");
    let forged = DeliveryRecord {
        event_id: None,
        event_type: None,
        outcome: "bad_signature".into(),
        status: 401,
        ..record(&id(now + 1, 2), "{}")
    };
    let push = DeliveryRecord {
        route: "github".into(),
        provider: "github".into(),
        event_id: Some("sha256:5d41402a".into()),
        provider_delivery_id: Some("d-0001".into()),
        event_type: Some("push".into()),
        ..record(&id(now + 2, 3), "{}")
    };
    let copy = DeliveryRecord {
        outcome: "duplicate".into(),
        ..record(&id(now + 3, 4), "{}")
    };
    log.write(&[&paid, &forged], Counts::default()).await;
    log.write(&[&push, &copy], Counts::default()).await;
    let ids = |rs: &[&DeliveryRecord]| -> Vec<String> {
        rs.iter().map(|r| r.delivery_id.clone()).collect()
    };
    let q = |f: fn(&mut LogQuery)| {
        let mut q = all(10);
        f(&mut q);
        q
    };
    let cases: [(LogQuery, Vec<String>); 8] = [
        (all(10), ids(&[&copy, &push, &forged, &paid])),
        (q(|q| q.route = Some("github".into())), ids(&[&push])),
        (
            q(|q| q.outcome = Some("forwarded".into())),
            ids(&[&push, &paid]),
        ),
        (
            q(|q| q.event_type = Some("invoice.paid".into())),
            ids(&[&copy, &paid]),
        ),
        (
            q(|q| q.event_id = Some("evt_1".into())),
            ids(&[&copy, &paid]),
        ),
        (q(|q| q.event_id = Some("d-0001".into())), ids(&[&push])),
        (
            q(|q| {
                q.route = Some("stripe".into());
                q.outcome = Some("duplicate".into());
            }),
            ids(&[&copy]),
        ),
        (q(|q| q.route = Some("nope".into())), Vec::new()),
    ];
    for (query, want) in cases {
        assert_eq!(log.listed(&query).await, want, "{on:?}: {query:?}");
    }
}

/// Past `max_size` the oldest records go: after every write the log counts at most
/// `max_size`, and what it keeps is the newest, whole. Each body is new random
/// letters and digits, which no backend's compression shrinks much.
async fn the_oldest_records_go_past_max_size(on: On) {
    use rand::{Rng as _, SeedableRng as _};
    const MAX_SIZE: u64 = 64 << 10;
    let log = on.open(Bounds {
        keep: Duration::from_secs(3600),
        max_size: MAX_SIZE,
    });
    let mut rng = rand::rngs::StdRng::seed_from_u64(36);
    let now = now_ms();
    let mut written = Vec::new();
    for n in 0..40_u32 {
        let pad: String = (0..4 << 10)
            .map(|_| char::from(rng.sample(rand::distr::Alphanumeric)))
            .collect();
        let r = record(&id(now + u64::from(n), n), &format!(r#"{{"pad":"{pad}"}}"#));
        log.write(&[&r], Counts::default()).await;
        let size = log.size().await;
        assert!(
            size > 0 && size <= MAX_SIZE,
            "{on:?}: {size} bytes counted after record {n}"
        );
        written.push(r);
    }
    let kept = log.listed(&all(100)).await;
    assert!(
        !kept.is_empty() && kept.len() < written.len(),
        "{on:?}: {} of {} records kept",
        kept.len(),
        written.len()
    );
    let newest: Vec<String> = written
        .iter()
        .rev()
        .take(kept.len())
        .map(|r| r.delivery_id.clone())
        .collect();
    assert_eq!(kept, newest, "{on:?}: the newest are kept");
    let last = written.last().expect("written");
    assert_eq!(log.get(&last.delivery_id).await.as_ref(), Some(last));
    assert_eq!(log.get(&written[0].delivery_id).await, None, "{on:?}");
}

/// A record older than `keep` goes at the next write; one that ages out of an idle log
/// goes when the bounds are enforced with nothing written (`retain`).
async fn records_older_than_keep_go(on: On) {
    let keep = Duration::from_secs(2);
    let log = on.open(Bounds {
        keep,
        max_size: 1 << 30,
    });
    let now = now_ms();
    let stale = id(now - 3_600_000, 1);
    let fresh = id(now, 2);
    log.write_ids(&[&stale]).await;
    log.write_ids(&[&fresh]).await;
    assert_eq!(log.get(&stale).await, None, "{on:?}");
    assert!(log.get(&fresh).await.is_some(), "{on:?}");
    assert_eq!(log.listed(&all(10)).await, [fresh.as_str()], "{on:?}");

    tokio::time::sleep(keep + Duration::from_millis(500)).await;
    log.log.retain(&log.routes).await.expect("retain");
    assert_eq!(log.get(&fresh).await, None, "{on:?}");
    assert!(log.listed(&all(10)).await.is_empty(), "{on:?}");
}

/// Requests are counted per route and outcome by minute, whether recorded or only
/// counted: writes add up, `counts` sums the minutes from the one asked for, and
/// minutes past the hour the overview shows are dropped.
async fn counts_add_up_per_route_and_outcome_by_minute(on: On) {
    let log = on.open(ROOMY);
    let minute = minute_of(now_ms());
    let counted = |entries: &[(&str, &str, u64, u64)]| -> Counts {
        entries
            .iter()
            .map(|(route, outcome, m, n)| (((*route).to_owned(), (*outcome).to_owned(), *m), *n))
            .collect()
    };
    log.write(
        &[],
        counted(&[
            ("stripe", "forwarded", minute, 3),
            ("stripe", "bad_signature", minute, 1),
            ("github", "forwarded", minute, 2),
            ("stripe", "forwarded", minute - 10, 5),
            ("stripe", "forwarded", minute - 100, 7),
        ]),
    )
    .await;
    let r = record(&id(now_ms(), 1), "{}");
    log.write(&[&r], counted(&[("stripe", "forwarded", minute, 1)]))
        .await;
    let counts = |since: u64| {
        let log = &log;
        async move {
            let mut got: Vec<(String, String, u64)> = log
                .log
                .counts(since, &log.routes)
                .await
                .expect("counts")
                .into_iter()
                .map(|((route, outcome), n)| (route, outcome, n))
                .collect();
            got.sort();
            got
        }
    };
    let row = |route: &str, outcome: &str, n: u64| (route.to_owned(), outcome.to_owned(), n);
    assert_eq!(
        counts(minute).await,
        [
            row("github", "forwarded", 2),
            row("stripe", "bad_signature", 1),
            row("stripe", "forwarded", 4),
        ],
        "{on:?}"
    );
    assert_eq!(
        counts(minute - 10).await,
        [
            row("github", "forwarded", 2),
            row("stripe", "bad_signature", 1),
            row("stripe", "forwarded", 9),
        ],
        "{on:?}"
    );
    assert_eq!(
        counts(0).await,
        counts(minute - 10).await,
        "{on:?}: a minute past the hour is dropped"
    );
}

/// One route's requests are counted per bucket and outcome for the charts: per
/// minute for the last hour, per ten minutes for the last day; writes add up, other
/// routes stay apart, a bucket past the width's reach is dropped.
async fn buckets_count_one_route_per_minute_and_per_ten_minutes(on: On) {
    let log = on.open(ROOMY);
    let minute = minute_of(now_ms());
    let ten = Width::TenMinutes.bucket_of(minute);
    let counted = |entries: &[(&str, &str, u64, u64)]| -> Counts {
        entries
            .iter()
            .map(|(route, outcome, m, n)| (((*route).to_owned(), (*outcome).to_owned(), *m), *n))
            .collect()
    };
    // Minutes chosen in three ten-minute buckets: this one, the one before, and one
    // 23 hours ago; and one a day and a half ago (dropped).
    let this_ten = ten * 10;
    assert!(minute - this_ten < 10);
    let day_ago = (ten - 138) * 10 + 4;
    log.write(
        &[],
        counted(&[
            ("stripe", "forwarded", minute, 3),
            ("stripe", "bad_signature", minute, 1),
            ("github", "forwarded", minute, 2),
            ("stripe", "forwarded", this_ten.saturating_sub(1), 5),
            ("stripe", "upstream_error", day_ago, 4),
            ("stripe", "forwarded", (ten - 216) * 10, 9),
        ]),
    )
    .await;
    log.write(&[], counted(&[("stripe", "forwarded", minute, 2)]))
        .await;
    let got = |width: Width, since: u64| {
        let log = &log;
        async move {
            let mut v: Vec<(u64, String, u64)> = log
                .log
                .buckets("stripe", width, since, &log.routes)
                .await
                .expect("buckets")
                .into_iter()
                .map(|((b, o), n)| (b, o, n))
                .collect();
            v.sort();
            v
        }
    };
    let row = |b: u64, o: &str, n: u64| (b, o.to_owned(), n);
    // Per minute, the last hour: this minute's and the one before this bucket.
    assert_eq!(
        got(Width::Minute, minute - 59).await,
        [
            row(this_ten - 1, "forwarded", 5),
            row(minute, "bad_signature", 1),
            row(minute, "forwarded", 5),
        ],
        "{on:?}"
    );
    assert_eq!(
        got(Width::Minute, minute).await,
        [row(minute, "bad_signature", 1), row(minute, "forwarded", 5)],
        "{on:?}"
    );
    // Per ten minutes, the last day: the older minute is in the bucket before.
    let day = got(Width::TenMinutes, ten + 1 - COUNT_TENS).await;
    assert_eq!(
        day,
        [
            row(ten - 138, "upstream_error", 4),
            row(ten - 1, "forwarded", 5),
            row(ten, "bad_signature", 1),
            row(ten, "forwarded", 5),
        ],
        "{on:?}"
    );
    assert_eq!(
        got(Width::TenMinutes, 0).await,
        day,
        "{on:?}: a bucket older than a day is dropped"
    );
    // Another route's are its own.
    let github: Vec<((u64, String), u64)> = log
        .log
        .buckets("github", Width::TenMinutes, 0, &log.routes)
        .await
        .expect("buckets")
        .into_iter()
        .collect();
    assert_eq!(github, [((ten, "forwarded".to_owned()), 2)], "{on:?}");
}

// ---- One test per (property, backend) ----

/// Each property a test per backend, `<property>_on_<backend>`.
macro_rules! on_each_backend {
    ($($property:ident: $memory:ident, $disk:ident, $redis:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $memory() {
            $property(On::Memory).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $disk() {
            $property(On::Disk).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redis() {
            $property(On::Redis).await;
        }
    )*};
}

on_each_backend! {
    a_record_reads_back_as_it_was_written:
        a_record_reads_back_as_it_was_written_on_memory,
        a_record_reads_back_as_it_was_written_on_disk,
        a_record_reads_back_as_it_was_written_on_redis;
    records_are_listed_newest_first_in_id_order:
        records_are_listed_newest_first_in_id_order_on_memory,
        records_are_listed_newest_first_in_id_order_on_disk,
        records_are_listed_newest_first_in_id_order_on_redis;
    pages_follow_the_cursor_to_the_end:
        pages_follow_the_cursor_to_the_end_on_memory,
        pages_follow_the_cursor_to_the_end_on_disk,
        pages_follow_the_cursor_to_the_end_on_redis;
    since_and_before_bound_a_page_by_time:
        since_and_before_bound_a_page_by_time_on_memory,
        since_and_before_bound_a_page_by_time_on_disk,
        since_and_before_bound_a_page_by_time_on_redis;
    filters_select_by_route_outcome_type_and_event_id:
        filters_select_by_route_outcome_type_and_event_id_on_memory,
        filters_select_by_route_outcome_type_and_event_id_on_disk,
        filters_select_by_route_outcome_type_and_event_id_on_redis;
    the_oldest_records_go_past_max_size:
        the_oldest_records_go_past_max_size_on_memory,
        the_oldest_records_go_past_max_size_on_disk,
        the_oldest_records_go_past_max_size_on_redis;
    records_older_than_keep_go:
        records_older_than_keep_go_on_memory,
        records_older_than_keep_go_on_disk,
        records_older_than_keep_go_on_redis;
    counts_add_up_per_route_and_outcome_by_minute:
        counts_add_up_per_route_and_outcome_by_minute_on_memory,
        counts_add_up_per_route_and_outcome_by_minute_on_disk,
        counts_add_up_per_route_and_outcome_by_minute_on_redis;
    buckets_count_one_route_per_minute_and_per_ten_minutes:
        buckets_count_one_route_per_minute_and_per_ten_minutes_on_memory,
        buckets_count_one_route_per_minute_and_per_ten_minutes_on_disk,
        buckets_count_one_route_per_minute_and_per_ten_minutes_on_redis;
}
