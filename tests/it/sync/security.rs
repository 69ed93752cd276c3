//! Attacks on the public listener's bounds, as the reviews of hookgate found them
//! (docs/security.md, "Threats found by review"): the connections and body bytes one
//! address may hold, and those of a trusted proxy. Each test sends the attack as real
//! HTTP to a real gateway (in process, or the real binary where the process's memory
//! is measured) and checks what the gateway answers and what the upstream saw.

use crate::support::{TestGateway, Upstream};

fn route(name: &str, provider: &str, secrets: &str, up: &Upstream, extra: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\npath = \"/{name}\"\nprovider = \"{provider}\"\nsecrets = {secrets}\nupstream = \"{}\"\n{extra}\n",
        up.url(&format!("/{name}"))
    )
}

/// A TCP connection to `addr` from a given loopback address (another client).
async fn connect_from(from: [u8; 4], addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(std::net::SocketAddr::from((from, 0)))
        .expect("bind a loopback address");
    socket.connect(addr).await.expect("connect")
}

/// Reads what arrives on a connection within two seconds.
async fn answer_on(stream: &mut tokio::net::TcpStream) -> String {
    answer_within(stream, std::time::Duration::from_secs(2)).await
}

/// Second review, 5: silent connections from one address were bounded only by
/// `max_connections` (and the process's file descriptors): ~1 100 from one address
/// blocked everyone. One address now holds at most `max_connections_per_client`;
/// another address is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share_of_connections() {
    use tokio::io::AsyncWriteExt as _;
    let up = Upstream::start().await;
    let config = format!(
        "[server]\nmax_connections_per_client = 10\nheader_read_timeout = \"10s\"\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    let addr: std::net::SocketAddr = gw
        .base_url()
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    let mut silent = Vec::new();
    for _ in 0..10 {
        silent.push(connect_from([127, 0, 0, 1], addr).await);
    }
    let mut over = connect_from([127, 0, 0, 1], addr).await;
    let answer = answer_on(&mut over).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "the 11th: {answer:?}");
    let mut other = connect_from([127, 0, 0, 2], addr).await;
    other
        .write_all(
            b"POST /stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
        )
        .await
        .expect("write");
    let answer = answer_on(&mut other).await;
    assert!(
        answer.starts_with("HTTP/1.1 401"),
        "another address is served: {answer:?}"
    );
    drop(silent);
    gw.stop().await;
}

/// Second review, 6: bodies being received were bounded per connection only
/// (`max_connections × max_body`): clients holding large bodies open took the
/// process's memory. Past `max_body_bytes_in_flight`, over every client, a body's next
/// bytes are answered 503 with `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_bytes_being_received_are_bounded_over_every_client() {
    use tokio::io::AsyncWriteExt as _;
    let up = Upstream::start().await;
    let config = format!(
        "[server]\nmax_body = \"1MiB\"\nmax_body_bytes_in_flight = \"2MiB\"\nbody_timeout = \"10s\"\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    let addr: std::net::SocketAddr = gw
        .base_url()
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    let head = b"POST /stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n";
    // Two clients each send 900 KiB of a 1 MiB body and hold it: 1.8 MiB held.
    let mut held = Vec::new();
    for from in [[127, 0, 0, 3], [127, 0, 0, 4]] {
        let mut s = connect_from(from, addr).await;
        s.write_all(head).await.expect("head");
        s.write_all(&[b'x'; 900 * 1024]).await.expect("some body");
        held.push(s);
    }
    // A third client's bytes find the budget held: 503, Retry-After.
    let mut third = connect_from([127, 0, 0, 5], addr).await;
    third.write_all(head).await.expect("head");
    let mut answer = String::new();
    for _ in 0..64 {
        // Its bytes go out until the gateway answers (and may close: a failed
        // write then is the answer arriving).
        if third.write_all(&[b'x'; 16 * 1024]).await.is_err() {
            break;
        }
        answer = answer_within(&mut third, std::time::Duration::from_millis(50)).await;
        if !answer.is_empty() {
            break;
        }
    }
    if answer.is_empty() {
        answer = answer_on(&mut third).await;
    }
    assert!(
        answer.starts_with("HTTP/1.1 503"),
        "past the bound: {answer:?}"
    );
    assert!(
        answer.to_ascii_lowercase().contains("retry-after"),
        "{answer:?}"
    );
    // Once they are gone, bodies are received again.
    drop(held);
    let later = async || {
        let mut later = connect_from([127, 0, 0, 6], addr).await;
        later
            .write_all(
                b"POST /stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
            )
            .await
            .expect("write");
        answer_on(&mut later).await
    };
    let mut answer = String::new();
    for _ in 0..50 {
        answer = later().await;
        if answer.starts_with("HTTP/1.1 401") {
            break;
        }
    }
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer:?}");
    gw.stop().await;
}

/// Reads what arrives on a connection within `limit`.
async fn answer_within(stream: &mut tokio::net::TcpStream, limit: std::time::Duration) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut buf = vec![0u8; 2048];
    let n = tokio::time::timeout(limit, stream.read(&mut buf))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The resident memory of a process, in bytes.
fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// A signed delivery sent from `from` (another client address) to the real binary.
async fn deliver_from(from: [u8; 4], url: &str, headers: &[(String, String)], body: &str) -> u16 {
    let client = reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from(from))
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("client");
    let mut req = client.post(url).body(body.to_owned());
    for (n, v) in headers {
        req = req.header(n.as_str(), v.as_str());
    }
    req.send().await.map_or(0, |r| r.status().as_u16())
}

/// Third review, 1: the body budget was reserved from the declared `Content-Length`,
/// so 64 request heads from one address (about 6 KB sent), each declaring 1 MiB, held
/// the whole 64 MiB and every other client's delivery got 503 for `body_timeout`.
/// Bytes are held as they arrive, one address holds at most its share (a sixteenth),
/// and small bodies keep a reserve: with one address, then four more, holding all they
/// can, signed deliveries from another address are forwarded, and the process's memory
/// stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_spend_the_body_budget_of_every_client() {
    use crate::process::binary::{Gateway, signed, write_config};
    use tokio::io::AsyncWriteExt as _;
    let up = Upstream::start().await;
    let port = crate::support::free_port();
    let dir = tempfile::tempdir().expect("dir");
    let cfg = write_config(
        &dir,
        &format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\nbody_timeout = \"60s\"\n[[routes]]\nname = \"stripe\"\npath = \"/s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nupstream = \"{}\"\n",
            up.url("/up")
        ),
    );
    let gw = Gateway::spawn(&cfg, port);
    let url = gw.url("/s");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut sent = 0;
    let mut deliver = async |n: usize| {
        for _ in 0..n {
            sent += 1;
            let body = crate::support::stripe_body(&format!("evt_budget_{sent}"));
            let status = deliver_from([127, 0, 0, 9], &url, &signed(&cfg, &body), &body).await;
            assert_eq!(status, 200, "delivery {sent} from another address");
        }
    };
    deliver(2).await;
    let before = rss(gw.child.id());

    // 64 heads declaring 1 MiB from one address, each followed by 200 KiB of its body.
    let head = b"POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n";
    let mut open = Vec::new();
    let mut hold = async |from: [u8; 4]| {
        for _ in 0..64 {
            let mut s = connect_from(from, addr).await;
            let _ = s.write_all(head).await;
            let _ = s.write_all(&[b'x'; 200 * 1024]).await;
            open.push(s);
        }
    };
    hold([127, 0, 0, 3]).await;
    deliver(10).await;
    // Four addresses more, each holding its share.
    for from in 4..8 {
        hold([127, 0, 0, from]).await;
    }
    deliver(10).await;
    let after = rss(gw.child.id());
    assert!(
        up.count() == 22,
        "every delivery from the other address was forwarded: {}",
        up.count()
    );
    let grown = after.saturating_sub(before);
    eprintln!(
        "RSS {} MiB before, {} MiB with 320 large bodies open from 5 addresses",
        before >> 20,
        after >> 20
    );
    assert!(
        grown < 96 << 20,
        "memory is bounded by the shares held: grew {} MiB",
        grown >> 20
    );
    drop(open);
}

/// Opens `n` connections from `from`, sends one signed delivery on each (keep-alive,
/// with `X-Forwarded-For: 198.51.100.x` naming a client behind a proxy), and returns
/// the status each was answered (0: refused before a request could be sent).
async fn deliveries_on_open_connections(gw: &TestGateway, from: [u8; 4], n: usize) -> Vec<u16> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr: std::net::SocketAddr = gw
        .base_url()
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    let mut open = Vec::new();
    for _ in 0..n {
        open.push(connect_from(from, addr).await);
    }
    let mut statuses = Vec::new();
    for (i, s) in open.iter_mut().enumerate() {
        let id = format!("evt_proxied_{}_{i}", from[3]);
        let body = crate::support::stripe_body(&id);
        let mut req = format!(
            "POST /stripe HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nX-Forwarded-For: 198.51.100.{}\r\n",
            body.len(),
            i % 250
        );
        for (name, value) in gw.sign("stripe", &body, &id) {
            req.push_str(&format!("{name}: {value}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(&body);
        if s.write_all(req.as_bytes()).await.is_err() {
            statuses.push(0);
            continue;
        }
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match tokio::time::timeout(std::time::Duration::from_secs(10), s.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        statuses.push(
            String::from_utf8_lossy(&answer)
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
        );
    }
    // Every connection stays open until all were answered.
    drop(open);
    statuses
}

/// Third review, 9: behind `trusted_proxies` every connection comes from the proxy's
/// addresses, so `max_connections_per_client` (256) refused a busy ingress with 503.
/// Connections from a trusted proxy are bounded by `max_connections` only, and the
/// per-client limits count the client the proxy names; an untrusted address is still
/// bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_is_bounded_by_max_connections_not_by_one_clients_share() {
    let up = Upstream::start().await;
    let config = format!(
        "[server]\ntrusted_proxies = [\"127.0.0.20/32\"]\nheader_read_timeout = \"60s\"\nidle_timeout = \"60s\"\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    let proxied = deliveries_on_open_connections(&gw, [127, 0, 0, 20], 300).await;
    let ok = proxied.iter().filter(|s| **s == 200).count();
    assert_eq!(ok, 300, "every delivery through the proxy: {proxied:?}");
    assert_eq!(up.count(), 300);
    let direct = deliveries_on_open_connections(&gw, [127, 0, 0, 21], 300).await;
    let ok = direct.iter().filter(|s| **s == 200).count();
    // Past its share a connection is answered 503 and closed at once (the request
    // sent on it may then find it reset).
    let refused = direct.iter().filter(|s| matches!(**s, 503 | 0)).count();
    assert_eq!(
        (ok, refused),
        (256, 44),
        "an untrusted address holds max_connections_per_client: {direct:?}"
    );
    gw.stop().await;
}
