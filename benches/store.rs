//! The store benchmark: what a backlog and a dedup window cost the stores, through
//! their own API (no HTTP), on this machine.
//!
//! ```text
//! cargo bench --bench store -- backlog [--events 1000000] [--attempts 3] [--body 1024]
//!                                       [--acks 50000] [--repeat 1] [--dir D]
//!                                       [--keys 0|all|K]
//! cargo bench --bench store -- sweep [--rate 5000] [--ttl 2s] [--duration 30s]
//! cargo bench --bench store -- sizes [--records 1000000]
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
//!
//! Every mode stops by itself. Run by `cargo test` (which passes no `--bench`), it runs
//! tiny versions of the three, so it keeps building and working. Internal mode: `open
//! PATH EVENTS ACKS` (the restart, in a process of its own).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hookgate::queue::now_ms;
use hookgate::store::{
    Attempt, Claim, DedupKey, DedupStore as _, DiskStore, Envelope, Fanout, Finish, MemoryStore,
    QueueRef, QueueStore as _, StoredEvent, Target,
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
        return rt.block_on(sizes(&smoke(&["--records", "1000"]), dir.path()));
    }
    match args
        .iter()
        .find(|a| ["backlog", "sweep", "sizes"].contains(&a.as_str()))
    {
        Some(m) if m == "backlog" => rt.block_on(backlog(&args, dir.path())),
        Some(m) if m == "sweep" => rt.block_on(sweep(&args, dir.path())),
        Some(_) => rt.block_on(sizes(&args, dir.path())),
        None => anyhow::bail!("usage: cargo bench --bench store -- backlog|sweep|sizes [options]"),
    }
}
