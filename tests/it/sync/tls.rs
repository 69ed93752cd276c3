//! TLS on the public listener: HTTP/1.1 and HTTP/2 by ALPN, and a new certificate
//! picked up on reload without a restart.

use std::path::Path;
use std::process::Command;

use crate::support::{TestGateway, Upstream, client, stripe_body};

fn self_signed(dir: &Path, name: &str) -> (String, String) {
    let (cert, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    let status = Command::new("openssl")
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
            "subjectAltName=DNS:localhost",
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
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl is needed to make a test certificate");
    assert!(status.success());
    (cert.display().to_string(), key.display().to_string())
}

fn tls_client(cert_pem: &[u8], addr: std::net::SocketAddr, http2: bool) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem).expect("pem"))
        .resolve("localhost", addr)
        .tls_info(true);
    if !http2 {
        b = b.http1_only();
    }
    b.build().expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_http1_and_http2_and_reloads_its_certificate() {
    let dir = tempfile::tempdir().expect("dir");
    let (cert, key) = self_signed(dir.path(), "first");
    let up = Upstream::start().await;
    let path = dir.path().join("hookgate.toml");
    let live_cert = dir.path().join("live.crt");
    let live_key = dir.path().join("live.key");
    std::fs::copy(&cert, &live_cert).expect("copy");
    std::fs::copy(&key, &live_key).expect("copy");
    let cfg = format!(
        "[server.tls]\ncert = \"live.crt\"\nkey = \"live.key\"\n\n{}",
        crate::support::stripe_config(&up, "", "")
    );
    std::fs::write(&path, cfg).expect("write");
    let gw = TestGateway::start_file(&path).await;
    let pem = std::fs::read(&cert).expect("cert");
    let body = stripe_body("evt_tls");
    let headers = gw.sign("stripe", &body, "x");
    for (http2, want) in [
        (false, reqwest::Version::HTTP_11),
        (true, reqwest::Version::HTTP_2),
    ] {
        let mut req = tls_client(&pem, gw.addr, http2)
            .post(format!(
                "https://localhost:{}/webhooks/stripe",
                gw.addr.port()
            ))
            .body(body.clone());
        for (n, v) in &headers {
            req = req.header(n.as_str(), v.as_str());
        }
        let r = req.send().await.expect("https request");
        assert_eq!(r.version(), want);
        assert_eq!(r.status().as_u16(), 200);
    }
    assert_eq!(up.count(), 1, "the second copy was a duplicate");
    // Plain HTTP to a TLS listener gets nothing useful.
    assert!(
        client()
            .post(gw.url("/webhooks/stripe"))
            .body("x")
            .send()
            .await
            .is_err()
    );

    // A renewed certificate is served after a reload, without a restart.
    let (cert2, key2) = self_signed(dir.path(), "second");
    std::fs::copy(&cert2, &live_cert).expect("copy");
    std::fs::copy(&key2, &live_key).expect("copy");
    let r = client()
        .post(gw.admin_url("/reload"))
        .header("x-requested-by", "hookgate-tests")
        .send()
        .await
        .expect("reload");
    assert_eq!(r.status().as_u16(), 200);
    let pem2 = std::fs::read(&cert2).expect("cert");
    let r = tls_client(&pem2, gw.addr, false)
        .get(format!("https://localhost:{}/nope", gw.addr.port()))
        .send()
        .await
        .expect("trusted with the new certificate only");
    assert_eq!(r.status().as_u16(), 404);
    gw.stop().await;
}

#[test]
fn a_broken_certificate_is_a_config_error_naming_the_line() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("bad.crt"), "not a certificate").expect("write");
    let text = "[server.tls]\ncert = \"bad.crt\"\nkey = \"missing.key\"\n[[routes]]\nname = \"r\"\npath = \"/r\"\nprovider = \"github\"\nsecrets = [\"s\"]\nupstream = \"http://127.0.0.1:9/\"\n";
    let err = hookgate::config::parse(text, &dir.path().join("c.toml"), &|_: &str| None)
        .expect_err("refused")
        .to_string();
    assert!(err.contains("c.toml:1: server.tls:"), "{err}");
}
