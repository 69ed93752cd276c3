//! The admin API under the third review's findings: replays go where the config sends
//! an event and carry the accepted delivery's headers, malformed admin paths are
//! answered (never a panic), and no route name and event ID reaches another route's
//! keys in Redis. Real signed requests to a real gateway, recording upstreams, the
//! admin listener over HTTP, and a real `redis-server`.

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

/// Every key in a Redis server (a test's own: a few hundred at most).
fn all_keys(redis: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = redis.cmd(redis::cmd("KEYS").arg("*"));
    keys.sort();
    keys
}

fn key_type(redis: &RedisServer, key: &str) -> String {
    redis.cmd(redis::cmd("TYPE").arg(key))
}

/// A Stripe-signed route of this name on `path`, sync or queue.
fn route(name: &str, up: &Upstream, extra: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\npath = \"/webhooks/{name}\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n{extra}\n",
        up.url(&format!("/{name}"))
    )
}

/// Event IDs a sync route named `log` receives (`{github}:ids` …, the old log keys of
/// routes `github` and `orders`; `{orders}:…`, the old queue keys of `orders`): no
/// route's log, queue or dedup keys change. Every key in Redis is a dedup or
/// transmission key (`hookgate:<route>:…`, `hookgate:<route>#tx:…`) or in an
/// internal space (`hookgate:#…`), never both.
#[tokio::test]
async fn no_route_name_and_event_id_reach_another_routes_keys() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\n{}{}{}",
        redis.url(),
        route("github", &up, ""),
        route("orders", &up, "delivery = \"queue\""),
        route("log", &up, ""),
    );
    let gw = TestGateway::start(&config).await;
    let deliver = |route: &'static str, id: &str| {
        let (gw, id) = (&gw, id.to_owned());
        async move { gw.deliver(route, &stripe_body(&id), &id).await }
    };
    // Route `github`'s old log key names, sent before it has a record.
    let mut attack: Vec<String> = ["ids", "rec", "bytes", "counts"]
        .iter()
        .map(|k| format!("{{github}}:{k}"))
        .collect();
    for id in &attack {
        let r = deliver("log", id).await;
        assert_eq!(r.outcome(), "forwarded", "{id}: {}", r.body);
    }
    assert_eq!(deliver("github", "evt_g1").await.outcome(), "forwarded");
    assert_eq!(deliver("orders", "evt_o1").await.outcome(), "queued");
    assert!(eventually(Duration::from_secs(5), || up.effects_for("evt_o1") == 1).await);
    listed(&gw, "?route=github", 1).await;
    listed(&gw, "?route=orders", 1).await;
    // Route `orders`' old log and queue key names, sent once it has them.
    let later: Vec<String> = [
        "ids",
        "rec",
        "bytes",
        "counts",
        "all",
        "stream",
        "delayed",
        "dead",
        "delivered",
        "ev:evt_o1",
    ]
    .iter()
    .map(|k| format!("{{orders}}:{k}"))
    .collect();
    for id in &later {
        let r = deliver("log", id).await;
        assert_eq!(r.outcome(), "forwarded", "{id}: {}", r.body);
    }
    attack.extend(later);
    assert_eq!(deliver("github", "evt_g2").await.outcome(), "forwarded");
    assert_eq!(deliver("orders", "evt_o2").await.outcome(), "queued");
    assert!(eventually(Duration::from_secs(5), || up.effects_for("evt_o2") == 1).await);

    // Both routes' logs still answer, with the records written after the attack.
    let github = listed(&gw, "?route=github", 2).await;
    assert_eq!(github[0]["event_id"], "evt_g2");
    assert_eq!(github[1]["event_id"], "evt_g1");
    let orders = listed(&gw, "?route=orders", 2).await;
    assert_eq!(orders[0]["event_id"], "evt_o2");
    listed(
        &gw,
        &format!("?route=log&limit={}", attack.len()),
        attack.len(),
    )
    .await;
    // Their dedup records and queues still answer for copies.
    assert_eq!(deliver("github", "evt_g1").await.outcome(), "duplicate");
    assert_eq!(deliver("orders", "evt_o1").await.outcome(), "duplicate");
    let (status, shown) = admin(&gw, "GET", "/events/orders/evt_o1").await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["state"], "delivered", "{shown}");
    assert_eq!(up.effects_for("evt_o1"), 1);

    let keys = all_keys(&redis);
    for key in &keys {
        let rest = key
            .strip_prefix("hookgate:")
            .unwrap_or_else(|| panic!("{key}"));
        let internal = rest.starts_with('#');
        let routed = ["github", "orders", "log"].iter().any(|r| {
            rest.strip_prefix(r)
                .is_some_and(|t| t.starts_with(':') || t.starts_with("#tx:"))
        });
        assert!(
            internal != routed,
            "{key}: internal {internal}, a route's {routed}"
        );
    }
    // The attacker's event IDs are route `log`'s own dedup keys, by their documented
    // names, and nothing else.
    for id in &attack {
        let key = format!("hookgate:log:{id}");
        assert_eq!(key_type(&redis, &key), "string", "{key}");
    }
    for (key, kind) in [
        ("hookgate:#log:{github}:ids", "zset"),
        ("hookgate:#log:{github}:rec", "hash"),
        ("hookgate:#log:{github}:bytes", "string"),
        ("hookgate:#log:{github}:counts", "hash"),
        ("hookgate:#q:{orders}:ev:evt_o1", "hash"),
        ("hookgate:#q:{orders}:stream", "stream"),
        ("hookgate:github:evt_g1", "string"),
    ] {
        assert_eq!(key_type(&redis, key), kind, "{key}");
    }
    gw.stop().await;
}

/// Renames every key of the current layout's internal spaces to the previous
/// version's (`hookgate:#q:` → `hookgate:q:`, `hookgate:#log:` → `hookgate:log:`),
/// rewriting the line names events hold (`okey`): the store as that version left it.
fn to_previous_layout(redis: &RedisServer) -> usize {
    let mut moved = 0;
    for key in all_keys(redis) {
        let Some(rest) = key.strip_prefix("hookgate:#") else {
            continue;
        };
        let old = format!("hookgate:{rest}");
        if key_type(redis, &key) == "hash" {
            let okey: Option<String> = redis.cmd(redis::cmd("HGET").arg(&key).arg("okey"));
            if let Some(line) = okey {
                let line = line.replacen("hookgate:#", "hookgate:", 1);
                let _: i64 = redis.cmd(redis::cmd("HSET").arg(&key).arg("okey").arg(line));
            }
        }
        let _: () = redis.cmd(redis::cmd("RENAME").arg(&key).arg(&old));
        moved += 1;
    }
    moved
}

/// A store the previous version wrote (queue and log in the old key layout: events
/// retrying, one waiting behind another in its key's line) is moved at start: every
/// queued event is delivered, in its line's order, the log still lists the old records,
/// and no key of the old layout is left.
#[tokio::test]
async fn an_upgrade_moves_the_previous_layouts_queues_and_log() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    up.set_status(503);
    let queue = "delivery = \"queue\"\norder_by = \"json:/data/object/customer\"\nretry = { max_attempts = 1000, initial = \"50ms\", max_delay = \"100ms\", max_age = \"1h\" }";
    let config = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\n{}",
        redis.url(),
        route("orders", &up, queue),
    );
    // The previous version also had a route `gone`, which the new config drops.
    let before = format!("{config}{}", route("gone", &up, queue));
    let body = |id: &str| {
        format!(
            r#"{{"id":"{id}","object":"event","type":"invoice.paid","data":{{"object":{{"customer":"cus_1"}}}}}}"#
        )
    };
    let gw = TestGateway::start(&before).await;
    for id in ["evt_a", "evt_b", "evt_c"] {
        assert_eq!(
            gw.deliver("orders", &body(id), id).await.outcome(),
            "queued"
        );
    }
    assert_eq!(
        gw.deliver("gone", &body("evt_g"), "evt_g").await.outcome(),
        "queued"
    );
    assert!(
        eventually(Duration::from_secs(5), || up.count_for("evt_a") >= 2).await,
        "evt_a retrying"
    );
    listed(&gw, "?route=orders", 3).await;
    gw.stop().await;
    assert_eq!(up.effects(), 0);
    let moved = to_previous_layout(&redis);
    assert!(moved >= 10, "{moved} keys in the old layout");
    let old: Vec<String> = all_keys(&redis);
    assert!(
        old.iter().any(|k| k == "hookgate:q:{orders}:stream"),
        "{old:?}"
    );
    assert!(
        old.iter().any(|k| k == "hookgate:log:{orders}:ids"),
        "{old:?}"
    );

    up.set_status(200);
    let gw = TestGateway::start(&config).await;
    assert!(
        eventually(Duration::from_secs(10), || ["evt_a", "evt_b", "evt_c"]
            .iter()
            .all(|id| up.effects_for(id) == 1))
        .await,
        "every queued event delivered after the upgrade: {} 2xx",
        up.effects()
    );
    let delivered: Vec<String> = up
        .received()
        .iter()
        .filter(|r| (200..300).contains(&r.status))
        .filter_map(|r| r.header("idempotency-key").map(str::to_owned))
        .collect();
    assert_eq!(delivered, ["evt_a", "evt_b", "evt_c"], "the key's order");
    let records = listed(&gw, "?route=orders", 3).await;
    assert_eq!(records.len(), 3, "the previous version's records");
    assert_eq!(
        gw.deliver("orders", &body("evt_a"), "evt_a")
            .await
            .outcome(),
        "duplicate"
    );
    // The dropped route's queue is moved too (in the background), and counted as
    // stranded.
    let sample = "hookgate_queue_stranded{queue=\"gone\"}";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while gw.metric(sample).await != 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "{sample} never 1");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let keys = all_keys(&redis);
    assert!(
        keys.iter()
            .all(|k| !k.starts_with("hookgate:q:") && !k.starts_with("hookgate:log:{orders}")),
        "{keys:?}"
    );
    assert!(
        keys.iter().any(|k| k == "hookgate:#q:{gone}:ev:evt_g"),
        "{keys:?}"
    );
    assert!(
        keys.iter().any(|k| k == "hookgate:#q:{orders}:stream"),
        "{keys:?}"
    );
    gw.stop().await;
}

/// On a cluster (no scan), a configured queue left in the previous layout is moved by
/// name: its event is taken from the new layout's stream afterwards, and no key of the
/// old layout is left in the route's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_of_the_previous_layout_is_moved_on_a_cluster() {
    use hookgate::store::{Enqueued, QueueRef, QueueStore as _};

    let cluster = crate::support::redis::RedisCluster::start();
    let store = hookgate::store::RedisStore::new_cluster(&cluster.urls(), Duration::from_secs(1))
        .expect("store");
    let q = QueueRef::new("hookgate:", "orders", "orders");
    let ev = crate::queue_conformance::event("evt_cl", b"{}", hookgate::queue::now_ms());
    assert_eq!(
        store
            .enqueue(&q, &ev, Duration::from_secs(60))
            .await
            .expect("enqueue"),
        Enqueued::Queued
    );
    // As the previous version left it: every key of the queue under `q:`.
    let node = cluster.primary_of("{orders}");
    let node_cmd = |cmd: &mut redis::Cmd| -> redis::Value {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{node}"))
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .expect("connect");
        cmd.query(&mut c).expect("command")
    };
    let mut renamed = 0;
    for suffix in [
        "ev:evt_cl",
        "stream",
        "all",
        "delayed",
        "dead",
        "delivered",
        "clock",
    ] {
        let new = format!("hookgate:#q:{{orders}}:{suffix}");
        if node_cmd(redis::cmd("EXISTS").arg(&new)) == redis::Value::Int(1) {
            node_cmd(
                redis::cmd("RENAME")
                    .arg(&new)
                    .arg(format!("hookgate:q:{{orders}}:{suffix}")),
            );
            renamed += 1;
        }
    }
    assert!(renamed >= 3, "{renamed} keys in the old layout");
    assert!(
        store
            .take_due(&q, 10, Duration::from_secs(30))
            .await
            .expect("take")
            .is_empty()
    );
    assert!(store.move_queue(&q).await.expect("move") >= 2);
    let taken = store
        .take_due(&q, 10, Duration::from_secs(30))
        .await
        .expect("take");
    assert_eq!(taken.len(), 1, "the moved event is due");
    assert_eq!(taken[0].event.envelope.event_id, "evt_cl");
    for suffix in ["ev:evt_cl", "stream", "all"] {
        let old = format!("hookgate:q:{{orders}}:{suffix}");
        assert_eq!(
            node_cmd(redis::cmd("EXISTS").arg(&old)),
            redis::Value::Int(0),
            "{old}"
        );
    }
}
