//! The inbox's handler side on a real PostgreSQL: `hookgate-inbox` and
//! `examples/inbox_handler.rs` (docs/inbox.md). The schema applies (twice); concurrent
//! consumers keep per-key order and never share a key; a handler's error rolls back; and
//! the end-to-end promise: handler processes SIGKILLed at random moments and restarted,
//! every event's effect exactly once, per key in `id` order.
//!
//! Events enter the table through [`deliver`], the gateway's own insert and `NOTIFY`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hookgate_inbox::tokio_postgres::{Client, Transaction};
use hookgate_inbox::{BoxError, Event, Handler, Inbox, TableName, Wakeups};
use rand::{Rng as _, SeedableRng as _};

use crate::support::PostgresServer;

const TABLE: &str = hookgate_inbox::DEFAULT_TABLE;

/// How long any awaited state may take on a loaded two-core machine.
const LIMIT: Duration = Duration::from_secs(60);

/// One event as the gateway would hand it to the destination.
#[derive(Clone, Debug)]
struct Delivery {
    route: &'static str,
    event_id: String,
    order_key: Option<String>,
}

impl Delivery {
    fn new(route: &'static str, event_id: &str, order_key: Option<&str>) -> Self {
        Self {
            route,
            event_id: event_id.to_owned(),
            order_key: order_key.map(str::to_owned),
        }
    }
}

/// Delivers one event as the gateway's `postgres` destination does: the insert a repeat
/// leaves unchanged (`ON CONFLICT (route, event_id) DO NOTHING`) and the `NOTIFY`, in
/// one transaction. Returns the new row's `id`, `None` for a repeat.
async fn deliver(client: &mut Client, table: &TableName, d: &Delivery) -> Option<i64> {
    let body = format!(r#"{{"id":"{}","type":"test.event"}}"#, d.event_id).into_bytes();
    let headers = serde_json::json!({
        "content-type": "application/json",
        "idempotency-key": d.event_id,
        "hookgate-route": d.route,
    });
    let tx = client.transaction().await.expect("begin");
    let row = tx
        .query_opt(
            &table.insert_statement(),
            &[
                &d.route,
                &d.event_id,
                &Some("test.event"),
                &d.order_key,
                &"stripe",
                &SystemTime::now(),
                &headers,
                &body,
            ],
        )
        .await
        .expect("insert into the inbox");
    tx.execute(table.notify_statement(), &[&table.channel(), &d.route])
        .await
        .expect("notify");
    tx.commit().await.expect("commit");
    row.map(|r| r.get(0))
}

/// A server with the inbox table in it, and a client.
async fn server_with_inbox() -> (PostgresServer, Client) {
    let pg = PostgresServer::start();
    let client = pg.client().await;
    client
        .batch_execute(&hookgate_inbox::schema(TABLE).expect("schema"))
        .await
        .expect("apply the schema");
    (pg, client)
}

/// The effect table of `examples/inbox_handler.rs`, for the in-process handlers too.
/// `applied_before` counts the effects of the same key committed before this one.
const EFFECTS: &str = "CREATE TABLE IF NOT EXISTS inbox_effects (
    seq bigserial PRIMARY KEY, inbox_id bigint NOT NULL, route text NOT NULL,
    order_key text, event_id text NOT NULL, applied_before bigint NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())";

/// The example's effect, for the in-process handlers.
const EFFECT: &str =
    "INSERT INTO inbox_effects (inbox_id, route, order_key, event_id, applied_before)
    SELECT $1, $2, $3, $4, count(*) FROM inbox_effects WHERE route = $2 AND order_key = $3";

/// Waits until `query` (one bigint) returns `want`, or fails after [`LIMIT`].
async fn wait_for_count(client: &Client, query: &str, want: i64, what: &str) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let got: i64 = client
            .query_one(query, &[])
            .await
            .expect("count query")
            .get(0);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {got}, not {want}, after {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every inbox row has exactly one effect, of its own event, and per (route, order key)
/// the effects were written in `id` order, each after the one before it had committed
/// (`applied_before` 0, 1, 2, … in `id` order).
async fn assert_each_effect_once_in_key_order(client: &Client) {
    let doubles = client
        .query(
            "SELECT i.id, i.event_id, count(f.seq) FROM hookgate_inbox AS i
               LEFT JOIN inbox_effects AS f ON f.inbox_id = i.id
              GROUP BY i.id, i.event_id HAVING count(f.seq) <> 1 ORDER BY i.id",
            &[],
        )
        .await
        .expect("effects per event");
    let doubles: Vec<(i64, String, i64)> = doubles
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert!(
        doubles.is_empty(),
        "events whose effect is not there exactly once (id, event, effects): {doubles:?}"
    );
    let strays: i64 = client
        .query_one(
            "SELECT count(*) FROM inbox_effects AS f LEFT JOIN hookgate_inbox AS i
                 ON i.id = f.inbox_id AND i.event_id = f.event_id AND i.route = f.route
                AND i.order_key IS NOT DISTINCT FROM f.order_key
              WHERE i.id IS NULL",
            &[],
        )
        .await
        .expect("stray effects")
        .get(0);
    assert_eq!(strays, 0, "effects that match no inbox row");
    let lines = client
        .query(
            "SELECT route, order_key, array_agg(inbox_id ORDER BY seq),
                    array_agg(applied_before ORDER BY inbox_id)
               FROM inbox_effects WHERE order_key IS NOT NULL GROUP BY route, order_key",
            &[],
        )
        .await
        .expect("effects per key");
    for line in &lines {
        let (route, key): (String, String) = (line.get(0), line.get(1));
        let (ids, before): (Vec<i64>, Vec<i64>) = (line.get(2), line.get(3));
        assert!(
            ids.is_sorted(),
            "route {route}, key {key}: effects not in id order: {ids:?}"
        );
        let one_at_a_time: Vec<i64> = (0..).take(before.len()).collect();
        assert_eq!(
            before, one_at_a_time,
            "route {route}, key {key}: effects counted before each (in id order); \
             a repeat means two were applied at once"
        );
    }
}

#[tokio::test]
async fn schema_applies_and_applies_again_unchanged() {
    let (pg, client) = server_with_inbox().await;
    let columns = |table: &'static str| {
        let client = &client;
        async move {
            client
                .query(
                    "SELECT column_name::text, data_type::text, is_nullable::text
                       FROM information_schema.columns
                      WHERE table_schema || '.' || table_name = $1 ORDER BY ordinal_position",
                    &[&table],
                )
                .await
                .expect("columns")
                .iter()
                .map(|r| {
                    format!(
                        "{} {} {}",
                        r.get::<_, String>(0),
                        r.get::<_, String>(1),
                        r.get::<_, String>(2)
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let interface = [
        "id bigint NO",
        "route text NO",
        "event_id text NO",
        "event_type text YES",
        "order_key text YES",
        "provider text NO",
        "received_at timestamp with time zone NO",
        "headers jsonb NO",
        "body bytea NO",
        "processed_at timestamp with time zone YES",
    ];
    assert_eq!(columns("public.hookgate_inbox").await, interface);
    let indexes = "SELECT count(*) FROM pg_indexes WHERE schemaname || '.' || tablename = $1";
    let count: i64 = client
        .query_one(indexes, &[&"public.hookgate_inbox"])
        .await
        .expect("indexes")
        .get(0);
    assert_eq!(
        count, 4,
        "primary key, unique (route, event_id), two partial indexes"
    );

    // Again, with a row in it: nothing changes and nothing is lost.
    let mut writer = pg.client().await;
    let table = TableName::parse(TABLE).expect("name");
    let id = deliver(&mut writer, &table, &Delivery::new("stripe", "evt_1", None)).await;
    assert!(id.is_some());
    client
        .batch_execute(&hookgate_inbox::schema(TABLE).expect("schema"))
        .await
        .expect("apply the schema again");
    assert_eq!(columns("public.hookgate_inbox").await, interface);
    let rows: i64 = client
        .query_one("SELECT count(*) FROM hookgate_inbox", &[])
        .await
        .expect("rows")
        .get(0);
    assert_eq!(rows, 1);
    // A repeat is a conflict: no second row, no error.
    let again = deliver(&mut writer, &table, &Delivery::new("stripe", "evt_1", None)).await;
    assert_eq!(again, None);

    // A schema-qualified name, and a name that is a reserved word.
    client
        .batch_execute("CREATE SCHEMA ledger")
        .await
        .expect("create schema");
    for name in ["ledger.inbox", "order"] {
        let sql = hookgate_inbox::schema(name).expect("schema");
        client.batch_execute(&sql).await.expect(name);
        client.batch_execute(&sql).await.expect(name);
    }
    let mut ledger = columns("ledger.inbox").await;
    assert_eq!(ledger, interface);
    ledger = columns("public.order").await;
    assert_eq!(ledger, interface);
}

/// While one consumer holds a key's oldest event, no other consumer takes that key's
/// next one: the `NOT EXISTS` sees the held row, which `SKIP LOCKED` passes over.
#[tokio::test]
async fn a_held_event_holds_its_key_and_only_its_key() {
    let (pg, mut writer) = server_with_inbox().await;
    let table = TableName::parse(TABLE).expect("name");
    for (id, key) in [
        ("k1-1", Some("k1")),
        ("k1-2", Some("k1")),
        ("k2-1", Some("k2")),
        ("free", None),
    ] {
        deliver(&mut writer, &table, &Delivery::new("stripe", id, key)).await;
    }
    let inbox = Inbox::new(TABLE).expect("inbox");
    let mut a = pg.client().await;
    let mut b = pg.client().await;
    let taken = |claim: &Option<hookgate_inbox::Claim<'_>>| {
        claim.as_ref().map(|c| c.event().event_id.clone())
    };

    let held = inbox.next(&mut a).await.expect("a takes");
    assert_eq!(taken(&held).as_deref(), Some("k1-1"));
    // b passes over the held k1-1 and the k1-2 behind it.
    for want in ["k2-1", "free"] {
        let claim = inbox.next(&mut b).await.expect("b takes");
        assert_eq!(taken(&claim).as_deref(), Some(want));
        claim.expect("claim").done().await.expect("done");
    }
    let claim = inbox.next(&mut b).await.expect("b looks");
    assert_eq!(taken(&claim), None, "k1-2 was taken while k1-1 was held");
    drop(claim);

    // a gives k1-1 up: it is the next event again, before k1-2.
    held.expect("claim").rollback().await.expect("rollback");
    let claim = inbox.next(&mut b).await.expect("b takes");
    assert_eq!(taken(&claim).as_deref(), Some("k1-1"));
    claim.expect("claim").done().await.expect("done");
    let claim = inbox.next(&mut a).await.expect("a takes");
    assert_eq!(taken(&claim).as_deref(), Some("k1-2"));
    claim.expect("claim").done().await.expect("done");
    let claim = inbox.next(&mut a).await.expect("a looks");
    assert_eq!(taken(&claim), None);
}

/// Writes each event's effect between two short random pauses, which let the consumers
/// interleave.
#[derive(Debug)]
struct Effects {
    rng: rand::rngs::StdRng,
}

impl Handler for Effects {
    async fn handle(&mut self, tx: &mut Transaction<'_>, event: &Event) -> Result<(), BoxError> {
        let pause = self.rng.random_range(0..4);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        write_effect(tx, event).await?;
        let pause = self.rng.random_range(0..4);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        Ok(())
    }

    fn failed(&mut self, event: &Event, error: &BoxError) {
        panic!("event {} failed: {error}", event.event_id);
    }
}

async fn write_effect(tx: &Transaction<'_>, event: &Event) -> Result<(), BoxError> {
    tx.execute(
        EFFECT,
        &[&event.id, &event.route, &event.order_key, &event.event_id],
    )
    .await?;
    Ok(())
}

/// Spawns `inbox.run` on a connection of its own; with `listening`, woken by NOTIFY,
/// else polling.
async fn spawn_consumer<H: Handler + 'static>(
    pg: &PostgresServer,
    inbox: Inbox,
    handler: H,
    listening: bool,
) -> tokio::task::JoinHandle<()> {
    let (mut client, connection) =
        hookgate_inbox::tokio_postgres::connect(&pg.url(), hookgate_inbox::tokio_postgres::NoTls)
            .await
            .expect("connect");
    let wakeups = if listening {
        let (wakeups, connection) = hookgate_inbox::listen(connection, &inbox);
        tokio::spawn(connection);
        wakeups
    } else {
        tokio::spawn(connection);
        Wakeups::polling()
    };
    tokio::spawn(async move {
        let mut handler = handler;
        // Ends when the test aborts the task or drops the server.
        let _ = inbox.run(&mut client, &wakeups, &mut handler).await;
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_keep_per_key_order_and_apply_each_event_once() {
    let (pg, mut writer) = server_with_inbox().await;
    writer.batch_execute(EFFECTS).await.expect("effects");
    let table = TableName::parse(TABLE).expect("name");
    let inbox = Inbox::new(TABLE)
        .expect("inbox")
        .poll_interval(Duration::from_millis(100));
    // Two keys on each of two routes (one key name on both: the route is part of the
    // key), and unordered events; a key's events often next to each other.
    let mut rng = rand::rngs::StdRng::seed_from_u64(37);
    let total = 160;
    for n in 0..total {
        let (route, key) = match rng.random_range(0..5) {
            0 => ("stripe", Some("cus_0")),
            1 => ("stripe", Some("cus_1")),
            2 => ("github", Some("cus_0")),
            3 => ("github", Some("cus_1")),
            _ => ("github", None),
        };
        let d = Delivery::new(route, &format!("evt_{n}"), key);
        deliver(&mut writer, &table, &d).await;
    }
    // A backlog first, so the two consumers contend for every key.
    let consumers = [
        spawn_consumer(
            &pg,
            inbox.clone(),
            Effects {
                rng: rand::rngs::StdRng::seed_from_u64(1),
            },
            true,
        )
        .await,
        spawn_consumer(
            &pg,
            inbox.clone(),
            Effects {
                rng: rand::rngs::StdRng::seed_from_u64(2),
            },
            false,
        )
        .await,
    ];
    wait_for_count(
        &writer,
        "SELECT count(*) FROM hookgate_inbox WHERE processed_at IS NOT NULL",
        total,
        "events processed",
    )
    .await;
    for c in consumers {
        c.abort();
    }
    assert_each_effect_once_in_key_order(&writer).await;
}

/// Fails the first attempt at one event, after writing its effect.
#[derive(Debug)]
struct FailsOnce {
    event_id: &'static str,
    failures: Arc<Mutex<Vec<String>>>,
}

impl Handler for FailsOnce {
    async fn handle(&mut self, tx: &mut Transaction<'_>, event: &Event) -> Result<(), BoxError> {
        write_effect(tx, event).await?;
        let first = self
            .failures
            .lock()
            .expect("failures")
            .iter()
            .all(|f| f != self.event_id);
        if event.event_id == self.event_id && first {
            return Err("the handler's own error".into());
        }
        Ok(())
    }

    fn failed(&mut self, event: &Event, error: &BoxError) {
        assert_eq!(error.to_string(), "the handler's own error");
        self.failures
            .lock()
            .expect("failures")
            .push(event.event_id.clone());
    }
}

/// The effect written before the error is rolled back with it; the event is tried again
/// after the retry delay, its key's next event waits for it, other keys go on.
#[tokio::test]
async fn a_handler_error_rolls_back_and_the_event_is_applied_later() {
    let (pg, mut writer) = server_with_inbox().await;
    writer.batch_execute(EFFECTS).await.expect("effects");
    let table = TableName::parse(TABLE).expect("name");
    for (id, key) in [("k1-1", "k1"), ("k1-2", "k1"), ("k2-1", "k2")] {
        deliver(&mut writer, &table, &Delivery::new("stripe", id, Some(key))).await;
    }
    let failures = Arc::new(Mutex::new(Vec::new()));
    let inbox = Inbox::new(TABLE)
        .expect("inbox")
        .retry_delay(Duration::from_millis(300))
        .poll_interval(Duration::from_secs(30));
    let handler = FailsOnce {
        event_id: "k1-1",
        failures: Arc::clone(&failures),
    };
    let consumer = spawn_consumer(&pg, inbox, handler, true).await;
    wait_for_count(
        &writer,
        "SELECT count(*) FROM hookgate_inbox WHERE processed_at IS NOT NULL",
        3,
        "events processed",
    )
    .await;
    consumer.abort();
    assert_eq!(*failures.lock().expect("failures"), ["k1-1"]);
    assert_each_effect_once_in_key_order(&writer).await;
    let order: Vec<String> = writer
        .query("SELECT event_id FROM inbox_effects ORDER BY seq", &[])
        .await
        .expect("effects")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        order,
        ["k2-1", "k1-1", "k1-2"],
        "k2 goes on while k1-1 rests; k1-2 waits for it"
    );
}

/// `target/debug/examples/inbox_handler`, beside this test binary's folder.
fn inbox_handler_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary is in <target>/<profile>/deps");
    let bin = profile.join("examples").join("inbox_handler");
    assert!(
        bin.is_file(),
        "{} is not built: `cargo build --example inbox_handler` (tests/run builds it before the tests)",
        bin.display()
    );
    bin
}

/// The handler processes of the end-to-end test.
struct Handlers {
    bin: PathBuf,
    url: String,
    log: tempfile::TempDir,
    children: Vec<Child>,
    starts: usize,
}

impl Handlers {
    fn spawn(&mut self) -> Child {
        self.starts += 1;
        let log =
            std::fs::File::create(self.log.path().join(format!("handler-{}.log", self.starts)))
                .expect("handler log");
        Command::new(&self.bin)
            .args(["--database-url", &self.url])
            .args(["--table", TABLE])
            // Long enough that a kill often lands between the effect and the commit.
            .args(["--work-ms", "15"])
            .args(["--poll-interval", "200ms"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn inbox_handler")
    }

    /// SIGKILLs handler `i` and starts a new one in its place.
    fn kill_and_restart(&mut self, i: usize) {
        let child = &mut self.children[i];
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        self.children[i] = self.spawn();
    }
}

impl Drop for Handlers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The promise of docs/inbox.md: events delivered (some twice) while three handler
/// processes are SIGKILLed at random moments and restarted; in the end every event's
/// effect is in the effect table exactly once, per key in `id` order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_handlers_apply_every_event_exactly_once_in_key_order() {
    let bin = inbox_handler_binary();
    let (pg, client) = server_with_inbox().await;
    // Made here, so the count queries below work before a handler has started.
    client.batch_execute(EFFECTS).await.expect("effects");
    let seed: u64 = rand::rng().random();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut handlers = Handlers {
        bin,
        url: pg.url(),
        log: tempfile::tempdir().expect("log dir"),
        children: Vec::new(),
        starts: 0,
    };
    for _ in 0..3 {
        let child = handlers.spawn();
        handlers.children.push(child);
    }

    let total = 300;
    let deliveries = deliveries(total, seed);
    // The events come through a real gateway: two queue routes whose destination is
    // the inbox, one line per customer (`order_by`).
    let state = tempfile::tempdir().expect("state dir");
    let gw = crate::support::TestGateway::start(&gateway_config(&pg.url(), state.path())).await;
    let feeder = tokio::spawn(async move {
        let mut new_rows = 0;
        for (n, d) in deliveries.iter().enumerate() {
            let body = event_body(d);
            let r = gw.deliver(d.route, &body, &d.event_id).await;
            match r.outcome() {
                "queued" => new_rows += 1,
                "duplicate" => {}
                other => panic!("{} answered {other}: {}", d.event_id, r.body),
            }
            if n % 10 == 9 {
                // Paced, so the deliveries span the kills.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        (new_rows, gw)
    });

    let deadline = Instant::now() + LIMIT;
    let mut kills = 0;
    loop {
        let pause = rng.random_range(30..250);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let (left, rows): (i64, i64) = client
            .query_one(
                "SELECT count(*) FILTER (WHERE processed_at IS NULL), count(*) FROM hookgate_inbox",
                &[],
            )
            .await
            .map(|r| (r.get(0), r.get(1)))
            .expect("unprocessed");
        let all_in = usize::try_from(rows).is_ok_and(|r| r == total);
        if feeder.is_finished() && all_in && left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} events unprocessed after {LIMIT:?} ({kills} kills, seed {seed}); handler logs in {}",
            handlers.log.path().display()
        );
        // Once the feed is done, the last events are left to the handlers alone.
        if !feeder.is_finished() || kills < 20 {
            handlers.kill_and_restart(rng.random_range(0..3));
            kills += 1;
        }
    }
    let (new_rows, gw) = feeder.await.expect("feeder");
    assert_eq!(new_rows, total, "a repeated delivery was queued again");
    gw.stop().await;
    drop(handlers);

    let rows: i64 = client
        .query_one("SELECT count(*) FROM hookgate_inbox", &[])
        .await
        .expect("rows")
        .get(0);
    assert_eq!(rows, i64::try_from(total).expect("total"));
    assert_each_effect_once_in_key_order(&client).await;
    // A gap in `seq` is an effect written and then rolled back: a kill landed inside
    // an event's transaction, which is what this test is for.
    let (effects, last): (i64, i64) = client
        .query_one("SELECT count(*), max(seq) FROM inbox_effects", &[])
        .await
        .map(|r| (r.get(0), r.get(1)))
        .expect("effects");
    assert!(
        last > effects,
        "no kill of {kills} landed inside an event's transaction (seed {seed})"
    );
    eprintln!(
        "{total} events, {kills} kills, {} effects rolled back by a kill (seed {seed})",
        last - effects
    );
}

/// Two Stripe queue routes, `stripe` and `shop`, on a disk store in `dir`, whose
/// destination is the inbox at `url`, one line per customer.
fn gateway_config(url: &str, dir: &std::path::Path) -> String {
    let route = |name: &str| {
        format!(
            r#"[[routes]]
name = "{name}"
path = "/webhooks/{name}"
provider = "stripe"
secrets = ["whsec_test"]
delivery = "queue"
retry = {{ max_attempts = 100, initial = "50ms", max_delay = "500ms", max_age = "1h" }}
[[routes.destinations]]
name = "inbox"
postgres = {{ url = "{url}", table = "{TABLE}" }}
order_by = "json:/data/object/customer"
"#
        )
    };
    format!(
        "[store]\nbackend = \"disk\"\npath = \"{}\"\n{}{}",
        dir.join("hookgate.db").display(),
        route("stripe"),
        route("shop")
    )
}

/// A Stripe event body for `d`, its customer the order key.
fn event_body(d: &Delivery) -> String {
    let customer = d
        .order_key
        .as_deref()
        .map_or("null".to_owned(), |k| format!("\"{k}\""));
    format!(
        r#"{{"id":"{}","object":"event","type":"test.event","data":{{"object":{{"customer":{customer}}}}}}}"#,
        d.event_id
    )
}

/// `total` distinct events over six order keys and some without one, on two routes,
/// with about one in six delivered a second time a little later.
fn deliveries(total: usize, seed: u64) -> Vec<Delivery> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut out = Vec::new();
    let mut repeats: BTreeMap<usize, Vec<Delivery>> = BTreeMap::new();
    for n in 0..total {
        let key = rng.random_range(0..8);
        let order_key = (key < 6).then(|| format!("cus_{key}"));
        let route = if key % 2 == 0 { "stripe" } else { "shop" };
        let d = Delivery::new(route, &format!("evt_{n}"), order_key.as_deref());
        if rng.random_range(0..6) == 0 {
            repeats
                .entry(n + rng.random_range(1..20))
                .or_default()
                .push(d.clone());
        }
        out.push(d);
        out.extend(repeats.remove(&n).unwrap_or_default());
    }
    out.extend(repeats.into_values().flatten());
    out
}

/// docs/inbox.md shows the crate's own SQL: the schema as `hookgate inbox schema`
/// prints it, and the "next event" query and the mark in the plain-SQL pattern and in
/// each language's loop (the crate's query less the ids it passes over).
#[test]
fn docs_inbox_md_shows_the_crates_schema_and_queries() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/inbox.md"))
        .expect("docs/inbox.md");
    let schema = hookgate_inbox::schema(TABLE).expect("schema");
    assert!(
        page.contains(&format!("```sql\n{schema}```")),
        "docs/inbox.md's schema differs from hookgate_inbox::schema:\n{schema}"
    );

    // Whitespace and identifier quotes aside.
    let norm = |sql: &str| {
        sql.replace('"', "")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let table = TableName::parse(TABLE).expect("name");
    let next = norm(&table.next_statement()).replace(" AND e.id <> ALL ($1::bigint[])", "");
    let shown: Vec<String> = page
        .match_indices("SELECT e.id,")
        .map(|(at, _)| {
            let rest = &page[at..];
            let end = rest
                .find("SKIP LOCKED")
                .expect("the query ends with SKIP LOCKED");
            norm(&rest[..end + "SKIP LOCKED".len()])
        })
        .collect();
    assert_eq!(shown.len(), 4, "the plain SQL, Python, Node and Go");
    for query in &shown {
        assert_eq!(
            query, &next,
            "docs/inbox.md's next-event query differs from the crate's"
        );
    }
    let done = norm(&table.done_statement());
    let marks = page
        .matches("UPDATE hookgate_inbox SET processed_at = now() WHERE id = ")
        .count();
    assert_eq!(marks, 4, "the mark, in the plain SQL and each loop");
    assert!(page.contains(&format!("{done};")), "{done}");
}
