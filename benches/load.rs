//! hookgate's load benchmark: the same Stripe-signed load against the upstream
//! directly, a bare pass-through proxy (hyper + hyper-util, streaming, no verification, no dedup:
//! the reference), hookgate on the memory store, the disk store and a real Redis (on
//! the last two in sync and in queue mode) — one process each, on this machine, load
//! generator included. Prints one table, and for the queue rows how fast the queue
//! was delivered to the upstream.
//!
//! ```text
//! cargo bench --bench load -- [--duration 10s] [--connections 32] [--body 1024] [--dup 0.1]
//! cargo bench --bench load -- drain [--events 100000] [--concurrency 64] [--body 1024]
//! ```
//! `drain` measures the queue's delivery alone: it stores a backlog of `--events`
//! events through the store's own API (disk, then Redis), starts the gateway on it
//! with the route's `concurrency` at `--concurrency`, and times how long the upstream
//! takes to receive them all.
//!
//! `benches/run.sh` runs the documented variants. Run by `cargo test` (which passes no
//! `--bench`), it runs in smoke mode: half a second per target, four connections, so
//! it keeps building and working. It is a benchmark target, not a binary: `cargo
//! install` installs the gateway only.
//! Internal modes (run by the benchmark itself): `upstream PORT`, `proxy PORT UPSTREAM`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

type AnyResult<T> = anyhow::Result<T>;

/// The same allocator as the hookgate binary, so the bare proxy (the reference) and the
/// gateway run on the same stack.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn free_port() -> AnyResult<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn serve<F, Fut>(port: u16, handler: F) -> AnyResult<()>
where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = http::Response<Full<Bytes>>> + Send + 'static,
{
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    hookgate::ingress::listen::serve_http(listener, std::future::pending(), move |req, _| {
        handler(req)
    })
    .await;
    Ok(())
}

/// The upstream: reads the body, answers 200 at once, and counts what it received
/// (`GET /count` answers the count, for the queue rows' delivery rate).
async fn upstream(port: u16) -> AnyResult<()> {
    let received = Arc::new(std::sync::atomic::AtomicU64::new(0));
    serve(port, move |req: http::Request<hyper::body::Incoming>| {
        let received = received.clone();
        async move {
            if req.uri().path() == "/count" {
                let n = received.load(std::sync::atomic::Ordering::Relaxed);
                return http::Response::new(Full::new(Bytes::from(n.to_string())));
            }
            let _ = req.into_body().collect().await;
            received.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            http::Response::new(Full::new(Bytes::from_static(b"{\"ok\":true}")))
        }
    })
    .await
}

/// How many deliveries the upstream has received.
async fn upstream_count(port: u16) -> AnyResult<u64> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = http::Request::get("/count")
        .header("host", "bench")
        .body(Full::new(Bytes::new()))?;
    let body = sender
        .send_request(req)
        .await?
        .into_body()
        .collect()
        .await?;
    Ok(std::str::from_utf8(&body.to_bytes())?.trim().parse()?)
}

/// A queue row's delivery: events the upstream received from the start of the
/// measured run until the queue drained, and how long that took.
struct Drain {
    delivered: u64,
    /// Received by the end of the provider-facing run (the rest was still queued).
    by_end_of_load: u64,
    seconds: f64,
}

/// Waits until the upstream's count stops moving (a second without a change, at most
/// a minute after the load), and measures the delivery rate.
async fn drain(up_port: u16, before: u64, started: Instant) -> AnyResult<Drain> {
    let by_end_of_load = upstream_count(up_port).await? - before;
    let (mut last, mut last_change) = (by_end_of_load, Instant::now());
    let limit = Instant::now() + Duration::from_secs(60);
    while last_change.elapsed() < Duration::from_secs(1) && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let n = upstream_count(up_port).await? - before;
        if n != last {
            (last, last_change) = (n, Instant::now());
        }
    }
    Ok(Drain {
        delivered: last,
        by_end_of_load,
        seconds: (last_change - started).as_secs_f64(),
    })
}

/// The reference: the leanest pass-through proxy on hookgate's stack — a hyper server
/// and a hyper-util pooled client that streams the request body up and the response
/// body back, with no verification, no dedup and no log (as `../shared/bench`'s).
async fn proxy(port: u16, target: String) -> AnyResult<()> {
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let client: Client<HttpConnector, hyper::body::Incoming> =
        Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(4))
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(http);
    let target: http::Uri = target.parse()?;
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    hookgate::ingress::listen::serve_http(listener, std::future::pending(), move |req, _| {
        let (client, target) = (client.clone(), target.clone());
        async move {
            let (mut parts, body) = req.into_parts();
            let mut uri = target.clone().into_parts();
            uri.path_and_query = parts.uri.path_and_query().cloned();
            parts.uri = http::Uri::from_parts(uri).unwrap_or(target);
            parts.headers = hookgate::forward::end_to_end(&parts.headers);
            match client.request(http::Request::from_parts(parts, body)).await {
                Ok(r) => r.map(http_body_util::Either::Left),
                Err(_) => {
                    let mut out =
                        http::Response::new(http_body_util::Either::Right(Full::new(Bytes::new())));
                    *out.status_mut() = http::StatusCode::BAD_GATEWAY;
                    out
                }
            }
        }
    })
    .await;
    Ok(())
}

#[derive(Debug, Clone)]
struct Opts {
    duration: Duration,
    connections: usize,
    body: usize,
    dup: f64,
}

/// A Stripe-signed request for event `n` of run `run`; duplicates reuse an earlier `n`.
fn request(
    secret: &hookgate::provider::Verifier,
    run: u64,
    n: u64,
    body_len: usize,
    now: u64,
) -> (Vec<(String, String)>, Bytes) {
    let head = format!(
        "{{\"id\":\"evt_bench_{run:x}_{n:012}\",\"object\":\"event\",\"type\":\"invoice.paid\",\"pad\":\""
    );
    let tail = "\"}";
    let pad = body_len.saturating_sub(head.len() + tail.len());
    let body = format!("{head}{}{tail}", "x".repeat(pad));
    let headers = hookgate::sign::headers(
        secret,
        &hookgate::provider::EventIdSource::Json("/id".into()),
        body.as_bytes(),
        now,
        "x",
        None,
    )
    .unwrap_or_default()
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    (headers, Bytes::from(body))
}

struct Stats {
    ok: u64,
    failed: u64,
    latencies_us: Vec<u32>,
}

/// Drives `connections` keep-alive HTTP/1.1 connections at `addr` for the duration.
async fn load(addr: SocketAddr, path: &'static str, o: &Opts) -> AnyResult<(Stats, Duration)> {
    use hyper::client::conn::http1;
    let verifier = hookgate::provider::Preset::parse("stripe")
        .ok_or_else(|| anyhow::anyhow!("stripe preset"))?
        .verifier(
            &[hookgate::provider::Credential::Text(
                hookgate::secret::Secret::new(b"whsec_bench".to_vec()),
            )],
            None,
            Some(300),
        )
        .map_err(|e| anyhow::anyhow!(e))?;
    let verifier = Arc::new(verifier);
    let now = hookgate::time::Clock::System.now();
    // Event IDs are new in every run (the warm-up, each measured run, a repeated
    // `load`): only the chosen share of duplicates repeats an event the store knows.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(0))
        .unwrap_or(0);
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + o.duration;
    let mut tasks = Vec::new();
    for c in 0..o.connections {
        let (verifier, next, o) = (verifier.clone(), next.clone(), o.clone());
        tasks.push(tokio::spawn(async move {
            let mut stats = Stats {
                ok: 0,
                failed: 0,
                latencies_us: Vec::with_capacity(100_000),
            };
            let Ok(stream) = tokio::net::TcpStream::connect(addr).await else {
                return stats;
            };
            let _ = stream.set_nodelay(true);
            let Ok((mut sender, conn)) =
                http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream)).await
            else {
                return stats;
            };
            tokio::spawn(conn);
            let mut rng_state = 0x9E37_79B9_7F4A_7C15u64 ^ (c as u64 + 1);
            while Instant::now() < deadline {
                // xorshift: a cheap, reproducible choice of duplicates.
                rng_state ^= rng_state << 13;
                rng_state ^= rng_state >> 7;
                rng_state ^= rng_state << 17;
                let issued = next.load(std::sync::atomic::Ordering::Relaxed);
                let dup = issued > 0 && (rng_state % 10_000) as f64 / 10_000.0 < o.dup;
                let n = if dup {
                    rng_state % issued
                } else {
                    next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                };
                let (headers, body) = request(&verifier, run, n, o.body, now);
                let mut req = http::Request::post(path)
                    .header("host", "bench")
                    .header("content-type", "application/json");
                for (k, v) in &headers {
                    req = req.header(k.as_str(), v.as_str());
                }
                let Ok(req) = req.body(Full::new(body)) else {
                    break;
                };
                if sender.ready().await.is_err() {
                    break;
                }
                let t = Instant::now();
                match sender.send_request(req).await {
                    Ok(resp) => {
                        // 409 is a duplicate that arrived while its first copy was still
                        // being forwarded: the gateway working as designed.
                        let ok = resp.status().is_success()
                            || resp.status() == http::StatusCode::CONFLICT;
                        let _ = resp.into_body().collect().await;
                        stats
                            .latencies_us
                            .push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
                        if ok { stats.ok += 1 } else { stats.failed += 1 }
                    }
                    Err(_) => {
                        stats.failed += 1;
                        break;
                    }
                }
            }
            stats
        }));
    }
    let mut all = Stats {
        ok: 0,
        failed: 0,
        latencies_us: Vec::new(),
    };
    for t in tasks {
        let s = t.await?;
        all.ok += s.ok;
        all.failed += s.failed;
        all.latencies_us.extend(s.latencies_us);
    }
    Ok((all, start.elapsed()))
}

/// Peak resident memory (VmHWM) of a process, in MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// CPU time (user + system) a process has used so far, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count fields after its ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // Linux reports these in clock ticks of USER_HZ, which is 100 on every
    // architecture the benchmark runs on.
    Some((utime + stime) / 100.0)
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_listening(port: u16) -> AnyResult<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn spawn(cmd: &mut Command, port: u16) -> AnyResult<Proc> {
    let p = Proc(cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?);
    wait_listening(port)?;
    Ok(p)
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i.min(sorted.len() - 1)]) / 1000.0
}

struct Row {
    name: &'static str,
    rps: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    rss: Option<f64>,
    /// CPU time the server process spent per request during the measured run.
    cpu_us: Option<f64>,
    ok: u64,
    failed: u64,
}

async fn run_target(
    name: &'static str,
    port: u16,
    path: &'static str,
    pid: u32,
    o: &Opts,
) -> AnyResult<Row> {
    // A short warm-up fills pools and caches; then the measured run.
    let warm = Opts {
        duration: Duration::from_millis(300).min(o.duration),
        ..o.clone()
    };
    let _ = load(([127, 0, 0, 1], port).into(), path, &warm).await?;
    let cpu_before = cpu_seconds(pid);
    let (mut s, elapsed) = load(([127, 0, 0, 1], port).into(), path, o).await?;
    let cpu = cpu_seconds(pid).zip(cpu_before).map(|(a, b)| a - b);
    s.latencies_us.sort_unstable();
    let requests = (s.ok + s.failed).max(1) as f64;
    Ok(Row {
        name,
        rps: (s.ok + s.failed) as f64 / elapsed.as_secs_f64(),
        p50: pct(&s.latencies_us, 0.5),
        p99: pct(&s.latencies_us, 0.99),
        p999: pct(&s.latencies_us, 0.999),
        rss: peak_rss_mib(pid),
        cpu_us: cpu.map(|c| c * 1e6 / requests),
        ok: s.ok,
        failed: s.failed,
    })
}

/// The store a hookgate row runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StoreKind {
    Memory,
    Disk,
    Redis(u16),
}

fn hookgate_config(
    port: u16,
    upstream: u16,
    store: StoreKind,
    dir: &std::path::Path,
    queue: bool,
) -> String {
    let store = match store {
        StoreKind::Redis(p) => format!("backend = \"redis\"\nurl = \"redis://127.0.0.1:{p}\""),
        StoreKind::Memory => "backend = \"memory\"".into(),
        StoreKind::Disk => format!(
            "backend = \"disk\"\npath = \"{}\"",
            dir.join(format!("bench-{port}.db")).display()
        ),
    };
    let delivery = if queue { "delivery = \"queue\"\n" } else { "" };
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nmax_body = \"1MiB\"\n[store]\n{store}\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_bench\"]\nupstream = \"http://127.0.0.1:{upstream}/stripe\"\n{delivery}"
    )
}

fn parse_args() -> AnyResult<(Vec<String>, Opts, bool)> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes --bench; `cargo test` passes nothing and gets a smoke run.
    let benching = args.iter().any(|a| a == "--bench");
    args.retain(|a| a != "--bench");
    let mut o = Opts {
        duration: Duration::from_secs(10),
        connections: 32,
        body: 1024,
        dup: 0.1,
    };
    let mut smoke = false;
    let mut rest = Vec::new();
    while !args.is_empty() {
        let a = args.remove(0);
        let mut val = || -> AnyResult<String> {
            if args.is_empty() {
                anyhow::bail!("{a} needs a value")
            } else {
                Ok(args.remove(0))
            }
        };
        match a.as_str() {
            "--duration" => o.duration = humantime::parse_duration(&val()?)?,
            "--connections" => o.connections = val()?.parse()?,
            "--body" => o.body = val()?.parse()?,
            "--dup" => o.dup = val()?.parse()?,
            "--smoke" => smoke = true,
            _ => rest.push(a),
        }
    }
    let internal = matches!(
        rest.first().map(String::as_str),
        Some("upstream" | "load" | "proxy")
    );
    // `drain` is a benchmark of its own: only `cargo bench` runs it.
    let benching = benching || rest.first().is_some_and(|m| m == "drain");
    if !benching && !internal {
        smoke = true;
    }
    if smoke {
        o.duration = Duration::from_millis(500);
        o.connections = o.connections.min(4);
    }
    Ok((rest, o, smoke))
}

#[tokio::main]
async fn main() -> AnyResult<()> {
    let (rest, o, smoke) = parse_args()?;
    match rest.first().map(String::as_str) {
        Some("upstream") => {
            return upstream(rest.get(1).and_then(|p| p.parse().ok()).unwrap_or(3000)).await;
        }
        Some("load") => {
            // Load an already running target: `load PORT PATH` (for profiling).
            let port: u16 = rest.get(1).and_then(|p| p.parse().ok()).unwrap_or(8080);
            let path: &'static str = Box::leak(
                rest.get(2)
                    .cloned()
                    .unwrap_or_else(|| "/webhooks/stripe".into())
                    .into_boxed_str(),
            );
            let (s, elapsed) = load(([127, 0, 0, 1], port).into(), path, &o).await?;
            println!(
                "{} ok, {} other, {:.0} req/s",
                s.ok,
                s.failed,
                (s.ok + s.failed) as f64 / elapsed.as_secs_f64()
            );
            return Ok(());
        }
        Some("proxy") => {
            let port = rest.get(1).and_then(|p| p.parse().ok()).unwrap_or(3001);
            return proxy(port, rest.get(2).cloned().unwrap_or_default()).await;
        }
        Some("drain") => return drain_backlog(&rest, &o, smoke).await,
        _ => {}
    }
    let me = std::env::current_exe()?;
    // Cargo builds the gateway for every benchmark, in the benchmark's own profile.
    let hookgate_bin = PathBuf::from(env!("CARGO_BIN_EXE_hookgate"));
    let dir = std::env::temp_dir().join(format!("hookgate-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;

    let (up_port, up) = counting_upstream(&me)?;
    let proxy_port = free_port()?;
    let px = spawn(
        Command::new(&me).args([
            "proxy",
            &proxy_port.to_string(),
            &format!("http://127.0.0.1:{up_port}"),
        ]),
        proxy_port,
    )?;

    let redis_port = free_port()?;
    let redis = redis_server(redis_port)?;
    // Each hookgate row: its name, store and delivery mode. Queue rows measure the
    // provider-facing answer (acknowledged once stored) and, separately, how fast the
    // queue is delivered to the upstream.
    let mut variants = vec![
        ("hookgate, memory", StoreKind::Memory, false),
        ("hookgate, disk (sync)", StoreKind::Disk, false),
        ("hookgate, disk (queue)", StoreKind::Disk, true),
    ];
    if redis.is_some() {
        variants.push((
            "hookgate, redis (sync)",
            StoreKind::Redis(redis_port),
            false,
        ));
        variants.push((
            "hookgate, redis (queue)",
            StoreKind::Redis(redis_port),
            true,
        ));
    }
    let mut gateways = Vec::new();
    for (name, store, queue) in variants {
        let port = free_port()?;
        let cfg = dir.join(format!("{port}.toml"));
        std::fs::write(&cfg, hookgate_config(port, up_port, store, &dir, queue))?;
        let proc = spawn(
            Command::new(&hookgate_bin)
                .arg("serve")
                .arg("--config")
                .arg(&cfg),
            port,
        )?;
        gateways.push((name, port, queue, proc));
    }

    println!(
        "hookgate-bench: {} s, {} connections, {} B bodies, {:.0} % duplicates, Stripe-signed{}",
        o.duration.as_secs_f64(),
        o.connections,
        o.body,
        o.dup * 100.0,
        if smoke { " (smoke)" } else { "" }
    );
    let mut rows = Vec::new();
    rows.push(run_target("upstream directly", up_port, "/stripe", up.0.id(), &o).await?);
    rows.push(
        run_target(
            "bare proxy (reference)",
            proxy_port,
            "/stripe",
            px.0.id(),
            &o,
        )
        .await?,
    );
    let mut drains = Vec::new();
    for (name, port, queue, proc) in &gateways {
        let before = upstream_count(up_port).await?;
        let started = Instant::now();
        rows.push(run_target(name, *port, "/webhooks/stripe", proc.0.id(), &o).await?);
        if *queue {
            drains.push((*name, drain(up_port, before, started).await?));
        }
    }
    let reference = rows
        .iter()
        .find(|r| r.name.starts_with("bare"))
        .map(|r| r.rps)
        .unwrap_or(1.0);
    println!();
    println!(
        "| target | req/s | p50 ms | p99 ms | p99.9 ms | peak RSS MiB | server CPU µs/req | vs bare proxy | 2xx/409 | other |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {:.2} | {} | {} |",
            r.name,
            r.rps,
            r.p50,
            r.p99,
            r.p999,
            r.rss.map_or("-".into(), |m| format!("{m:.1}")),
            r.cpu_us.map_or("-".into(), |c| format!("{c:.0}")),
            r.rps / reference,
            r.ok,
            r.failed
        );
    }
    if !drains.is_empty() {
        println!();
        println!(
            "| queue row | delivered to the upstream (warm-up included) | by the end of the load | drained after s | delivery rate /s |"
        );
        println!("|---|---:|---:|---:|---:|");
        for (name, d) in &drains {
            println!(
                "| {name} | {} | {} | {:.1} | {:.0} |",
                d.delivered,
                d.by_end_of_load,
                d.seconds,
                d.delivered as f64 / d.seconds.max(0.001)
            );
        }
    }
    drop(gateways);
    drop(redis);
    let _ = std::fs::remove_dir_all(&dir);
    if smoke {
        // In smoke mode the run only has to work: every target answered 2xx.
        for r in &rows {
            anyhow::ensure!(
                r.ok > 0 && r.failed == 0,
                "{}: {} ok, {} failed",
                r.name,
                r.ok,
                r.failed
            );
        }
        for (name, d) in &drains {
            anyhow::ensure!(d.delivered > 0, "{name}: the queue delivered nothing");
        }
        println!("smoke: every target served the load");
        // And the drain mode, on a small backlog.
        drain_backlog(&[], &o, true).await?;
    }
    Ok(())
}

/// The counting upstream (this benchmark in its `upstream` mode) on a free port.
fn counting_upstream(me: &std::path::Path) -> AnyResult<(u16, Proc)> {
    let port = free_port()?;
    let proc = spawn(Command::new(me).args(["upstream", &port.to_string()]), port)?;
    Ok((port, proc))
}

/// A `redis-server` of the benchmark's own on `port` (no persistence), once it listens;
/// `None` when none is installed (the Redis rows are skipped).
fn redis_server(port: u16) -> AnyResult<Option<Proc>> {
    let spawned = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .map(Proc);
    match spawned {
        Ok(r) => {
            wait_listening(port)?;
            Ok(Some(r))
        }
        Err(_) => {
            eprintln!("redis-server not found: the Redis rows are skipped");
            Ok(None)
        }
    }
}

/// `--name value` from the drain mode's arguments, parsed, or `default`.
fn drain_arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Stores `n` events of `body` bytes for the `stripe` route's queue, from 64
/// concurrent callers (a full disk write queue is waited out).
async fn fill(store: &hookgate::store::Store, n: u64, body: usize) -> AnyResult<()> {
    use hookgate::store::{Envelope, QueueRef, QueueStore as _, StoredEvent};
    let payload = Bytes::from(vec![b'x'; body]);
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut joins = Vec::new();
    for _ in 0..64 {
        let (store, next, payload) = (store.clone(), next.clone(), payload.clone());
        joins.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                let ev = StoredEvent {
                    envelope: Envelope {
                        event_id: format!("evt_drain{i:0>20}"),
                        event_type: Some("invoice.paid".into()),
                        fingerprint: "3f2a9c0d1e4b5a6f".into(),
                        method: "POST".into(),
                        headers: vec![hookgate::store::StoredHeader {
                            name: "content-type".into(),
                            text: Some("application/json".into()),
                            base64: None,
                        }],
                        query: None,
                        peer: "127.0.0.1".into(),
                        received_at_ms: hookgate::queue::now_ms(),
                        trace: None,
                    },
                    body: payload.clone(),
                };
                let q = QueueRef::new("hookgate:", "stripe", "stripe");
                let mut wait = Duration::from_millis(1);
                while store
                    .enqueue(&q, &ev, Duration::from_secs(24 * 3600))
                    .await
                    .is_err()
                {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(100));
                }
            }
        }));
    }
    for j in joins {
        j.await??;
    }
    Ok(())
}

/// The `drain` mode: a stored backlog delivered by a gateway started on it, per store.
async fn drain_backlog(args: &[String], o: &Opts, smoke: bool) -> AnyResult<()> {
    let events: u64 = drain_arg(args, "--events", if smoke { 200 } else { 100_000 });
    let concurrency: usize = drain_arg(args, "--concurrency", 64);
    let me = std::env::current_exe()?;
    let hookgate_bin = PathBuf::from(env!("CARGO_BIN_EXE_hookgate"));
    let dir = std::env::temp_dir().join(format!("hookgate-drain-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (up_port, _up) = counting_upstream(&me)?;
    let redis_port = free_port()?;
    let redis = redis_server(redis_port)?;
    println!(
        "hookgate-bench drain: {events} stored events of {} B, concurrency = {concurrency}{}",
        o.body,
        if smoke { " (smoke)" } else { "" }
    );
    println!();
    println!("| store | events | stored in s | delivered in s | delivery rate /s | server CPU % |");
    println!("|---|---:|---:|---:|---:|---:|");
    let path = dir.join("drain.db");
    let mut stores = vec![(
        "disk",
        format!("backend = \"disk\"\npath = \"{}\"", path.display()),
    )];
    if redis.is_some() {
        stores.push((
            "redis",
            format!("backend = \"redis\"\nurl = \"redis://127.0.0.1:{redis_port}\""),
        ));
    }
    for (name, store_cfg) in stores {
        let store = match name {
            "disk" => hookgate::store::Store::Disk(hookgate::store::DiskStore::open(&path)?),
            _ => hookgate::store::Store::Redis(hookgate::store::RedisStore::new(
                &format!("redis://127.0.0.1:{redis_port}"),
                Duration::from_secs(5),
            )?),
        };
        let filled = Instant::now();
        fill(&store, events, o.body).await?;
        let stored_s = filled.elapsed().as_secs_f64();
        drop(store);
        // The disk store's writer lets go of the file once its last handle is gone.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = upstream_count(up_port).await?;
        let port = free_port()?;
        let cfg = dir.join(format!("drain-{name}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\n[store]\n{store_cfg}\n[[routes]]\nname = \"stripe\"\npath = \"/webhooks/stripe\"\nprovider = \"stripe\"\nsecrets = [\"whsec_bench\"]\nupstream = \"http://127.0.0.1:{up_port}/stripe\"\ndelivery = \"queue\"\nconcurrency = {concurrency}\n"
            ),
        )?;
        let started = Instant::now();
        let gw = spawn(
            Command::new(&hookgate_bin)
                .arg("serve")
                .arg("--config")
                .arg(&cfg),
            port,
        )?;
        let cpu0 = cpu_seconds(gw.0.id());
        let limit = Instant::now() + Duration::from_secs(300);
        let mut delivered = 0;
        while delivered < events && Instant::now() < limit {
            tokio::time::sleep(Duration::from_millis(20)).await;
            delivered = upstream_count(up_port).await? - before;
        }
        let seconds = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(gw.0.id())
            .zip(cpu0)
            .map_or("-".into(), |(b, a)| {
                format!("{:.0}", 100.0 * (b - a) / seconds)
            });
        drop(gw);
        println!(
            "| {name} | {delivered} | {stored_s:.1} | {seconds:.1} | {:.0} | {cpu} |",
            delivered as f64 / seconds
        );
        anyhow::ensure!(
            delivered >= events,
            "{name}: {delivered} of {events} delivered"
        );
    }
    drop(redis);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
