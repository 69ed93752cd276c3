//! Test support: a real Redis, PostgreSQL, NATS and RabbitMQ, a stub upstream, an
//! OTLP collector, an in-process gateway, and a client that sends real signed HTTP
//! requests.

pub mod browser;
pub mod nats;
pub mod otlp;
pub mod postgres;
pub mod rabbitmq;
pub mod redis;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use hookgate::config::{self, Config};

pub use self::nats::NatsServer;
pub use self::postgres::PostgresServer;
pub use self::rabbitmq::RabbitServer;
pub use self::redis::RedisServer;
pub use hookgate::testing::{Gateway as TestGateway, Recorder as Upstream, Reply, client, send};

/// Parses config text as if it were `test.toml`, with no environment variables.
pub fn parse_config(text: &str) -> Config {
    match config::parse(text, Path::new("test.toml"), &|_: &str| None) {
        Ok(c) => c,
        Err(e) => panic!("test config invalid:\n{e}\n---\n{text}"),
    }
}

/// POSTs a request.
pub async fn post(url: &str, headers: &[(String, String)], body: Vec<u8>) -> Reply {
    send("POST", url, headers, body).await
}

/// The `[store]` table for the memory store or a test Redis.
pub fn store_toml(redis: Option<&RedisServer>, extra: &str) -> String {
    match redis {
        None => format!("[store]\nbackend = \"memory\"\n{extra}\n"),
        Some(r) => format!(
            "[store]\nbackend = \"redis\"\nurl = \"{}\"\n{extra}\n",
            r.url()
        ),
    }
}

/// A config with one Stripe route (`stripe`, secret `whsec_test`) to `upstream`.
pub fn stripe_config(upstream: &Upstream, store: &str, route_extra: &str) -> String {
    format!(
        r#"{store}
[[routes]]
name = "stripe"
path = "/webhooks/stripe"
provider = "stripe"
secrets = ["whsec_test"]
upstream = "{}"
{route_extra}
"#,
        upstream.url("/hooks/stripe")
    )
}

/// A Stripe event body with this ID.
pub fn stripe_body(id: &str) -> String {
    format!(
        r#"{{"id":"{id}","object":"event","type":"payment_intent.succeeded","data":{{"object":{{"amount":2000}}}}}}"#
    )
}

/// Polls `f` until it is true or `limit` passes.
pub async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// Writes raw bytes to the gateway and returns what it answers (up to 5 s).
pub async fn raw_http(addr: SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let _ = s.write_all(request).await;
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Ports handed out by [`free_port`] and [`free_port_with_bus`] in this test run.
static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

fn bindable(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A port on 127.0.0.1 with nothing listening, for a server a test starts itself
/// (redis-server, a gateway process). The kernel may give the same free port to two
/// binds in a row, so the ports handed out here are remembered and never handed out
/// twice in one test run: six cluster nodes, or two tests starting servers at once,
/// each get their own. They are taken below the kernel's range for outgoing
/// connections (32768 and up): a client that keeps reconnecting to a server stopped
/// for a restart could otherwise be given the server's own port as its local port
/// (connecting to itself) and keep the server from binding it again.
pub fn free_port() -> u16 {
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let port = rand::random_range(10_000..22_000);
        if !given.contains(&port) && bindable(port) {
            given.push(port);
            return port;
        }
    }
}

/// A free port whose Redis Cluster bus port (the port + 10000) is free too; both are
/// remembered, so no other server of this run is given the bus port.
pub fn free_port_with_bus() -> u16 {
    loop {
        let port = free_port();
        let Some(bus) = port.checked_add(10000) else {
            continue;
        };
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !given.contains(&bus) && bindable(bus) {
            given.push(bus);
            return port;
        }
    }
}

/// Where program `name` is: the first on `PATH`, else the first in one of the `also`
/// directories (the system's sbin directories, say, which a normal user's `PATH` may
/// lack).
pub fn find_program(name: &str, also: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(also.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Sends `sig` to the process group `child` leads (a server started with
/// `process_group(0)`, so its helpers get the signal too). A group that is gone already
/// is no error.
fn signal_group(child: &Child, sig: rustix::process::Signal) {
    let _ = rustix::process::kill_process_group(rustix::process::Pid::from_child(child), sig);
}

/// Kills the process group `child` leads (SIGKILL) and waits until every process in it
/// is gone: the leader is reaped here, and the others (a start script's server, a
/// server's workers) must have exited too, or a restart could find its port, its
/// shared memory or its name still taken. Processes that are gone but not yet reaped
/// (zombies) hold none of those, so they count as gone.
pub fn kill_group(mut child: Child) {
    let pgid = child.id();
    signal_group(&child, rustix::process::Signal::KILL);
    let _ = child.wait();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while group_alive(pgid) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// True if a process in process group `pgid` still has a live thread, going by `/proc`.
/// A killed process's main thread turns zombie while its other threads are still on
/// their way out, holding its sockets, so every thread is looked at.
fn group_alive(pgid: u32) -> bool {
    // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
    let fields = |stat: &str| -> Option<(String, u32)> {
        let (_, rest) = stat.rsplit_once(')')?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some(((*f.first()?).to_owned(), f.get(2)?.parse().ok()?))
    };
    let live = |state: &str| state != "Z" && state != "X";
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.filter_map(Result::ok).any(|p| {
        let stat = std::fs::read_to_string(p.path().join("stat")).unwrap_or_default();
        let Some((_, group)) = fields(&stat) else {
            return false;
        };
        group == pgid
            && std::fs::read_dir(p.path().join("task"))
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .any(|t| {
                    let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                    fields(&stat).is_some_and(|(state, _)| live(&state))
                })
    })
}

/// Sends `sig` to `child` alone.
pub fn signal_process(child: &Child, sig: rustix::process::Signal) {
    let _ = rustix::process::kill_process(rustix::process::Pid::from_child(child), sig);
}

/// Waits up to `limit` for `child` to exit; true if it did.
pub fn wait_exit(child: &mut Child, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if !matches!(child.try_wait(), Ok(None)) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `bytes` bytes of a server's log file, for a failure message.
pub fn log_tail(path: &Path, bytes: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let from = text.len().saturating_sub(bytes);
    format!(
        "--- {}:\n{}",
        path.display(),
        String::from_utf8_lossy(&text[from..])
    )
}
