//! The admin API under the third review's findings: replays go where the config sends
//! an event and carry the accepted delivery's headers, and malformed admin paths are
//! answered (never a panic). Real signed requests to a real gateway, recording
//! upstreams, the admin listener over HTTP, and a real `redis-server`.

use std::time::Duration;

use crate::support::{RedisServer, TestGateway, Upstream, eventually, raw_http, send, stripe_body};

/// Calls the admin listener: the status and the JSON body (`Null` if it is not JSON).
async fn admin(gw: &TestGateway, method: &str, path: &str) -> (u16, serde_json::Value) {
    let headers = [("X-Requested-By".to_owned(), "hookgate-tests".to_owned())];
    let r = send(method, &gw.admin_url(path), &headers, Vec::new()).await;
    (r.status, serde_json::from_str(&r.body).unwrap_or_default())
}

fn sync_route(up: &Upstream) -> String {
    format!(
        "[store]\nbackend = \"memory\"\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
        up.url("/hooks")
    )
}

/// `POST /deliveries/replay` (no ID) and its neighbours, over a real connection: each
/// gets 404 with a JSON error, and the listener goes on answering.
#[tokio::test]
async fn admin_paths_without_a_delivery_id_are_answered_not_found() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&sync_route(&up)).await;
    for path in [
        "/deliveries/replay",
        "/deliveries//replay",
        "/deliveries/a/b/replay",
        "/deliveries/%2F/replay/",
    ] {
        let raw = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Requested-By: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let answer = raw_http(gw.admin, raw.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 404"),
            "POST {path}: {answer:?}"
        );
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(body.trim())
            .unwrap_or_else(|e| panic!("POST {path}: not JSON ({e}): {body:?}"));
        assert!(v["error"].is_string(), "POST {path}: {v}");
    }
    let (status, _) = admin(&gw, "GET", "/healthz").await;
    assert_eq!(status, 200);
    gw.stop().await;
}

/// The log's records for a query, once it has at least `n` (the log is written in
/// the background): polled, as `support::eventually` polls a synchronous state.
async fn listed(gw: &TestGateway, query: &str, n: usize) -> Vec<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (status, body) = admin(gw, "GET", &format!("/deliveries{query}")).await;
        assert_eq!(status, 200, "{body}");
        let records = body["deliveries"].as_array().cloned().unwrap_or_default();
        if records.len() >= n {
            return records;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{query}: {} of {n} records",
            records.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn id_of(record: &serde_json::Value) -> String {
    record["delivery_id"]
        .as_str()
        .expect("a delivery id")
        .to_owned()
}

/// A Stripe event of this type.
fn typed(id: &str, event_type: &str) -> String {
    format!(r#"{{"id":"{id}","object":"event","type":"{event_type}","data":{{"object":{{}}}}}}"#)
}

/// The stores a queue route runs on.
enum QueueStore {
    Disk(tempfile::TempDir),
    Redis(RedisServer),
}

impl QueueStore {
    fn toml(&self) -> String {
        match self {
            Self::Disk(d) => format!(
                "[store]\nbackend = \"disk\"\npath = \"{}\"\n",
                d.path().join("hookgate.db").display()
            ),
            Self::Redis(r) => format!("[store]\nbackend = \"redis\"\nurl = \"{}\"\n", r.url()),
        }
    }
}

/// A queue route with two filtered destinations: a replay goes to the destinations
/// whose `events` admit the recorded type (not to every one), to another only when
/// `?destination=` names it, and a replay of an event no destination takes answers 409
/// "nothing was queued" and stores nothing.
async fn replays_go_only_where_the_config_sends_the_event(store: QueueStore) {
    let billing = Upstream::start().await;
    let audit = Upstream::start().await;
    let config = format!(
        "{}\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\ndelivery = \"queue\"\n[[routes.destinations]]\nname = \"billing\"\nupstream = \"{}\"\nevents = [\"invoice.*\"]\n[[routes.destinations]]\nname = \"audit\"\nupstream = \"{}\"\nevents = [\"customer.*\"]\n",
        store.toml(),
        billing.url("/billing"),
        audit.url("/audit")
    );
    let gw = TestGateway::start(&config).await;
    let r = gw
        .deliver("stripe", &typed("evt_inv", "invoice.paid"), "evt_inv")
        .await;
    assert_eq!(r.outcome(), "queued", "{}", r.body);
    assert!(eventually(Duration::from_secs(5), || billing.count_for("evt_inv") == 1).await);
    let record = id_of(&listed(&gw, "?event_id=evt_inv&outcome=queued", 1).await[0]);

    // No destination named: only billing's filter admits invoice.paid.
    let (status, replayed) = admin(&gw, "POST", &format!("/deliveries/{record}/replay")).await;
    assert_eq!(status, 200, "{replayed}");
    let (status, shown) = admin(&gw, "GET", "/events/stripe/evt_inv?destination=audit").await;
    assert_eq!(status, 404, "audit's filter excludes invoice.paid: {shown}");
    assert!(eventually(Duration::from_secs(5), || billing.count_for("evt_inv") == 2).await);
    assert_eq!(
        replayed["destinations"],
        serde_json::json!(["billing"]),
        "{replayed}"
    );

    // Named explicitly, the operator's choice is followed.
    let (status, replayed) = admin(
        &gw,
        "POST",
        &format!("/deliveries/{record}/replay?destination=audit"),
    )
    .await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["destinations"], serde_json::json!(["audit"]));
    assert!(eventually(Duration::from_secs(5), || audit.count_for("evt_inv") == 1).await);

    // A type no destination takes: answered filtered, and its replay queues nothing.
    let r = gw
        .deliver("stripe", &typed("evt_chg", "charge.refunded"), "evt_chg")
        .await;
    assert_eq!(r.outcome(), "filtered", "{}", r.body);
    let filtered = id_of(&listed(&gw, "?event_id=evt_chg&outcome=filtered", 1).await[0]);
    let (status, refused) = admin(&gw, "POST", &format!("/deliveries/{filtered}/replay")).await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("nothing was queued")),
        "{refused}"
    );
    let (status, _) = admin(&gw, "GET", "/events/stripe/evt_chg").await;
    assert_eq!(status, 404, "nothing stored for the filtered event");
    assert_eq!(billing.count_for("evt_chg") + audit.count_for("evt_chg"), 0);
    gw.stop().await;
}

#[tokio::test]
async fn replays_go_only_where_the_config_sends_the_event_on_disk() {
    replays_go_only_where_the_config_sends_the_event(QueueStore::Disk(
        tempfile::tempdir().expect("dir"),
    ))
    .await;
}

#[tokio::test]
async fn replays_go_only_where_the_config_sends_the_event_on_redis() {
    replays_go_only_where_the_config_sends_the_event(QueueStore::Redis(RedisServer::start())).await;
}

/// A copy sent with an outsider's unsigned header is recorded as `duplicate`; replaying
/// that record sends the accepted delivery's record (its headers), never the copy's.
/// On a sync route with an `events` filter, a filtered event's replay answers 409 and
/// forwards nothing.
#[tokio::test]
async fn a_copys_record_replays_the_accepted_delivery() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&format!(
        "{}events = [\"payment_intent.*\"]\n",
        sync_route(&up)
    ))
    .await;
    let body = stripe_body("evt_copy");
    let headers = gw.sign("stripe", &body, "evt_copy");
    let r = send(
        "POST",
        &gw.url("/webhooks/stripe"),
        &headers,
        body.clone().into_bytes(),
    )
    .await;
    assert_eq!(r.outcome(), "forwarded", "{}", r.body);
    let mut outsider = headers.clone();
    outsider.push(("X-Outsider".to_owned(), "injected".to_owned()));
    let r = send(
        "POST",
        &gw.url("/webhooks/stripe"),
        &outsider,
        body.into_bytes(),
    )
    .await;
    assert_eq!(r.outcome(), "duplicate", "{}", r.body);
    let accepted = id_of(&listed(&gw, "?event_id=evt_copy&outcome=forwarded", 1).await[0]);
    let copy = id_of(&listed(&gw, "?event_id=evt_copy&outcome=duplicate", 1).await[0]);

    let (status, replayed) = admin(&gw, "POST", &format!("/deliveries/{copy}/replay")).await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["outcome"], "forwarded", "{replayed}");
    let received = up.received();
    assert_eq!(received.len(), 2);
    assert_eq!(
        received[1].header("x-outsider"),
        None,
        "the copy's header was replayed"
    );
    assert_eq!(replayed["replay_of"], accepted.as_str(), "{replayed}");
    assert_eq!(received[1].body, received[0].body);
    let replays = listed(&gw, "?event_id=evt_copy&outcome=forwarded", 2).await;
    assert_eq!(replays[0]["replay_of"], accepted.as_str());

    // A type the route's filter leaves out: answered filtered, not replayed.
    let other = typed("evt_filtered", "charge.refunded");
    assert_eq!(
        gw.deliver("stripe", &other, "evt_filtered").await.outcome(),
        "filtered"
    );
    let filtered = id_of(&listed(&gw, "?event_id=evt_filtered", 1).await[0]);
    let (status, refused) = admin(&gw, "POST", &format!("/deliveries/{filtered}/replay")).await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("nothing was forwarded")),
        "{refused}"
    );
    assert_eq!(up.count(), 2, "nothing forwarded");
    gw.stop().await;
}

/// A copy whose accepted delivery has left the log (pushed out by newer records) is
/// not replayed with its own headers: 409, naming why, and nothing is forwarded.
#[tokio::test]
async fn a_copy_whose_accepted_delivery_left_the_log_is_not_replayed() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&format!(
        "[log]\nmax_size = \"64KiB\"\nmax_body = \"16KiB\"\n{}",
        sync_route(&up)
    ))
    .await;
    let pad = "x".repeat(8 << 10);
    let body = |id: &str| {
        format!(
            r#"{{"id":"{id}","object":"event","type":"payment_intent.succeeded","pad":"{pad}"}}"#
        )
    };
    let first = body("evt_gone");
    assert_eq!(
        gw.deliver("stripe", &first, "evt_gone").await.outcome(),
        "forwarded"
    );
    listed(&gw, "?event_id=evt_gone", 1).await;
    for i in 0..16 {
        let id = format!("evt_fill_{i}");
        assert_eq!(
            gw.deliver("stripe", &body(&id), &id).await.outcome(),
            "forwarded"
        );
    }
    listed(&gw, "?event_id=evt_fill_15", 1).await;
    let (_, left) = admin(&gw, "GET", "/deliveries?event_id=evt_gone").await;
    assert_eq!(
        left["deliveries"].as_array().map(Vec::len),
        Some(0),
        "the accepted record is out of the log: {left}"
    );
    let mut outsider = gw.sign("stripe", &first, "evt_gone");
    outsider.push(("X-Outsider".to_owned(), "injected".to_owned()));
    let r = send(
        "POST",
        &gw.url("/webhooks/stripe"),
        &outsider,
        first.into_bytes(),
    )
    .await;
    assert_eq!(r.outcome(), "duplicate", "{}", r.body);
    let copy = id_of(&listed(&gw, "?event_id=evt_gone&outcome=duplicate", 1).await[0]);
    let (status, refused) = admin(&gw, "POST", &format!("/deliveries/{copy}/replay")).await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("no longer holds")),
        "{refused}"
    );
    assert_eq!(up.count(), 17, "nothing replayed");
    gw.stop().await;
}
