//! Redis's key layout under the third review's findings: no route name and event ID
//! reaches another route's keys, and a store the previous version wrote (queues and
//! log in the old layout) is moved at start, on one server and on a cluster. Real
//! signed requests to a real gateway, the admin listener over HTTP, and a real
//! `redis-server`.

use std::time::Duration;

use crate::support::{RedisServer, TestGateway, Upstream, eventually, send, stripe_body};

/// Calls the admin listener: the status and the JSON body (`Null` if it is not JSON).
async fn admin(gw: &TestGateway, method: &str, path: &str) -> (u16, serde_json::Value) {
    let headers = [("X-Requested-By".to_owned(), "hookgate-tests".to_owned())];
    let r = send(method, &gw.admin_url(path), &headers, Vec::new()).await;
    (r.status, serde_json::from_str(&r.body).unwrap_or_default())
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
        // What the previous version never wrote stays: a log's ten-minute counts, and
        // the log of requests for no route.
        if key.ends_with(":tens") || key.contains("{#unrouted}") {
            continue;
        }
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
    let ev = crate::stores::queue_conformance::event("evt_cl", b"{}", hookgate::queue::now_ms());
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
