//! Attacks on the admin listener, as the reviews of hookgate found them
//! (docs/security.md, "Threats found by review"): cross-site requests and rebound
//! names, silent connections, live streams, and a handed-over secret read under an
//! encoded route name. Each test sends the attack as real HTTP to a real gateway and
//! checks what the admin listener answers.

use crate::support::{TestGateway, Upstream, post};

fn route(name: &str, provider: &str, secrets: &str, up: &Upstream, extra: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\npath = \"/{name}\"\nprovider = \"{provider}\"\nsecrets = {secrets}\nupstream = \"{}\"\n{extra}\n",
        up.url(&format!("/{name}"))
    )
}

/// One request to the admin listener, raw: the status code.
async fn admin_status(gw: &TestGateway, method: &str, path: &str, headers: &[&str]) -> u16 {
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("Connection: close\r\nContent-Length: 0\r\n\r\n");
    let answer = crate::support::raw_http(gw.admin, req.as_bytes()).await;
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Second review, 3: without `admin_token`, a web page could use the admin listener
/// through an operator's browser — a cross-site form POSTing `/reload` or a purge, or a
/// name rebound to it reading `/handshakes/<route>`. Each is refused; the operator's own
/// requests (an IP address or `localhost`, a configured name, the command line's
/// `X-Requested-By`) go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_refuses_cross_site_requests_and_rebound_names() {
    let up = Upstream::start().await;
    let config = format!(
        "[server]\nadmin_hosts = [\"hookgate-admin.internal\"]\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookgate.toml");
    std::fs::write(&path, &config).expect("config");
    let gw = TestGateway::start_file(&path).await;
    let own = format!("Host: {}", gw.admin);
    let origin_own = format!("Origin: http://{}", gw.admin);
    let cases: [(&str, &str, Vec<&str>, u16); 10] = [
        // A simple POST, as a cross-site form sends it.
        ("POST", "/reload", vec![own.as_str()], 403),
        (
            "POST",
            "/events/stripe/purge?all_dead=true",
            vec![
                own.as_str(),
                "X-Requested-By: x",
                "Origin: http://evil.example",
            ],
            403,
        ),
        (
            "POST",
            "/reload",
            vec![
                own.as_str(),
                "X-Requested-By: x",
                "Sec-Fetch-Site: cross-site",
            ],
            403,
        ),
        (
            "POST",
            "/reload",
            vec![own.as_str(), "Origin: null", "X-Requested-By: x"],
            403,
        ),
        // DNS rebinding: the page's own name, resolving to the listener.
        (
            "GET",
            "/handshakes/stripe",
            vec!["Host: evil.example:9090"],
            421,
        ),
        ("GET", "/metrics", vec!["Host: evil.example"], 421),
        // The operator.
        (
            "POST",
            "/reload",
            vec![own.as_str(), "X-Requested-By: me"],
            200,
        ),
        (
            "POST",
            "/reload",
            vec![own.as_str(), "X-Requested-By: me", origin_own.as_str()],
            200,
        ),
        ("GET", "/metrics", vec!["Host: localhost:9090"], 200),
        (
            "GET",
            "/healthz",
            vec!["Host: hookgate-admin.internal:9090"],
            200,
        ),
    ];
    for (method, path, headers, want) in cases {
        assert_eq!(
            admin_status(&gw, method, path, &headers).await,
            want,
            "{method} {path} {headers:?}"
        );
    }
    gw.stop().await;
}

/// Second review, 4: silent connections to the admin listener were never closed and
/// needed no token, so they could use up the process's file descriptors. They are
/// closed after `header_read_timeout`, and at most 64 are held at once (16 from one
/// address; a few more for one probe each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_admin_connections_are_bounded_and_closed() {
    use tokio::io::AsyncReadExt as _;
    let up = Upstream::start().await;
    let config = format!(
        "[server]\nheader_read_timeout = \"1s\"\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    let mut silent = Vec::new();
    for _ in 0..64 {
        silent.push(
            tokio::net::TcpStream::connect(gw.admin)
                .await
                .expect("connect"),
        );
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // One more is answered 503 at once.
    let over = admin_status(&gw, "GET", "/healthz", &[&format!("Host: {}", gw.admin)]).await;
    assert_eq!(over, 503, "past the bound");
    // The silent ones are closed by the listener.
    for s in &mut silent {
        let mut buf = [0u8; 64];
        let closed = tokio::time::timeout(std::time::Duration::from_secs(5), s.read(&mut buf))
            .await
            .is_ok();
        assert!(closed, "a silent admin connection is closed");
    }
    drop(silent);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        admin_status(&gw, "GET", "/healthz", &[&format!("Host: {}", gw.admin)]).await,
        200
    );
    gw.stop().await;
}

/// One request to the admin listener from `from` (another client address): the
/// status code.
async fn admin_status_from(from: [u8; 4], admin: std::net::SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = connect_from(from, admin).await;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return 0;
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        s.read_to_end(&mut answer),
    )
    .await;
    String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Third review, 3: the admin listener's 64 connections were shared by every client
/// and taken before any token check: 64 silent connections from one address made
/// `/healthz` and `/readyz` answer 503 (40 of 40 probes), which makes a liveness probe
/// restart the pod. One address holds at most 16, and past the bound a connection is
/// still read for one probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_admin_connections_from_one_address_never_blind_the_probes() {
    let up = Upstream::start().await;
    let config = format!(
        "[server]\nheader_read_timeout = \"30s\"\n{}",
        route("stripe", "stripe", "[\"whsec_x\"]", &up, "")
    );
    let gw = TestGateway::start(&config).await;
    let mut silent = Vec::new();
    for _ in 0..64 {
        silent.push(connect_from([127, 0, 0, 3], gw.admin).await);
    }
    let mut answered = 0;
    for i in 0..40 {
        let path = if i % 2 == 0 { "/healthz" } else { "/readyz" };
        if admin_status_from([127, 0, 0, 4], gw.admin, path).await == 200 {
            answered += 1;
        }
    }
    assert_eq!(answered, 40, "probes from another address");
    // Three addresses more fill the listener (16 each): probes are still answered,
    // anything else is refused until a connection frees.
    for from in 5..8 {
        for _ in 0..16 {
            silent.push(connect_from([127, 0, 0, from], gw.admin).await);
        }
    }
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            admin_status_from([127, 0, 0, 9], gw.admin, path).await,
            200,
            "{path}"
        );
    }
    assert_eq!(
        admin_status_from([127, 0, 0, 9], gw.admin, "/overview").await,
        503,
        "past the bound, probes only"
    );
    drop(silent);
    gw.stop().await;
}

/// Third review, 3: open `/deliveries/stream` readers held admin connections
/// indefinitely. Live streams have a bound of their own (16; beyond, 503), and a
/// stream that sends no record for ten minutes ends
/// (`admin::deliveries::tests::a_quiet_live_stream_keeps_alive_then_ends_and_frees_its_slot`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_streams_have_a_bound_of_their_own() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let up = Upstream::start().await;
    let gw = TestGateway::start(&route("stripe", "stripe", "[\"whsec_x\"]", &up, "")).await;
    let open_stream = async |from: [u8; 4]| {
        let mut s = connect_from(from, gw.admin).await;
        let req = format!(
            "GET /deliveries/stream HTTP/1.1\r\nHost: {}\r\n\r\n",
            gw.admin
        );
        s.write_all(req.as_bytes()).await.expect("write");
        let mut buf = vec![0u8; 1024];
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), s.read(&mut buf))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0);
        (s, String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    let mut streams = Vec::new();
    for i in 0..16u8 {
        let (s, head) = open_stream([127, 0, 0, 10 + i / 8]).await;
        assert!(head.starts_with("HTTP/1.1 200"), "stream {i}: {head:?}");
        streams.push(s);
    }
    let (_s, head) = open_stream([127, 0, 0, 12]).await;
    assert!(head.starts_with("HTTP/1.1 503"), "the 17th: {head:?}");
    assert!(head.contains("live streams are open already"), "{head:?}");
    assert_eq!(
        admin_status_from([127, 0, 0, 12], gw.admin, "/healthz").await,
        200
    );
    // A closed stream frees its place.
    streams.pop();
    let mut reopened = false;
    for _ in 0..100 {
        let (s, head) = open_stream([127, 0, 0, 12]).await;
        if head.starts_with("HTTP/1.1 200") {
            reopened = true;
            streams.push(s);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(reopened, "a stream opens again once one closed");
    drop(streams);
    gw.stop().await;
}

/// A TCP connection to `addr` from a given loopback address (another client).
async fn connect_from(from: [u8; 4], addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(std::net::SocketAddr::from((from, 0)))
        .expect("bind a loopback address");
    socket.connect(addr).await.expect("connect")
}

/// A route name sent percent-encoded (as the command line encodes every character but
/// letters and digits): its handed-over secret is read and cleared under the encoded
/// name, each endpoint decoding it the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_over_secrets_are_found_under_an_encoded_route_name() {
    let up = Upstream::start().await;
    let cfg = format!(
        "[[routes]]\nname = \"asana-hooks.v1\"\npath = \"/asana\"\nprovider = \"asana\"\nsecrets = []\nupstream = \"{}\"\n",
        up.url("/asana")
    );
    let gw = TestGateway::start(&cfg).await;
    let url = gw.url("/asana");
    let r = post(
        &url,
        &[("x-hook-secret".into(), "first-secret".into())],
        Vec::new(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    let admin = gw.admin_url("/handshakes/asana%2Dhooks%2Ev1");
    let r = crate::support::send("GET", &admin, &[], Vec::new()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["route"].as_str(), Some("asana-hooks.v1"));
    assert_eq!(r.json()["secret"].as_str(), Some("first-secret"));
    // The name as sent, undecoded, is no route's.
    let raw = gw.admin_url("/handshakes/asana%252Dhooks%2Ev1");
    assert_eq!(
        crate::support::send("GET", &raw, &[], Vec::new())
            .await
            .status,
        404
    );

    let r = crate::support::send("DELETE", &admin, &[], Vec::new()).await;
    assert_eq!((r.status, r.json()["cleared"].as_bool()), (200, Some(true)));
    let r = crate::support::send("GET", &admin, &[], Vec::new()).await;
    assert_eq!(r.status, 404, "{}", r.body);
    gw.stop().await;
}
