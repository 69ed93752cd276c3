//! Redis over TLS (`rediss://` with a private CA), and claims that wait for a replica
//! (`min_replicas_ack`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::free_port;
use hookgate::store::redis::RedisOptions;
use hookgate::store::{Claim, DedupKey, DedupStore, RedisStore, Store};

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn redis(args: &[&str], dir: &std::path::Path, port: u16) -> Proc {
    let child = Command::new("redis-server")
        .args(args)
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Proc(child)
}

/// A Sentinel with config `conf` (written in `dir`), once it listens on `port`.
fn sentinel(conf: &str, dir: &std::path::Path, port: u16) -> Proc {
    let path = dir.join("sentinel.conf");
    std::fs::write(&path, conf).expect("conf");
    let child = Command::new("redis-server")
        .arg(&path)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sentinel");
    let proc = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "sentinel did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    proc
}

/// A replica of the server on `primary`, listening on `port`.
fn replica(primary: u16, dir: &std::path::Path, port: u16) -> Proc {
    let (port_arg, primary_arg) = (port.to_string(), primary.to_string());
    redis(
        &[
            "--port",
            &port_arg,
            "--replicaof",
            "127.0.0.1",
            &primary_arg,
        ],
        dir,
        port,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_contract_holds_over_tls() {
    let dir = tempfile::tempdir().expect("dir");
    let (cert, key) = (dir.path().join("r.crt"), dir.path().join("r.key"));
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
        ])
        .args([
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
        ])
        .args([
            "-addext",
            "keyUsage=digitalSignature",
            "-addext",
            "extendedKeyUsage=serverAuth",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(ok.success());
    let port = free_port();
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let _server = redis(
        &[
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &c,
            "--tls-key-file",
            &k,
            "--tls-auth-clients",
            "no",
        ],
        dir.path(),
        port,
    );
    let opts = RedisOptions {
        tls_ca: Some(std::fs::read(&cert).expect("ca")),
        ..RedisOptions::default()
    };
    let store = RedisStore::with_options(
        &format!("rediss://localhost:{port}"),
        Duration::from_secs(2),
        &opts,
    )
    .expect("store");
    crate::stores::dedup_conformance::conformance(Store::Redis(store)).await;
    // Without the CA the server is not trusted: no claim goes through.
    let untrusted = Store::Redis(
        RedisStore::new(
            &format!("rediss://localhost:{port}"),
            Duration::from_secs(1),
        )
        .expect("store"),
    );
    assert!(
        untrusted
            .claim(&DedupKey::new("t:", "r", "x"), "fp", Duration::from_secs(5))
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_wait_for_a_replica_and_fail_closed_without_one() {
    let dir = tempfile::tempdir().expect("dir");
    let (primary_port, replica_port) = (free_port(), free_port());
    let primary_dir = dir.path().join("p");
    let replica_dir = dir.path().join("r");
    std::fs::create_dir_all(&primary_dir).expect("dir");
    std::fs::create_dir_all(&replica_dir).expect("dir");
    let _primary = redis(
        &["--port", &primary_port.to_string()],
        &primary_dir,
        primary_port,
    );
    let replica = replica(primary_port, &replica_dir, replica_port);
    let opts = RedisOptions {
        min_replicas_ack: Some(1),
        replica_ack_timeout: Duration::from_millis(300),
        ..RedisOptions::default()
    };
    let url = format!("redis://127.0.0.1:{primary_port}");
    let store =
        Store::Redis(RedisStore::with_options(&url, Duration::from_secs(2), &opts).expect("store"));
    // Wait for the replica to sync, then a claim is acknowledged by it.
    let mut claimed = false;
    for i in 0..50 {
        let k = DedupKey::new("t:", "r", &format!("sync{i}"));
        if matches!(
            store.claim(&k, "fp", Duration::from_secs(30)).await,
            Ok(Claim::Claimed(_))
        ) {
            claimed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(claimed, "claims pass once the replica acknowledges them");
    let key = DedupKey::new("t:", "r", "acked");
    let replica_value: Option<String> = {
        let Ok(Claim::Claimed(_)) = store.claim(&key, "fp", Duration::from_secs(30)).await else {
            panic!("claim")
        };
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{replica_port}"))
            .expect("client")
            .get_connection()
            .expect("conn");
        redis::cmd("GET")
            .arg(key.as_str())
            .query(&mut c)
            .expect("get")
    };
    assert!(
        replica_value.is_some_and(|v| v.starts_with("i|")),
        "the replica holds the claim when it returns"
    );

    // Without the replica, a claim is refused (the gateway answers 503, the provider
    // retries) and the key is freed again.
    drop(replica);
    let lost = DedupKey::new("t:", "r", "unacked");
    assert!(
        store
            .claim(&lost, "fp", Duration::from_secs(30))
            .await
            .is_err()
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut c = redis::Client::open(url)
        .expect("client")
        .get_connection()
        .expect("conn");
    let left: Option<String> = redis::cmd("GET")
        .arg(lost.as_str())
        .query(&mut c)
        .expect("get");
    assert_eq!(left, None, "the unacknowledged claim was released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_followed_without_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let (primary_port, replica_port) = (free_port(), free_port());
    for d in ["p", "r", "s0", "s1", "s2"] {
        std::fs::create_dir_all(dir.path().join(d)).expect("dir");
    }
    let mut primary = Some(redis(
        &["--port", &primary_port.to_string()],
        &dir.path().join("p"),
        primary_port,
    ));
    let _replica = replica(primary_port, &dir.path().join("r"), replica_port);
    let mut sentinels = Vec::new();
    let mut urls = Vec::new();
    for i in 0..3 {
        let port = free_port();
        sentinels.push(sentinel(
            &format!("port {port}\nbind 127.0.0.1\nsentinel monitor hg 127.0.0.1 {primary_port} 2\nsentinel down-after-milliseconds hg 1000\nsentinel failover-timeout hg 3000\n"),
            &dir.path().join(format!("s{i}")),
            port,
        ));
        urls.push(format!("redis://127.0.0.1:{port}"));
    }
    let store =
        Store::Redis(RedisStore::new_sentinel(&urls, "hg", Duration::from_secs(1)).expect("store"));
    crate::stores::dedup_conformance::conformance(store.clone()).await;
    // The queue works through Sentinel too.
    crate::stores::queue_conformance::queue_conforms(&store).await;
    let key = DedupKey::new("t:", "r", "evt_sentinel");
    let Ok(Claim::Claimed(token)) = store.claim(&key, "fp", Duration::from_secs(60)).await else {
        panic!("claim")
    };
    store
        .complete(&key, &token, "fp", Duration::from_secs(600))
        .await
        .expect("complete");
    // Wait until the replica has the done record, then lose the primary.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v: Option<String> = redis::Client::open(format!("redis://127.0.0.1:{replica_port}"))
            .and_then(|c| c.get_connection())
            .and_then(|mut c| redis::cmd("GET").arg(key.as_str()).query(&mut c))
            .unwrap_or(None);
        if v.is_some_and(|v| v.starts_with("d|")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica never got the record"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(primary.take());
    // Sentinel promotes the replica (down-after 1 s); the store follows it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut answer = None;
    while Instant::now() < deadline {
        if let Ok(c) = store.claim(&key, "fp", Duration::from_secs(60)).await {
            answer = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        answer,
        Some(Claim::Done {
            fingerprint: "fp".into()
        }),
        "the promoted replica serves and still knows the event"
    );
    let fresh = DedupKey::new("t:", "r", "evt_after_sentinel_failover");
    assert!(
        matches!(
            store.claim(&fresh, "fp", Duration::from_secs(60)).await,
            Ok(Claim::Claimed(_))
        ),
        "writes go to the new primary"
    );
}

/// Issue 34, 6: `min_replicas_ack` was refused through Sentinel. It runs on the
/// connection to the primary Sentinel names: with the replica frozen a claim fails
/// closed; once it runs again, claims pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_claims_wait_for_a_replica() {
    let dir = tempfile::tempdir().expect("dir");
    let (primary_port, replica_port, sentinel_port) = (free_port(), free_port(), free_port());
    for d in ["p", "r", "s"] {
        std::fs::create_dir_all(dir.path().join(d)).expect("dir");
    }
    let _primary = redis(
        &["--port", &primary_port.to_string()],
        &dir.path().join("p"),
        primary_port,
    );
    let replica = replica(primary_port, &dir.path().join("r"), replica_port);
    // A long down-after: the frozen replica must not start a failover of anything.
    let _sentinel = sentinel(
        &format!(
            "port {sentinel_port}\nbind 127.0.0.1\nsentinel monitor hg 127.0.0.1 {primary_port} 1\nsentinel down-after-milliseconds hg 60000\n"
        ),
        &dir.path().join("s"),
        sentinel_port,
    );
    let urls = vec![format!("redis://127.0.0.1:{sentinel_port}")];
    let store = Store::Redis(
        RedisStore::new_sentinel(&urls, "hg", Duration::from_secs(2))
            .expect("store")
            .wait_for_replicas(Some(1), Duration::from_millis(300)),
    );
    let claim = async |name: &str| {
        let k = DedupKey::new("t:", "r", name);
        store.claim(&k, "fp", Duration::from_secs(30)).await
    };
    let mut claimed = false;
    for i in 0..100 {
        if matches!(claim(&format!("sync{i}")).await, Ok(Claim::Claimed(_))) {
            claimed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(claimed, "claims pass once the replica acknowledges them");
    let pid = replica.0.id().to_string();
    let signal = |sig: &str| {
        let _ = Command::new("kill").args([sig, &pid]).status();
    };
    signal("-STOP");
    let frozen = claim("while_frozen").await;
    signal("-CONT");
    assert!(frozen.is_err(), "no replica acknowledged: {frozen:?}");
    let mut passed = false;
    for i in 0..100 {
        if matches!(claim(&format!("after{i}")).await, Ok(Claim::Claimed(_))) {
            passed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(passed, "claims pass again once the replica runs");
}
