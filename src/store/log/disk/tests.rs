//! Tests of the disk log.

use super::*;

fn record(id: &str, body: &str) -> Stored {
    Stored::from_record(&json_record(id, body))
}

fn json_record(id: &str, body: &str) -> DeliveryRecord {
    let ms = u64::from_str_radix(&id[..12], 16).expect("an ID");
    serde_json::from_value(serde_json::json!({
            "delivery_id": id, "received_at": ms, "route": "r", "provider": "stripe",
            "peer": "127.0.0.1:1", "method": "POST", "path": "/r", "headers": [],
            "body": body, "body_base64": false, "body_bytes": body.len(),
            "body_truncated": false, "event_id": id, "provider_delivery_id": null,
            "event_type": null, "outcome": "forwarded", "status": 200, "answer": null,
            "duration_us": 1, "secret": null, "reason": null, "replay_of": null,
            "queue": null,
    }))
    .expect("a record")
}

fn id(ms: u64, n: u32) -> String {
    format!("{ms:012x}-{n:08x}")
}

fn open(dir: &tempfile::TempDir, max_size: u64) -> (DiskStore, DiskLog) {
    // A store dropped just before still holds the file until its writer thread
    // has seen it go: wait for that (bounded).
    let path = dir.path().join("h.db");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let store = loop {
        match DiskStore::open(&path) {
            Ok(store) => break store,
            Err(e) if std::time::Instant::now() < deadline => {
                assert!(format!("{e:#}").contains("already open"), "{e:#}");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("store: {e:#}"),
        }
    };
    let bounds = Bounds {
        keep: Duration::from_secs(3600),
        max_size,
    };
    let log = DiskLog::open(&store, bounds).expect("log");
    (store, log)
}

async fn write(log: &DiskLog, ids: &[&str]) {
    let batch = Batch {
        records: ids.iter().map(|i| record(i, "{}")).collect(),
        ..Batch::default()
    };
    log.append(batch, &[]).await.expect("append");
}

fn listed(page: &LogPage) -> Vec<&str> {
    page.records
        .iter()
        .map(|r| r.delivery_id.as_str())
        .collect()
}

#[tokio::test]
async fn a_record_written_after_newer_ones_is_listed_and_found_in_id_order() {
    let dir = tempfile::tempdir().expect("dir");
    let (_store, log) = open(&dir, 1 << 30);
    let now = crate::queue::now_ms();
    let (a, b, b2, c, d) = (
        id(now, 1),
        id(now + 1, 2),
        id(now + 1, 6),
        id(now + 2, 3),
        id(now + 3, 4),
    );
    // `a` took longer than `b` and `c`: it is in the second frame; `b2` was
    // received in the same millisecond as `b`, and is in the second frame too.
    write(&log, &[&b, &c]).await;
    write(&log, &[&d, &b2, &a]).await;
    let all = LogQuery {
        limit: 10,
        ..LogQuery::default()
    };
    let page = log.list(&all, &[]).await.expect("list");
    assert_eq!(listed(&page), [&d, &c, &b2, &b, &a]);
    // Pages of two: each cursor falls between frames and inside a millisecond.
    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let q = LogQuery {
            limit: 2,
            cursor: cursor.clone(),
            ..all.clone()
        };
        let page = log.list(&q, &[]).await.expect("list");
        pages.push(
            listed(&page)
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<_>>(),
        );
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(
        pages,
        [
            vec![d.clone(), c.clone()],
            vec![b2.clone(), b.clone()],
            vec![a.clone()]
        ]
    );
    // `since` and `before` bound by time.
    let window = LogQuery {
        since: Some(now + 1),
        before: Some(now + 2),
        ..all.clone()
    };
    let page = log.list(&window, &[]).await.expect("list");
    assert_eq!(listed(&page), [&b2, &b]);
    for want in [&a, &b, &b2, &c, &d] {
        let got = log.get(want, &[]).await.expect("get").expect("found");
        assert_eq!(&got.delivery_id, want);
        assert_eq!(got.body.as_deref(), Some("{}"));
    }
    assert_eq!(log.get(&id(now, 9), &[]).await.expect("get"), None);
    assert_eq!(log.get("not an id", &[]).await.expect("get"), None);
}

#[tokio::test]
async fn the_oldest_frame_goes_with_its_ids_and_later_frames_keep_theirs() {
    let dir = tempfile::tempdir().expect("dir");
    // Room for about two frames of two records.
    let one = frame(&[record(&id(1, 1), "{}"), record(&id(1, 2), "{}")]).cost;
    let (_store, log) = open(&dir, one * 2 + one / 2);
    let now = crate::queue::now_ms();
    let (a, b, c, d, e, f) = (
        id(now, 1),
        id(now + 1, 2),
        id(now + 2, 3),
        id(now + 3, 4),
        id(now + 4, 5),
        id(now + 5, 6),
    );
    write(&log, &[&a, &c]).await;
    // `b` is older than `c` but in the second frame.
    write(&log, &[&b, &d]).await;
    write(&log, &[&e, &f]).await;
    let all = LogQuery {
        limit: 10,
        ..LogQuery::default()
    };
    let page = log.list(&all, &[]).await.expect("list");
    assert_eq!(listed(&page), [&f, &e, &d, &b]);
    assert_eq!(log.get(&a, &[]).await.expect("get"), None);
    assert!(log.get(&b, &[]).await.expect("get").is_some());
    let size = log.size(&[]).await.expect("size");
    assert!(size <= one * 2 + one / 2, "{size}");
}

/// What the module's doc says of a 1 KiB Stripe event's record: its size as
/// stored, and its share of a frame of such records.
#[test]
fn a_frame_of_stripe_records_takes_a_fraction_of_them() {
    let now = 1_764_590_000_000_u64;
    let records: Vec<Stored> = (0..256_u32)
        .map(|n| {
            let mut r = json_record(&id(now + u64::from(n), n), "");
            let body = format!(
                r#"{{"id":"evt_{n:024}","object":"event","api_version":"2024-06-20","created":{},"type":"invoice.paid","livemode":false,"pending_webhooks":1,"request":{{"id":"req_{n:014}","idempotency_key":null}},"data":{{"object":{{"id":"in_{n:024}","object":"invoice","amount_due":{},"amount_paid":{},"currency":"usd","customer":"cus_{n:014}","status":"paid","lines":{{"object":"list","data":[{{"id":"il_{n:024}","object":"line_item","amount":{},"currency":"usd","description":"1 × Pro plan (at $20.00 / month)","period":{{"start":{},"end":{}}}}}]}},"metadata":{{"order_id":"ord_{n:020}","customer_email":"customer{n}@example.com","plan":"pro-monthly","seats":"12","region":"eu-west","notes":"renewal for the period, charged to the card on file ending in 4242; receipt sent to the billing contact"}},"hosted_invoice_url":"https://invoice.example.com/i/acct_1/in_{n:024}","billing_reason":"subscription_cycle","collection_method":"charge_automatically"}}}}}}"#,
                now / 1000 + u64::from(n),
                2000 + n,
                2000 + n,
                2000 + n,
                now / 1000,
                now / 1000 + 2_592_000,
            );
            r.body_bytes = body.len() as u64;
            r.body = Some(body);
            r.headers = vec![
                ("host".into(), "hooks.example.com".into()),
                ("user-agent".into(), "Stripe/1.0 (+https://stripe.com/docs/webhooks)".into()),
                ("content-type".into(), "application/json; charset=utf-8".into()),
                ("content-length".into(), r.body_bytes.to_string()),
                ("stripe-signature".into(), "[redacted]".into()),
                ("accept".into(), "*/*; q=0.5, application/xml".into()),
                ("cache-control".into(), "no-cache".into()),
            ];
            r.answer = Some(r#"{"status":"forwarded"}"#.into());
            Stored::from_record(&r)
        })
        .collect();
    let body = records[0]
        .view()
        .and_then(|v| v.body)
        .map_or(0, |b| b.0.len());
    let stored: usize = records.iter().map(Stored::len).sum::<usize>() / records.len();
    let json = serde_json::to_vec(&records[0].record(true).expect("a record"))
        .expect("json")
        .len();
    let in_frame = frame(&records).bytes.len() / records.len();
    eprintln!(
        "body {body} B, record {stored} B stored ({json} B as JSON), {in_frame} B in a frame"
    );
    assert!((900..1200).contains(&body), "{body}");
    assert!(stored < json, "{stored} {json}");
    assert!(in_frame * 4 < stored, "{in_frame} {stored}");
}
