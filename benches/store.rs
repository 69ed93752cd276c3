//! The store benchmark: what a backlog and a dedup window cost the stores, through
//! their own API (no HTTP), on this machine.
//!
//! ```text
//! cargo bench --bench store -- backlog [--events 1000000] [--attempts 3] [--body 1024]
//!                                       [--acks 50000] [--repeat 1] [--dir D]
//!                                       [--keys 0|all|K]
//! cargo bench --bench store -- sweep [--rate 5000] [--ttl 2s] [--duration 30s]
//! cargo bench --bench store -- sizes [--records 1000000]
//! cargo bench --bench store -- engines [--duration 2s | --ops N] [--repeat 2]
//!                                       [--batches 1,4,16,64] [--body 1024] [--dir D]
//!                                       [--engines redb,fjall,journal,journal-lazy] [--json]
//! ```
//! - `backlog`: fills a disk store with `--events` queued events (`--body` bytes each),
//!   each tried `--attempts` times (a history of that many attempts), then measures, in
//!   a fresh process: the restart (opening the file, which rebuilds the queue's index),
//!   its peak and settled RSS, the acknowledgement (enqueue) rate on that store and on an
//!   empty one, and the drain rate (take, then record a delivery) on it and on a small
//!   backlog of the same events. `--keys` makes it an ordered route's (`order_by`):
//!   `all` gives each event a key of its own, `K` spreads the events over K keys, 0
//!   (the default) gives none.
//! - `sweep`: claims and completes `--rate` dedup records per second with a `--ttl`
//!   window for `--duration`: the file's size each second (flat once expiry keeps up),
//!   the expired count, and the slowest claim against a run where nothing expires.
//! - `sizes`: bytes per dedup record in the memory store (RSS) and the disk store (file),
//!   for `--records` records.
//! - `engines`: the disk store's own write pattern (its tables, keys and values; each
//!   group commit durable with one fsync) on three engines side by side: redb as the
//!   store uses it today, fjall 3 (an LSM with a journal), and a journal of our own in
//!   front of redb (checkpoints counted), its batches applied to redb one by one or 16
//!   at a time. Two workloads (`mixed`: 9 done records in 10, 1 queued event; `queued`:
//!   every operation a queued event), each at the batch sizes of `--batches`; each cell
//!   in fresh files for `--duration` (or `--ops`), the cells interleaved and run
//!   `--repeat` times. Prints operations and commits per second, CPU and bytes written
//!   per operation, the files' size, each engine's ratio to redb, and what fjall does
//!   with a torn last batch; `--json` adds one JSON object.
//!
//! Every mode stops by itself. Run by `cargo test` (which passes no `--bench`), it runs
//! tiny versions of them all, so it keeps building and working. Internal mode: `open
//! PATH EVENTS ACKS` (the restart, in a process of its own).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hookgate::queue::now_ms;
use hookgate::store::{
    Attempt, Claim, DedupKey, DedupStore as _, DiskStore, Envelope, Fanout, Finish, MemoryStore,
    QueueRef, QueueStore as _, Status, StoredEvent, Target, Token,
};

type AnyResult<T> = anyhow::Result<T>;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PREFIX: &str = "hookgate:";
const ROUTE: &str = "stripe";
const TTL: Duration = Duration::from_secs(24 * 3600);
const LEASE: Duration = Duration::from_secs(60);

fn queue() -> QueueRef<'static> {
    QueueRef::new(PREFIX, ROUTE, ROUTE)
}

/// `--name value` from the arguments, parsed, or `default`.
fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn duration_arg(args: &[String], name: &str, default: Duration) -> Duration {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| humantime::parse_duration(v).ok())
        .unwrap_or(default)
}

/// This process's resident and peak resident memory, in bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time this process has used (user + system), from `/proc`.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line (11 and 12 after the name);
    // the kernel counts them in 1/100 s.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn event(id: &str, body: &[u8]) -> StoredEvent {
    StoredEvent {
        envelope: Envelope {
            event_id: id.to_owned(),
            event_type: Some("invoice.paid".into()),
            fingerprint: "3f2a9c0d1e4b5a6f".into(),
            method: "POST".into(),
            headers: Vec::new(),
            query: None,
            peer: "127.0.0.1".into(),
            received_at_ms: now_ms(),
            trace: None,
        },
        body: bytes::Bytes::copy_from_slice(body),
    }
}

fn attempt(result: &str) -> Attempt {
    Attempt {
        at_ms: now_ms(),
        status: Some(503),
        result: result.parse().expect("an attempt result"),
        error: None,
        duration_ms: 12,
        kind: None,
        receipt: None,
    }
}

/// An event ID like a provider's (`evt_` and 24 characters).
fn id(tag: &str, i: u64) -> String {
    format!("evt_{tag}{i:0>20}")
}

/// The order keys of a backlog's events (`--keys`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Keys {
    /// No `order_by`.
    None,
    /// A key of its own for each event.
    Distinct,
    /// The events spread over this many keys, in turn.
    Few(u64),
}

impl Keys {
    fn parse(args: &[String]) -> Self {
        match args
            .iter()
            .position(|a| a == "--keys")
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
        {
            Some("all") => Self::Distinct,
            Some(k) => k
                .parse()
                .ok()
                .filter(|k| *k > 0)
                .map_or(Self::None, Self::Few),
            None => Self::None,
        }
    }

    /// The order key of the `i`th event, like a provider's customer ID.
    fn of(self, i: u64) -> Option<String> {
        match self {
            Self::None => None,
            Self::Distinct => Some(format!("cus_{i:0>20}")),
            Self::Few(k) => Some(format!("cus_{:0>20}", i % k)),
        }
    }

    fn name(self) -> String {
        match self {
            Self::None => "unordered".into(),
            Self::Distinct => "ordered, a key per event".into(),
            Self::Few(k) => format!("ordered, {k} keys"),
        }
    }

    fn file_tag(self) -> String {
        match self {
            Self::None => String::new(),
            Self::Distinct => "-keys-all".into(),
            Self::Few(k) => format!("-keys-{k}"),
        }
    }
}

/// Enqueues `n` events from `tasks` concurrent callers; events per second.
async fn enqueue(store: &DiskStore, tag: &str, n: u64, body: usize, tasks: u64) -> AnyResult<f64> {
    enqueue_keyed(store, tag, n, body, tasks, Keys::None).await
}

/// [`enqueue`], each event with its order key.
async fn enqueue_keyed(
    store: &DiskStore,
    tag: &str,
    n: u64,
    body: usize,
    tasks: u64,
    keys: Keys,
) -> AnyResult<f64> {
    let payload = vec![b'x'; body];
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut joins = Vec::new();
    for _ in 0..tasks {
        let (store, next, payload, tag) =
            (store.clone(), next.clone(), payload.clone(), tag.to_owned());
        joins.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                let ev = event(&id(&tag, i), &payload);
                let fanout = Fanout {
                    prefix: PREFIX,
                    route: ROUTE,
                    all: vec![ROUTE],
                    to: vec![(ROUTE, keys.of(i))],
                };
                let mut wait = Duration::from_millis(1);
                // A full write queue answers at once: wait and try again.
                while store.enqueue_to(&fanout, &ev, TTL).await.is_err() {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(100));
                }
            }
        }));
    }
    for j in joins {
        j.await??;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// Takes due events in batches and records each attempt with `end`, until `stop`
/// says so; events per second.
async fn take_and_finish(
    store: &DiskStore,
    batch: usize,
    mut end: impl FnMut(u32) -> Option<Finish>,
    mut stop: impl FnMut(u64) -> bool,
) -> AnyResult<(u64, f64)> {
    let started = Instant::now();
    let mut done = 0u64;
    while !stop(done) {
        let leased = store.take_due(&queue(), batch, LEASE).await?;
        if leased.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let mut finishes = Vec::with_capacity(leased.len());
        for mut l in leased {
            let Some(f) = end(l.status.attempts) else {
                continue;
            };
            // A dead event gives its key's line to the next one, as under
            // `on_dead = "skip"` (the worker does the same).
            if matches!(f, Finish::Dead(..)) {
                l.status.left_line = l.status.order_key.take();
            }
            let store = store.clone();
            finishes.push(tokio::spawn(async move {
                store.finish(&queue(), &l, &f, TTL).await
            }));
        }
        for f in finishes {
            if matches!(f.await?, Ok(true)) {
                done += 1;
            }
        }
    }
    Ok((done, done as f64 / started.elapsed().as_secs_f64()))
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Fills `path` with `n` undelivered events, each with `attempts` attempts recorded.
async fn build_backlog(
    path: &Path,
    n: u64,
    attempts: u32,
    body: usize,
    keys: Keys,
) -> AnyResult<()> {
    let store = DiskStore::open(path)?;
    let started = Instant::now();
    let rate = enqueue_keyed(&store, "b", n, body, 256, keys).await?;
    println!("  built: {n} events enqueued at {rate:.0}/s");
    // Each event is tried `attempts` times: failed attempts due again at once (a time
    // long past, so they come before the events not yet tried), the last one dead;
    // then every dead event is queued again (its history kept), as an operator's
    // `retry --all-dead` after an outage would (on an ordered route, back at the end
    // of its key's line).
    let (tried, rate) = take_and_finish(
        &store,
        512,
        |made| {
            Some(if made + 1 < attempts {
                Finish::Retry(attempt("http_5xx"), 1)
            } else {
                Finish::Dead(attempt("http_5xx"), "attempts".into())
            })
        },
        |_| all_dead(&store, n),
    )
    .await?;
    println!("  built: {tried} attempts recorded at {rate:.0}/s");
    let requeued = store.retry(&queue(), &Target::AllDead).await?;
    store.flush().await?;
    println!(
        "  built: {requeued} events queued again; file {} MiB, in {:.0} s",
        file_size(path) >> 20,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Whether every event is dead (the attempts phase of the build is over).
fn all_dead(store: &DiskStore, n: u64) -> bool {
    let depth = futures_util::FutureExt::now_or_never(store.depth(&queue()))
        .and_then(Result::ok)
        .unwrap_or_default();
    depth.dead >= n
}

/// The restart, in this (fresh) process: open, then serve a while.
async fn open_mode(path: &Path, events: u64, acks: u64) -> AnyResult<()> {
    let before = rss().0;
    // The parent's writer thread lets go of the file a moment after its store.
    let mut tries = 0;
    let (store, open_s) = loop {
        let started = Instant::now();
        match DiskStore::open(path) {
            Ok(store) => break (store, started.elapsed().as_secs_f64()),
            Err(e) if tries < 100 && e.to_string().contains("already open") => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    };
    let (settled, peak) = rss();
    let depth = store.depth(&queue()).await?;
    // Acknowledgements on this store, and the CPU each took (steadier than the rate
    // on a machine whose cores other processes also use).
    let cpu0 = cpu();
    let enqueue_rate = enqueue(&store, "n", acks, 1024, 64).await?;
    let enqueue_cpu_us = (cpu() - cpu0).as_secs_f64() * 1e6 / acks.max(1) as f64;
    // Drain: the oldest events, taken and delivered.
    let drain = events.min(acks);
    let cpu0 = cpu();
    let (drained, drain_rate) = take_and_finish(
        &store,
        64,
        |_| Some(Finish::Delivered(attempt("delivered"))),
        |done| done >= drain,
    )
    .await?;
    let drain_cpu_us = (cpu() - cpu0).as_secs_f64() * 1e6 / drained.max(1) as f64;
    println!(
        "{{\"enqueue_cpu_us\":{enqueue_cpu_us:.1},\"drain_cpu_us\":{drain_cpu_us:.1},\"open_s\":{open_s:.2},\"rss_before\":{before},\"rss_after_open\":{settled},\"rss_peak_open\":{peak},\"waiting\":{},\"enqueue_per_s\":{enqueue_rate:.0},\"drain_per_s\":{drain_rate:.0},\"rss_end\":{}}}",
        depth.waiting,
        rss().0
    );
    Ok(())
}

/// Runs `open PATH EVENTS ACKS` in a fresh process: a restart, then `ACKS` enqueues
/// and as many deliveries drained.
fn restart(path: &Path, events: u64, acks: u64) -> AnyResult<serde_json::Value> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .arg("open")
        .arg(path)
        .arg(events.to_string())
        .arg(acks.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rfind(|l| l.starts_with('{'))
        .ok_or_else(|| anyhow::anyhow!("the restart printed no figures: {text}"))?;
    Ok(serde_json::from_str(line)?)
}

fn mib(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(0.0) / f64::from(1 << 20)
}

async fn backlog(args: &[String], dir: &Path) -> AnyResult<()> {
    let n: u64 = arg(args, "--events", 1_000_000);
    let attempts: u32 = arg(args, "--attempts", 3);
    let body: usize = arg(args, "--body", 1024);
    let small_n = (n / 20).clamp(1, 50_000);
    let repeat: usize = arg(args, "--repeat", 1);
    let acks: u64 = arg(args, "--acks", 50_000);
    let keys = Keys::parse(args);
    println!(
        "backlog: {n} events of {body} B, {attempts} attempts each, {}",
        keys.name()
    );
    // `--dir D` keeps the files in D (and reuses them: a later run only measures).
    let dir = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map_or_else(|| dir.to_path_buf(), PathBuf::from);
    std::fs::create_dir_all(&dir)?;
    let (big, small, empty) = (
        dir.join(format!("big-{n}{}.db", keys.file_tag())),
        dir.join(format!("small-{small_n}{}.db", keys.file_tag())),
        dir.join("empty.db"),
    );
    // Each file is measured as built: the restarts add events to copies of it.
    for (path, events) in [(&big, n), (&small, small_n)] {
        if !path.exists() {
            let building = path.with_extension("building");
            build_backlog(&building, events, attempts, body, keys).await?;
            std::fs::rename(&building, path)?;
        }
    }
    if !empty.exists() {
        DiskStore::open(&empty)?.flush().await?;
    }
    let runs = [
        ("empty store", &empty, 0),
        ("small backlog", &small, small_n),
        ("large backlog", &big, n),
    ];
    // RSS after open of the run before (the empty store's, the small backlog's): what
    // an event costs is the difference over the difference in events, which leaves
    // out what any store holds once serving (the runtime, redb's page cache).
    let mut below = (0u64, 0.0);
    // Interleaved, so that what else runs on the machine weighs on each alike.
    for (name, path, events) in (0..repeat).flat_map(|_| runs.iter()) {
        let copy = dir.join("measured.db");
        std::fs::copy(path, &copy)?;
        let v = restart(&copy, *events, acks)?;
        std::fs::remove_file(&copy)?;
        let after_open = v["rss_after_open"].as_f64().unwrap_or(0.0);
        let per_event = if *events > below.0 {
            (after_open - below.1).max(0.0) / (*events - below.0) as f64
        } else {
            0.0
        };
        below = if *events == n {
            (0, 0.0)
        } else {
            (*events, after_open)
        };
        println!(
            "  {name:<14} ({events} waiting): restart {:.2} s, RSS after open {:.0} MiB (peak {:.0} MiB, {:.0} MiB before; {per_event:.0} B per event more than the run above), enqueue {}/s ({} µs CPU each), drain {}/s ({} µs CPU each), file {} MiB",
            v["open_s"].as_f64().unwrap_or(0.0),
            mib(&v, "rss_after_open"),
            mib(&v, "rss_peak_open"),
            mib(&v, "rss_before"),
            v["enqueue_per_s"],
            v["enqueue_cpu_us"],
            v["drain_per_s"],
            v["drain_cpu_us"],
            file_size(path) >> 20,
        );
    }
    Ok(())
}

/// Claims and completes `rate` records per second for `duration`, each kept `ttl`:
/// (seconds, file MiB, expired so far) each second, and the slowest claim.
async fn sweep_run(
    path: &Path,
    rate: u64,
    ttl: Duration,
    duration: Duration,
) -> AnyResult<(Vec<(u64, u64, u64)>, Vec<Duration>, u64)> {
    let store = DiskStore::open(path)?;
    let expired = store.metrics().expired("dedup");
    let tick = Duration::from_millis(10);
    let per_tick = (rate / 100).max(1);
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut took = Vec::new();
    let mut i = 0u64;
    let mut next = Instant::now();
    let mut second = 1;
    while started.elapsed() < duration {
        let mut calls = Vec::new();
        for _ in 0..per_tick {
            let (store, key) = (store.clone(), DedupKey::new(PREFIX, ROUTE, &id("s", i)));
            i += 1;
            calls.push(tokio::spawn(async move {
                let t = Instant::now();
                let claim = store.claim(&key, "fp", Duration::from_secs(30)).await;
                let took = t.elapsed();
                if let Ok(Claim::Claimed(token)) = claim {
                    let _ = store.complete(&key, &token, "fp", ttl).await;
                }
                took
            }));
        }
        for c in calls {
            took.push(c.await?);
        }
        if started.elapsed() >= Duration::from_secs(second) {
            samples.push((second, file_size(path) >> 20, expired.get()));
            second += 1;
        }
        next += tick;
        tokio::time::sleep_until(next.into()).await;
    }
    took.sort_unstable();
    Ok((samples, took, i))
}

async fn sweep(args: &[String], dir: &Path) -> AnyResult<()> {
    let rate: u64 = arg(args, "--rate", 5000);
    let ttl = duration_arg(args, "--ttl", Duration::from_secs(2));
    let duration = duration_arg(args, "--duration", Duration::from_secs(30));
    println!("sweep: {rate} records/s, kept {ttl:?}, for {duration:?}");
    for (name, keep) in [
        ("expiring", ttl),
        ("nothing expires", Duration::from_secs(3600)),
    ] {
        let path = dir.join(format!("sweep-{}.db", keep.as_secs()));
        let (samples, took, written) = sweep_run(&path, rate, keep, duration).await?;
        let at = |q: f64| {
            took.get(((took.len() as f64 * q) as usize).min(took.len().saturating_sub(1)))
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        let sizes: Vec<String> = samples
            .iter()
            .map(|(s, mib, _)| format!("{s}s:{mib}"))
            .collect();
        let expired = samples.last().map_or(0, |s| s.2);
        println!(
            "  {name:<16}: {written} written, {expired} expired; file MiB by second {}; claims p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, slowest {:.1} ms",
            sizes.join(" "),
            at(0.5),
            at(0.99),
            at(0.999),
            at(1.0)
        );
    }
    Ok(())
}

async fn sizes(args: &[String], dir: &Path) -> AnyResult<()> {
    let n: u64 = arg(args, "--records", 1_000_000);
    println!("sizes: {n} dedup records (a 25-byte event ID, a 16-character fingerprint)");
    let mem = MemoryStore::with_max_records(usize::try_from(n)?.saturating_add(1));
    let before = rss().0;
    for i in 0..n {
        let key = DedupKey::new(PREFIX, ROUTE, &id("m", i));
        if let Ok(Claim::Claimed(token)) = mem.claim(&key, "3f2a9c0d1e4b5a6f", LEASE).await {
            let _ = mem.complete(&key, &token, "3f2a9c0d1e4b5a6f", TTL).await;
        }
    }
    let grown = rss().0.saturating_sub(before);
    println!(
        "  memory: {} B per record (RSS grew {} MiB)",
        grown / n.max(1),
        grown >> 20
    );
    drop(mem);
    let path = dir.join("sizes.db");
    let disk = DiskStore::open(&path)?;
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut joins = Vec::new();
    for _ in 0..128 {
        let (disk, next) = (disk.clone(), next.clone());
        joins.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return;
                }
                let key = DedupKey::new(PREFIX, ROUTE, &id("d", i));
                // A short lease: its expiry entry, left behind by the completion, is
                // swept as it would be in a long run.
                if let Ok(Claim::Claimed(token)) = disk
                    .claim(&key, "3f2a9c0d1e4b5a6f", Duration::from_millis(1))
                    .await
                {
                    let _ = disk.complete(&key, &token, "3f2a9c0d1e4b5a6f", TTL).await;
                }
            }
        }));
    }
    for j in joins {
        j.await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    disk.flush().await?;
    println!(
        "  disk: {} B per record (file {} MiB)",
        file_size(&path) / n.max(1),
        file_size(&path) >> 20
    );
    Ok(())
}

/// The disk store's tables, mirrored for `engines`: the store's definitions are private
/// to the crate (`store/disk/mod.rs`: `dedup`, `expiry`; `store/disk/queue/tables.rs`:
/// `queue_bodies`, `queue_status`), so the same names, key and value types are declared
/// here. Keep them in step with the store's.
const DEDUP: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("dedup");
const EXPIRY: redb::TableDefinition<(u64, &str), ()> = redb::TableDefinition::new("expiry");
const EVENTS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("queue_bodies");
const STATUS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("queue_status");
/// The store's page cache (`store/disk/mod.rs`, `CACHE`).
const REDB_CACHE: usize = 32 << 20;
/// The fingerprint of every record (16 characters, like the gateway's).
const FP: &str = "3f2a9c0d1e4b5a6f";

/// What the gateway's durable batches hold.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Workload {
    /// Mostly synchronous routes: 9 operations in 10 are a done record (the dedup
    /// record and its expiry entry, written when a forward succeeds), 1 in 10 a queued
    /// event.
    Mixed,
    /// A queue route: every operation a queued event (its done record and expiry entry,
    /// the event and its status).
    Queued,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Self::Mixed => "mixed",
            Self::Queued => "queued",
        }
    }
}

/// The event of a queued operation, as `store/disk/queue/ops.rs` writes it.
#[derive(Clone)]
struct QueuedRecords {
    /// `queue_bodies`: sequence number → `StoredEvent::encode`.
    seq: u64,
    event: Vec<u8>,
    /// `queue_status`: `<prefix><route>\n<event id>` → 8 bytes of expiry (`u64::MAX`
    /// while undelivered) + the status record's JSON.
    qkey: String,
    status: Vec<u8>,
}

/// One operation's records: its done record (`dedup`), the record's expiry entry
/// (`expiry`), and for a queued event the event and its status.
#[derive(Clone)]
struct Records {
    key: String,
    /// 8 bytes of expiry (Unix ms, big-endian) + `d|<token>|<fingerprint>`.
    done: Vec<u8>,
    at: u64,
    /// `d` + the key: the expiry index's tag of a dedup record.
    tagged: String,
    queued: Option<QueuedRecords>,
}

/// `store/disk/queue/tables.rs`'s `StatusRecord` (private to the crate), field for
/// field, so the JSON is the same.
#[derive(serde::Serialize)]
struct StatusRecordMirror<'a> {
    s: &'a Status,
    fp: &'a str,
    rx: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    t: Option<&'a str>,
    n: u64,
}

/// Makes the operations of a workload, each with a new event ID.
struct Maker {
    workload: Workload,
    next: u64,
    seq: u64,
    /// Random bytes: no engine here compresses, and none may gain from a body that
    /// would compress better than a real one.
    body: Vec<u8>,
}

impl Maker {
    fn new(workload: Workload, body: usize) -> Self {
        let mut bytes = vec![0u8; body];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
        Self {
            workload,
            next: 0,
            seq: 0,
            body: bytes,
        }
    }

    /// The next operation's records. Made inside the measured loop, as the store's
    /// writer makes the done record and the status (a few µs, the same for every
    /// engine).
    fn make(&mut self) -> Records {
        let i = self.next;
        self.next += 1;
        let event_id = id("e", i);
        let key = DedupKey::new(PREFIX, ROUTE, &event_id).as_str().to_owned();
        let now = now_ms();
        let at = now.saturating_add(u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX));
        let text = format!("d|{}|{FP}", Token::random().as_str());
        let mut done = Vec::with_capacity(8 + text.len());
        done.extend_from_slice(&at.to_be_bytes());
        done.extend_from_slice(text.as_bytes());
        let queued = (self.workload == Workload::Queued || i % 10 == 9).then(|| {
            self.seq += 1;
            let status = Status::queued(now);
            let mut encoded = u64::MAX.to_be_bytes().to_vec();
            serde_json::to_writer(
                &mut encoded,
                &StatusRecordMirror {
                    s: &status,
                    fp: FP,
                    rx: now,
                    t: Some("invoice.paid"),
                    n: self.seq,
                },
            )
            .expect("a status record in JSON");
            QueuedRecords {
                seq: self.seq,
                event: event(&event_id, &self.body).encode(),
                qkey: format!("{PREFIX}{}\n{event_id}", queue().name()),
                status: encoded,
            }
        });
        Records {
            tagged: format!("d{key}"),
            key,
            done,
            at,
            queued,
        }
    }
}

/// An engine under the store's records.
trait Engine {
    /// Writes one group commit: when this returns, every record of `batch` survives a
    /// crash (one fsync).
    fn commit(&mut self, batch: &[Records]) -> AnyResult<()>;
    /// The work the engine left for later that the records cost all the same, done
    /// now so that it is counted: the journal's last checkpoint, fjall's memtable
    /// flush to its tables.
    fn settle(&mut self) -> AnyResult<()>;
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// redb as the store uses it today: a batch is one write transaction, committed
    /// with `Durability::Immediate`.
    Redb,
    /// fjall 3: a batch is one atomic write batch, its journal fdatasynced once.
    Fjall,
    /// A journal of our own in front of redb ([`Journaled`]), each batch applied to
    /// redb as it comes.
    Journal,
    /// The same journal, its batches applied to redb [`APPLY_EVERY`] at a time (the
    /// writer's reads look at those still pending first).
    JournalLazy,
}

impl Kind {
    const ALL: [Self; 4] = [Self::Redb, Self::Fjall, Self::Journal, Self::JournalLazy];

    fn name(self) -> &'static str {
        match self {
            Self::Redb => "redb",
            Self::Fjall => "fjall",
            Self::Journal => "journal+redb",
            Self::JournalLazy => "journal+redb/16",
        }
    }

    /// Its name in `--engines`.
    fn key(self) -> &'static str {
        match self {
            Self::Redb => "redb",
            Self::Fjall => "fjall",
            Self::Journal => "journal",
            Self::JournalLazy => "journal-lazy",
        }
    }

    fn open(self, dir: &Path) -> AnyResult<Box<dyn Engine>> {
        Ok(match self {
            Self::Redb => Box::new(Redb::open(dir)?),
            Self::Fjall => Box::new(Fjall::open(dir)?),
            Self::Journal => Box::new(Journaled::open(dir, 1)?),
            Self::JournalLazy => Box::new(Journaled::open(dir, APPLY_EVERY)?),
        })
    }
}

fn open_redb(path: &Path) -> AnyResult<redb::Database> {
    let db = redb::Database::builder()
        .set_cache_size(REDB_CACHE)
        .create(path)?;
    // The tables exist from the start, as the store's open makes them.
    let txn = db.begin_write()?;
    txn.open_table(DEDUP)?;
    txn.open_table(EXPIRY)?;
    txn.open_table(EVENTS)?;
    txn.open_table(STATUS)?;
    txn.commit()?;
    Ok(db)
}

/// Applies a batch in `txn` as the store's writer does (`writer.rs`, `apply`): the four
/// tables opened, and with `read`, each key read before it is written (`dedup_op`'s
/// live record, an enqueue's `held_copy`). The sweep of expired records is left out:
/// with a day's TTL it finds nothing.
fn apply_redb(txn: &redb::WriteTransaction, batch: &[Records], read: bool) -> AnyResult<()> {
    use redb::ReadableTable as _;
    let mut dedup = txn.open_table(DEDUP)?;
    let mut events = txn.open_table(EVENTS)?;
    let mut status = txn.open_table(STATUS)?;
    let mut expiry = txn.open_table(EXPIRY)?;
    for r in batch {
        if read {
            anyhow::ensure!(dedup.get(r.key.as_str())?.is_none(), "a new key is held");
            if let Some(q) = &r.queued {
                anyhow::ensure!(
                    status.get(q.qkey.as_str())?.is_none(),
                    "a new event is held"
                );
            }
        }
        dedup.insert(r.key.as_str(), r.done.as_slice())?;
        expiry.insert((r.at, r.tagged.as_str()), ())?;
        if let Some(q) = &r.queued {
            events.insert(q.seq, q.event.as_slice())?;
            status.insert(q.qkey.as_str(), q.status.as_slice())?;
        }
    }
    Ok(())
}

/// redb as the store uses it today.
struct Redb {
    db: redb::Database,
}

impl Redb {
    fn open(dir: &Path) -> AnyResult<Self> {
        Ok(Self {
            db: open_redb(&dir.join("store.db"))?,
        })
    }
}

impl Engine for Redb {
    fn commit(&mut self, batch: &[Records]) -> AnyResult<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(redb::Durability::Immediate)?;
        apply_redb(&txn, batch, true)?;
        txn.commit()?;
        Ok(())
    }

    fn settle(&mut self) -> AnyResult<()> {
        Ok(())
    }
}

/// fjall 3, with the store's tables as keyspaces. Keys that redb orders as tuples or
/// integers are big-endian bytes here, which order the same way.
struct Fjall {
    db: fjall::Database,
    dedup: fjall::Keyspace,
    expiry: fjall::Keyspace,
    events: fjall::Keyspace,
    status: fjall::Keyspace,
}

impl Fjall {
    fn open(dir: &Path) -> AnyResult<Self> {
        let db = fjall::Database::builder(dir.join("fjall")).open()?;
        let ks = |name: &str| db.keyspace(name, fjall::KeyspaceCreateOptions::default);
        Ok(Self {
            dedup: ks("dedup")?,
            expiry: ks("expiry")?,
            events: ks("queue_bodies")?,
            status: ks("queue_status")?,
            db,
        })
    }
}

/// An expiry entry's key in bytes: the expiry, big-endian, then the tagged key.
fn expiry_key(r: &Records) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + r.tagged.len());
    k.extend_from_slice(&r.at.to_be_bytes());
    k.extend_from_slice(r.tagged.as_bytes());
    k
}

impl Engine for Fjall {
    fn commit(&mut self, batch: &[Records]) -> AnyResult<()> {
        // `SyncData`: the batch's journal entries are written and fdatasynced before
        // `commit` returns (fjall's `journal/writer.rs`, `persist`), so the batch is
        // durable there, like a redb commit with `Durability::Immediate`.
        let mut b = self
            .db
            .batch()
            .durability(Some(fjall::PersistMode::SyncData));
        for r in batch {
            anyhow::ensure!(self.dedup.get(&r.key)?.is_none(), "a new key is held");
            if let Some(q) = &r.queued {
                anyhow::ensure!(self.status.get(&q.qkey)?.is_none(), "a new event is held");
            }
            b.insert(&self.dedup, r.key.as_str(), r.done.as_slice());
            b.insert(&self.expiry, expiry_key(r), []);
            if let Some(q) = &r.queued {
                b.insert(&self.events, q.seq.to_be_bytes(), q.event.as_slice());
                b.insert(&self.status, q.qkey.as_str(), q.status.as_slice());
            }
        }
        b.commit()?;
        Ok(())
    }

    fn settle(&mut self) -> AnyResult<()> {
        // The memtables written to tables on disk, as fjall does by itself once one
        // is full (64 MiB): what a longer run pays for each record. (A hidden API,
        // the only one that waits for the flush.)
        for ks in [&self.dedup, &self.expiry, &self.events, &self.status] {
            ks.rotate_memtable_and_wait()?;
        }
        Ok(())
    }
}

/// A checkpoint when the journal passes this size...
const JOURNAL_MAX: u64 = 64 << 20;
/// ... or this long after the last one.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// The journal file's first size, written with zeros at open (a second's worth of
/// small batches; it grows past it when it must, and never shrinks).
const JOURNAL_START: u64 = 16 << 20;
/// A frame's header: the length of the rest (u32, little-endian), its XXH3-64 (u64),
/// then the frame's number (u64), which the checksum covers.
const FRAME_HEADER: usize = 20;
/// Batches of `journal+redb/16` applied to redb in one transaction: one copy-on-write
/// of the trees' paths for many batches, as a large group commit gets.
const APPLY_EVERY: usize = 16;
/// In redb, beside the store's tables: the number of the last frame a checkpoint
/// made durable there (under `""`).
const CHECKPOINTED: redb::TableDefinition<&str, u64> =
    redb::TableDefinition::new("journal_checkpoint");

/// A write-ahead journal in front of redb, written by hand: no crate does "a WAL in
/// front of redb" (redb has no log of its own: its commits are copy-on-write page
/// trees, which is what costs). Each batch is one frame written to `journal.log`
/// (length, XXH3-64, the frame's number, then `table, key, value` records: the batch's
/// writes as they are, so a replay is idempotent) and fdatasynced: the batch is durable
/// there. Its records are then applied to redb in a transaction with
/// `Durability::None` (readers see them; no page is fsynced), each batch as it comes
/// or `apply_every` batches at once: those not applied yet are kept in memory, and the
/// writer's reads look there first (in the store, its readers would have to as well).
///
/// A checkpoint, every [`CHECKPOINT_EVERY`] or [`JOURNAL_MAX`] of journal, commits
/// redb durably, with what is pending and the number of the last frame, and the
/// journal starts again from the beginning of its file. The file is written over,
/// never truncated nor extended while it is large enough: an fdatasync then carries
/// the data alone, where an append that grows the file makes each one commit the
/// filesystem's journal too (the new size and blocks). After a
/// crash, the frames from the start whose length and checksum hold and whose numbers
/// follow on from the checkpoint's are applied again, up to the first that does not: a
/// torn last write (never acknowledged), or a frame left from before the checkpoint
/// ([`replay`]).
struct Journaled {
    db: redb::Database,
    log: std::fs::File,
    path: PathBuf,
    /// Where the next frame goes.
    at: u64,
    /// The last frame's number.
    seq: u64,
    frame: Vec<u8>,
    checkpointed: Instant,
    apply_every: usize,
    /// Batches journaled, not yet applied to redb, and their keys.
    pending: Vec<Records>,
    pending_batches: usize,
    pending_keys: std::collections::HashSet<String>,
}

impl Journaled {
    fn open(dir: &Path, apply_every: usize) -> AnyResult<Self> {
        use std::os::unix::fs::FileExt as _;
        let path = dir.join("journal.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        // Blocks written once, so that writing over them later changes no metadata; a
        // page at a time, so that the page cache holds the file in pages, not in large
        // folios (a frame written into a 1 MiB folio dirties, and writes back, all of
        // it).
        let zeros = vec![0u8; 4096];
        let mut at = 0;
        while at < JOURNAL_START {
            log.write_all_at(&zeros, at)?;
            at += zeros.len() as u64;
        }
        log.sync_all()?;
        let db = open_redb(&dir.join("store.db"))?;
        let txn = db.begin_write()?;
        txn.open_table(CHECKPOINTED)?;
        txn.commit()?;
        Ok(Self {
            db,
            log,
            path,
            at: 0,
            seq: 0,
            frame: Vec::new(),
            checkpointed: Instant::now(),
            apply_every: apply_every.max(1),
            pending: Vec::new(),
            pending_batches: 0,
            pending_keys: std::collections::HashSet::new(),
        })
    }

    /// Whether a key of `batch` is held already, among the pending batches or in
    /// redb: the reads the store's writer makes before it writes.
    fn check_new(&self, batch: &[Records]) -> AnyResult<()> {
        use redb::ReadableDatabase as _;
        let txn = self.db.begin_read()?;
        let (dedup, status) = (txn.open_table(DEDUP)?, txn.open_table(STATUS)?);
        for r in batch {
            anyhow::ensure!(
                !self.pending_keys.contains(&r.key) && dedup.get(r.key.as_str())?.is_none(),
                "a new key is held"
            );
            if let Some(q) = &r.queued {
                anyhow::ensure!(
                    !self.pending_keys.contains(&q.qkey) && status.get(q.qkey.as_str())?.is_none(),
                    "a new event is held"
                );
            }
        }
        Ok(())
    }

    /// Applies the pending batches to redb in one transaction; a durable one records
    /// the last frame's number with them (a checkpoint).
    fn apply_pending(&mut self, durability: redb::Durability) -> AnyResult<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(durability)?;
        apply_redb(&txn, &self.pending, false)?;
        if matches!(durability, redb::Durability::Immediate) {
            txn.open_table(CHECKPOINTED)?.insert("", self.seq)?;
        }
        txn.commit()?;
        self.pending.clear();
        self.pending_keys.clear();
        self.pending_batches = 0;
        Ok(())
    }

    /// A record of the frame: table, key length (u16), value length (u32), key, value.
    fn record(&mut self, table: u8, key: &[u8], value: &[u8]) -> AnyResult<()> {
        self.frame.push(table);
        self.frame
            .extend_from_slice(&u16::try_from(key.len())?.to_le_bytes());
        self.frame
            .extend_from_slice(&u32::try_from(value.len())?.to_le_bytes());
        self.frame.extend_from_slice(key);
        self.frame.extend_from_slice(value);
        Ok(())
    }

    /// redb made durable with every frame so far, then the journal written again from
    /// the start: nothing to sync there (the frames left behind are older than the
    /// checkpoint, which a replay recognises).
    fn checkpoint(&mut self) -> AnyResult<()> {
        self.apply_pending(redb::Durability::Immediate)?;
        self.at = 0;
        self.checkpointed = Instant::now();
        Ok(())
    }

    /// The last frame a checkpoint made durable in redb.
    fn checkpointed_seq(&self) -> AnyResult<u64> {
        use redb::ReadableDatabase as _;
        let txn = self.db.begin_read()?;
        let seq = txn.open_table(CHECKPOINTED)?.get("")?.map(|v| v.value());
        Ok(seq.unwrap_or(0))
    }
}

impl Engine for Journaled {
    fn commit(&mut self, batch: &[Records]) -> AnyResult<()> {
        use std::os::unix::fs::FileExt as _;
        if self.apply_every > 1 {
            self.check_new(batch)?;
        }
        self.seq += 1;
        self.frame.clear();
        self.frame.resize(FRAME_HEADER - 8, 0);
        self.frame.extend_from_slice(&self.seq.to_le_bytes());
        for r in batch {
            self.record(0, r.key.as_bytes(), &r.done)?;
            self.record(1, &expiry_key(r), &[])?;
            if let Some(q) = &r.queued {
                self.record(2, &q.seq.to_be_bytes(), &q.event)?;
                self.record(3, q.qkey.as_bytes(), &q.status)?;
            }
        }
        let covered = self.frame.get(12..).unwrap_or_default();
        let (len, sum) = (
            u32::try_from(covered.len())?,
            xxhash_rust::xxh3::xxh3_64(covered),
        );
        self.frame[..4].copy_from_slice(&len.to_le_bytes());
        self.frame[4..12].copy_from_slice(&sum.to_le_bytes());
        self.log.write_all_at(&self.frame, self.at)?;
        // The one fsync of the batch: durable from here.
        self.log.sync_data()?;
        self.at += self.frame.len() as u64;
        if self.apply_every == 1 {
            let mut txn = self.db.begin_write()?;
            txn.set_durability(redb::Durability::None)?;
            apply_redb(&txn, batch, true)?;
            txn.commit()?;
        } else {
            self.pending.extend(batch.iter().cloned());
            for r in batch {
                self.pending_keys.insert(r.key.clone());
                if let Some(q) = &r.queued {
                    self.pending_keys.insert(q.qkey.clone());
                }
            }
            self.pending_batches += 1;
            if self.pending_batches >= self.apply_every {
                self.apply_pending(redb::Durability::None)?;
            }
        }
        if self.at >= JOURNAL_MAX || self.checkpointed.elapsed() >= CHECKPOINT_EVERY {
            self.checkpoint()?;
        }
        Ok(())
    }

    fn settle(&mut self) -> AnyResult<()> {
        self.checkpoint()
    }
}

/// What a restart would take from a journal whose frames up to `checkpointed` are in
/// redb: the frames from the start whose length and checksum hold and whose numbers
/// follow on from `checkpointed`, up to the first that does not; `(frames, records,
/// bytes)`. Anything after is a torn write (never acknowledged) or older frames.
fn replay(bytes: &[u8], checkpointed: u64) -> (u64, u64, usize) {
    let (mut frames, mut records, mut at) = (0, 0, 0);
    let mut next = checkpointed + 1;
    while let Some(header) = bytes.get(at..at + 12) {
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let sum = u64::from_le_bytes(header[4..].try_into().unwrap_or_default());
        let Some(covered) = bytes.get(at + 12..at + 12 + len) else {
            break;
        };
        if len < 8 || xxhash_rust::xxh3::xxh3_64(covered) != sum {
            break;
        }
        let (seq, payload) = covered.split_at(8);
        if u64::from_le_bytes(seq.try_into().unwrap_or_default()) != next {
            break;
        }
        let mut p = 0;
        while let Some(head) = payload.get(p..p + 7) {
            let k = usize::from(u16::from_le_bytes([head[1], head[2]]));
            let v = u32::from_le_bytes([head[3], head[4], head[5], head[6]]) as usize;
            p += 7 + k + v;
            records += 1;
        }
        frames += 1;
        next += 1;
        at += 12 + len;
    }
    (frames, records, at)
}

/// Bytes this process has had written to disk: `write_bytes` of `/proc/self/io`, every
/// thread's (fjall's flushes and compactions too). Counted when a page cache page is
/// dirtied: a page written again before it reaches the disk counts once, as it is
/// written once. The filesystem's own journal is not in it.
fn written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Space the files under `path` take on disk (allocated blocks: fjall's journal is a
/// 64 MiB file with holes).
fn disk_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::read_dir(path).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => disk_usage(&e.path()),
                Ok(m) => m.blocks() * 512,
                Err(_) => 0,
            })
            .sum()
    })
}

/// The load average over 1, 5 and 15 minutes.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// How long a cell runs.
#[derive(Debug, Clone, Copy)]
enum Budget {
    Ops(u64),
    Time(Duration),
}

/// What one engine did with one workload at one batch size (summed over repeats).
#[derive(Debug, Clone)]
struct Cell {
    engine: Kind,
    workload: Workload,
    batch: usize,
    ops: u64,
    commits: u64,
    secs: f64,
    cpu: Duration,
    written: u64,
    /// On disk at the end of each repeat, summed.
    disk: u64,
    runs: u64,
    /// Each repeat's rate (operations per second).
    rates: Vec<f64>,
}

impl Cell {
    fn per_s(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9)
    }
}

/// Runs one engine on one workload at one batch size, in fresh files under `root`;
/// `(operations, commits, seconds, CPU, bytes written, bytes on disk at the end)`.
/// Opening the files is not measured; the settling of what the engine left for later
/// is.
fn run_cell(
    engine: Kind,
    workload: Workload,
    batch: usize,
    budget: Budget,
    body: usize,
    root: &Path,
) -> AnyResult<(u64, u64, f64, Duration, u64, u64)> {
    let dir = tempfile::tempdir_in(root)?;
    let mut sink = engine.open(dir.path())?;
    let mut maker = Maker::new(workload, body);
    let mut records = Vec::with_capacity(batch);
    let (mut ops, mut commits) = (0u64, 0u64);
    let (written0, cpu0, started) = (written(), cpu(), Instant::now());
    loop {
        records.clear();
        records.extend((0..batch).map(|_| maker.make()));
        sink.commit(&records)?;
        ops += batch as u64;
        commits += 1;
        let done = match budget {
            Budget::Ops(n) => ops >= n,
            Budget::Time(d) => started.elapsed() >= d,
        };
        if done {
            break;
        }
    }
    sink.settle()?;
    let secs = started.elapsed().as_secs_f64();
    let (cpu_used, bytes) = (cpu() - cpu0, written().saturating_sub(written0));
    let disk = disk_usage(dir.path());
    drop(sink);
    Ok((ops, commits, secs, cpu_used, bytes, disk))
}

/// A comma-separated list from the arguments, each item parsed, or `default`.
fn list_arg<T: std::str::FromStr>(args: &[String], name: &str, default: Vec<T>) -> Vec<T> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .filter(|v: &Vec<T>| !v.is_empty())
        .unwrap_or(default)
}

/// fjall's handling of a torn last batch, found by tearing one: a batch's end marker
/// lost (the last bytes of the append never reached the disk), then a sector inside
/// the batch lost with its end marker intact (a crash can land an append's sectors
/// in any order). Its journal is a preallocated file with holes, so a lost sector
/// reads back as zeros. Each line says what a reopen did.
fn fjall_torn_tail(root: &Path) -> AnyResult<Vec<String>> {
    use std::os::unix::fs::FileExt as _;
    const BATCHES: usize = 3;
    const ITEMS: usize = 4;
    let mut found = Vec::new();
    for (what, tear) in [
        ("end marker of the last batch zeroed", 0usize),
        ("512 bytes inside the last batch zeroed", 512),
    ] {
        let dir = tempfile::tempdir_in(root)?;
        let path = dir.path().join("fjall");
        {
            let db = fjall::Database::builder(&path).open()?;
            let ks = db.keyspace("dedup", fjall::KeyspaceCreateOptions::default)?;
            for b in 0..BATCHES {
                let mut batch = db.batch().durability(Some(fjall::PersistMode::SyncData));
                for i in 0..ITEMS {
                    batch.insert(&ks, id("t", (b * ITEMS + i) as u64), vec![b'v'; 1000]);
                }
                batch.commit()?;
            }
        }
        let journal = std::fs::read_dir(&path)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jnl"))
            .max_by_key(|p| {
                p.file_stem()
                    .and_then(|s| s.to_str())
                    .and_then(|s| s.parse::<u64>().ok())
            })
            .ok_or_else(|| anyhow::anyhow!("no journal in {}", path.display()))?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&journal)?;
        let mut head = vec![0u8; 1 << 20];
        let n = file.read_at(&mut head, 0)?;
        // The written part ends with the last end marker's magic bytes (nonzero).
        let end = head[..n].iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
        // An end marker: tag (1), checksum (8), magic (4).
        let (from, len) = if tear == 0 {
            (end.saturating_sub(13), 13)
        } else {
            (end.saturating_sub(13 + 100 + tear), tear)
        };
        file.write_at(&vec![0u8; len], from as u64)?;
        file.sync_all()?;
        drop(file);
        found.push(match fjall::Database::builder(&path).open() {
            Ok(db) => {
                let ks = db.keyspace("dedup", fjall::KeyspaceCreateOptions::default)?;
                let kept = ks.len()?;
                format!(
                    "{what}: reopened with {kept} of {} items (the last batch {})",
                    BATCHES * ITEMS,
                    match kept {
                        k if k == BATCHES * ITEMS => "kept",
                        k if k == (BATCHES - 1) * ITEMS => "dropped whole",
                        _ => "partly kept",
                    }
                )
            }
            Err(e) => format!("{what}: the database does not open: {e}"),
        });
    }
    Ok(found)
}

/// The journal's replay, checked: a journal of `frames` frames replays them all, with
/// part of a frame more (a torn write) the same, and after a checkpoint only the frames
/// written since.
fn check_replay(root: &Path) -> AnyResult<String> {
    let dir = tempfile::tempdir_in(root)?;
    let mut j = Journaled::open(dir.path(), 1)?;
    // No checkpoint but those made here.
    j.checkpointed = Instant::now() + Duration::from_secs(3600);
    let mut maker = Maker::new(Workload::Mixed, 1024);
    let mut commit = |j: &mut Journaled, n: usize| -> AnyResult<u64> {
        let batch: Vec<Records> = (0..n).map(|_| maker.make()).collect();
        j.commit(&batch)?;
        Ok(batch
            .iter()
            .map(|r| if r.queued.is_some() { 4 } else { 2 })
            .sum())
    };
    let frames = 5u64;
    let mut records = 0u64;
    for _ in 0..frames {
        records += commit(&mut j, 10)?;
    }
    let end = usize::try_from(j.at)?;
    let mut bytes = std::fs::read(&j.path)?;
    anyhow::ensure!(
        replay(&bytes, 0) == (frames, records, end),
        "the journal replays {:?}, not {frames} frames of {records} records",
        replay(&bytes, 0)
    );
    // A torn write: the next frame's start on the disk, not its end.
    let torn = bytes[..end / frames as usize / 2].to_vec();
    bytes[end..end + torn.len()].copy_from_slice(&torn);
    anyhow::ensure!(
        replay(&bytes, 0) == (frames, records, end),
        "a torn write is not cut off"
    );
    // After a checkpoint, the frames left in the file are not replayed, and the next
    // frame, written over the first, is replayed alone.
    j.checkpoint()?;
    let done = j.checkpointed_seq()?;
    anyhow::ensure!(
        done == frames && replay(&std::fs::read(&j.path)?, done) == (0, 0, 0),
        "frames from before the checkpoint are replayed"
    );
    let after = commit(&mut j, 3)?;
    let replayed = replay(&std::fs::read(&j.path)?, done);
    anyhow::ensure!(
        replayed == (1, after, usize::try_from(j.at)?),
        "after a checkpoint the journal replays {replayed:?}"
    );
    // Batches applied 16 at a time: every record is in redb once settled.
    let dir = tempfile::tempdir_in(root)?;
    let mut lazy = Journaled::open(dir.path(), APPLY_EVERY)?;
    let mut maker = Maker::new(Workload::Queued, 64);
    for _ in 0..(APPLY_EVERY * 2 + 3) {
        let batch: Vec<Records> = (0..4).map(|_| maker.make()).collect();
        lazy.commit(&batch)?;
    }
    lazy.settle()?;
    let stored = {
        use redb::{ReadableDatabase as _, ReadableTableMetadata as _};
        let txn = lazy.db.begin_read()?;
        (
            txn.open_table(DEDUP)?.len()?,
            txn.open_table(EVENTS)?.len()?,
        )
    };
    let made = maker.next;
    anyhow::ensure!(
        stored == (made, made),
        "journal+redb/16 stored {stored:?} of {made} records"
    );
    Ok(format!(
        "journal+redb: {frames} frames of {records} records replayed, a torn last write cut off, frames from before a checkpoint left alone; journal+redb/16 applied all {made} operations"
    ))
}

/// The disk store's write pattern on three engines, side by side. Each cell starts
/// from empty files and runs seconds: redb's trees stay shallow, and fjall flushes a
/// memtable or two but hardly compacts (a day's dedup window would make it rewrite its
/// tables level by level), so the figures are those of a young file.
fn engines(args: &[String], dir: &Path) -> AnyResult<()> {
    let repeat: usize = arg(args, "--repeat", 2).max(1);
    let body: usize = arg(args, "--body", 1024);
    let budget = if args.iter().any(|a| a == "--ops") {
        Budget::Ops(arg(args, "--ops", 10_000).max(1))
    } else {
        Budget::Time(duration_arg(args, "--duration", Duration::from_secs(2)))
    };
    let batches: Vec<usize> = list_arg(args, "--batches", vec![1, 4, 16, 64]);
    let kinds: Vec<Kind> = list_arg::<String>(args, "--engines", Vec::new())
        .iter()
        .filter_map(|n| {
            Kind::ALL
                .into_iter()
                .find(|k| k.key() == n || k.name() == n)
        })
        .collect();
    let kinds = if kinds.is_empty() {
        Kind::ALL.to_vec()
    } else {
        kinds
    };
    let json = args.iter().any(|a| a == "--json");
    // `--dir D`: the files go under D (the default, a temporary folder, must be on a
    // disk: fsync on tmpfs measures nothing).
    let root = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map_or_else(|| dir.to_path_buf(), PathBuf::from);
    std::fs::create_dir_all(&root)?;
    if rustix::fs::statfs(&root).is_ok_and(|s| s.f_type == 0x0102_1994) {
        println!(
            "engines: warning: {} is on tmpfs; fsync costs nothing there (--dir D)",
            root.display()
        );
    }
    let load_before = load_average();
    println!(
        "engines: the disk store's records ({body} B bodies), one fsync per group commit, {budget:?} per cell, {repeat} repeat(s) interleaved; load average {load_before}"
    );
    let mut cells: Vec<Cell> = Vec::new();
    for rep in 0..repeat {
        for workload in [Workload::Mixed, Workload::Queued] {
            for &batch in &batches {
                // Each engine's neighbours change from one repeat to the next.
                let mut order = kinds.clone();
                order.rotate_left(rep % kinds.len());
                for engine in order {
                    let (ops, commits, secs, cpu_used, bytes, disk) =
                        run_cell(engine, workload, batch, budget, body, &root)?;
                    let at = cells.iter().position(|c| {
                        c.engine == engine && c.workload == workload && c.batch == batch
                    });
                    let cell = match at {
                        Some(i) => &mut cells[i],
                        None => {
                            cells.push(Cell {
                                engine,
                                workload,
                                batch,
                                ops: 0,
                                commits: 0,
                                secs: 0.0,
                                cpu: Duration::ZERO,
                                written: 0,
                                disk: 0,
                                runs: 0,
                                rates: Vec::new(),
                            });
                            cells.last_mut().expect("a cell just pushed")
                        }
                    };
                    cell.ops += ops;
                    cell.commits += commits;
                    cell.secs += secs;
                    cell.cpu += cpu_used;
                    cell.written += bytes;
                    cell.disk += disk;
                    cell.runs += 1;
                    cell.rates.push(ops as f64 / secs.max(1e-9));
                }
            }
        }
    }
    let load_after = load_average();
    println!(
        "  {:<15} {:<8} {:>5} {:>9} {:>9} {:>10} {:>11} {:>9} {:>9}  ops/s per repeat",
        "engine",
        "workload",
        "batch",
        "ops/s",
        "commits/s",
        "CPU µs/op",
        "written/op",
        "disk MiB",
        "disk/op",
    );
    for c in &cells {
        let rates: Vec<String> = c.rates.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "  {:<15} {:<8} {:>5} {:>9.0} {:>9.0} {:>10.1} {:>9.0} B {:>9.1} {:>7.0} B  {}",
            c.engine.name(),
            c.workload.name(),
            c.batch,
            c.per_s(),
            c.commits as f64 / c.secs.max(1e-9),
            c.cpu.as_secs_f64() * 1e6 / c.ops.max(1) as f64,
            c.written as f64 / c.ops.max(1) as f64,
            c.disk as f64 / c.runs.max(1) as f64 / f64::from(1 << 20),
            c.disk as f64 / c.ops.max(1) as f64,
            rates.join(" ")
        );
    }
    let ratio = |c: &Cell| {
        cells
            .iter()
            .find(|r| r.engine == Kind::Redb && r.workload == c.workload && r.batch == c.batch)
            .map(|r| c.per_s() / r.per_s().max(1e-9))
    };
    let mut ratios = Vec::new();
    for workload in [Workload::Mixed, Workload::Queued] {
        let mut parts = Vec::new();
        for engine in kinds.iter().filter(|k| **k != Kind::Redb) {
            let of: Vec<(usize, f64)> = cells
                .iter()
                .filter(|c| c.engine == *engine && c.workload == workload)
                .filter_map(|c| ratio(c).map(|r| (c.batch, r)))
                .collect();
            if of.is_empty() {
                continue;
            }
            let mean = (of.iter().map(|(_, r)| r.ln()).sum::<f64>() / of.len() as f64).exp();
            let each: Vec<String> = of.iter().map(|(b, r)| format!("{b}: {r:.2}")).collect();
            parts.push(format!(
                "{} {mean:.2}× (by batch {})",
                engine.name(),
                each.join(", ")
            ));
            ratios.push(serde_json::json!({
                "workload": workload.name(),
                "engine": engine.name(),
                "geomean": mean,
                "by_batch": of.iter().map(|(b, r)| serde_json::json!({"batch": b, "ratio": r})).collect::<Vec<_>>(),
            }));
        }
        if !parts.is_empty() {
            println!(
                "  {} — ops/s against redb as today: {}",
                workload.name(),
                parts.join("; ")
            );
        }
    }
    println!("  load average after: {load_after}");
    let torn = fjall_torn_tail(&root)?;
    for line in &torn {
        println!("  fjall, torn tail: {line}");
    }
    let replayed = check_replay(&root)?;
    println!("  {replayed}");
    if json {
        let rows: Vec<serde_json::Value> = cells
            .iter()
            .map(|c| {
                serde_json::json!({
                    "engine": c.engine.name(),
                    "workload": c.workload.name(),
                    "batch": c.batch,
                    "ops": c.ops,
                    "commits": c.commits,
                    "secs": c.secs,
                    "ops_per_s": c.per_s(),
                    "commits_per_s": c.commits as f64 / c.secs.max(1e-9),
                    "cpu_us_per_op": c.cpu.as_secs_f64() * 1e6 / c.ops.max(1) as f64,
                    "written_bytes_per_op": c.written as f64 / c.ops.max(1) as f64,
                    "disk_bytes_at_end": c.disk / c.runs.max(1),
                    "disk_bytes_per_op": c.disk as f64 / c.ops.max(1) as f64,
                    "ops_per_s_by_repeat": c.rates,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "mode": "engines",
                "body": body,
                "repeat": repeat,
                "budget": format!("{budget:?}"),
                "load_average_before": load_before,
                "load_average_after": load_after,
                "cells": rows,
                "ratios_to_redb": ratios,
                "fjall_torn_tail": torn,
                "journal_replay": replayed,
            })
        );
    }
    Ok(())
}

fn main() -> AnyResult<()> {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if args.get(1).is_some_and(|a| a == "open") {
        let path = PathBuf::from(args.get(2).cloned().unwrap_or_default());
        let events = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(0);
        let acks = args.get(4).and_then(|v| v.parse().ok()).unwrap_or(50_000);
        return rt.block_on(open_mode(&path, events, acks));
    }
    let dir = tempfile::tempdir()?;
    if !args.iter().any(|a| a == "--bench") {
        // Smoke mode under `cargo test`.
        let smoke = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        rt.block_on(backlog(
            &smoke(&["--events", "200", "--attempts", "2", "--acks", "200"]),
            dir.path(),
        ))?;
        for keys in ["all", "7"] {
            rt.block_on(backlog(
                &smoke(&[
                    "--events",
                    "200",
                    "--attempts",
                    "2",
                    "--acks",
                    "200",
                    "--keys",
                    keys,
                ]),
                dir.path(),
            ))?;
        }
        rt.block_on(sweep(
            &smoke(&["--rate", "500", "--ttl", "200ms", "--duration", "1s"]),
            dir.path(),
        ))?;
        engines(
            &smoke(&["--ops", "64", "--repeat", "1", "--json"]),
            dir.path(),
        )?;
        return rt.block_on(sizes(&smoke(&["--records", "1000"]), dir.path()));
    }
    match args
        .iter()
        .find(|a| ["backlog", "sweep", "sizes", "engines"].contains(&a.as_str()))
    {
        Some(m) if m == "backlog" => rt.block_on(backlog(&args, dir.path())),
        Some(m) if m == "sweep" => rt.block_on(sweep(&args, dir.path())),
        Some(m) if m == "engines" => engines(&args, dir.path()),
        Some(_) => rt.block_on(sizes(&args, dir.path())),
        None => anyhow::bail!(
            "usage: cargo bench --bench store -- backlog|sweep|sizes|engines [options]"
        ),
    }
}
