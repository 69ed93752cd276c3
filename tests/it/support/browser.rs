//! A real browser for the inspector page's tests: headless Chromium driven over
//! WebDriver (W3C JSON over HTTP) by chromedriver, both Debian's (`chromium`,
//! `chromium-driver`; `tests/run` installs them). Each [`Browser`] starts its own
//! chromedriver on a free port and its own Chromium with a fresh profile, and ends both
//! when dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use super::free_port;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long a wait for the page may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// One headless Chromium and the chromedriver that drives it.
#[derive(Debug)]
pub struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>/session/<id>`.
    session: String,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A browser whose window is `width` × `height` CSS pixels.
    pub async fn start(width: u32, height: u32) -> Self {
        for bin in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(bin).exists(),
                "{bin} is missing: the inspector's tests drive Debian's chromium and \
                 chromium-driver (tests/run installs them with apt-get)"
            );
        }
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("an HTTP client");
        let base = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir().expect("a profile directory");
        let mut browser = Self {
            http,
            session: String::new(),
            driver,
            _profile: profile,
        };
        // chromedriver answers /status once it listens.
        let mut ready = false;
        for _ in 0..200 {
            if let Ok(r) = browser.http.get(format!("{base}/status")).send().await
                && let Ok(text) = r.text().await
                && let Ok(v) = serde_json::from_str::<Value>(&text)
                && v["value"]["ready"] == true
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(ready, "chromedriver did not start on port {port}");
        // Without the background-networking flags, Chromium reaches out to its
        // vendor's services, which a closed network refuses (slowly).
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--hide-scrollbars".to_owned(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", browser._profile.path().display()),
        ];
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
        }}});
        let v = browser
            .call("POST", &format!("{base}/session"), Some(caps))
            .await;
        let id = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_owned();
        browser.session = format!("{base}/session/{id}");
        browser
    }

    /// One WebDriver command; its `value`, or a panic naming the error.
    async fn call(&self, method: &str, url: &str, body: Option<Value>) -> Value {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut req = self.http.request(method, url);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.expect("chromedriver answers");
        let status = resp.status();
        let text = resp.text().await.expect("chromedriver's answer");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!("chromedriver answered {status} without JSON ({e}): {text}")
        });
        assert!(
            status.is_success(),
            "WebDriver {url}: {status}: {}",
            v["value"]
        );
        v["value"].clone()
    }

    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("{}{path}", self.session), body)
            .await
    }

    /// Opens a URL.
    pub async fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })))
            .await;
    }

    /// Runs a script in the page (as a function body: `return …`) with `args`.
    pub async fn script(&self, script: &str, args: Value) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// The rendered text of the first element `css` matches, if any and shown.
    pub async fn text(&self, css: &str) -> Option<String> {
        let v = self
            .script(
                "const e = document.querySelector(arguments[0]); \
                 return e && e.offsetParent !== null ? e.innerText : null;",
                json!([css]),
            )
            .await;
        v.as_str().map(str::to_owned)
    }

    /// Waits until the element `css` matches is shown with text containing `needle`;
    /// its text. Fails the test with the page's text after [`PATIENCE`].
    pub async fn wait_text(&self, css: &str, needle: &str) -> String {
        self.wait_text_for(css, needle, PATIENCE).await
    }

    /// [`wait_text`](Self::wait_text) with a limit of its own.
    pub async fn wait_text_for(&self, css: &str, needle: &str, limit: Duration) -> String {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(t) = self.text(css).await
                && t.contains(needle)
            {
                return t;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "{css:?} did not show {needle:?} within {limit:?}; the page shows:\n{}",
                    self.page_text().await
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `script` (a function body) returns `true`; fails the test with the
    /// page's text, naming `what`, after [`PATIENCE`].
    pub async fn wait_true(&self, script: &str, args: Value, what: &str) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if self.script(script, args.clone()).await == Value::Bool(true) {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "{what}: not within {PATIENCE:?}; the page shows:\n{}",
                    self.page_text().await
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The whole page's rendered text.
    pub async fn page_text(&self) -> String {
        self.script("return document.body.innerText;", json!([]))
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The WebDriver reference of the first element `css` matches.
    async fn element(&self, css: &str) -> String {
        let v = self
            .command(
                "POST",
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await;
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css:?}"))
            .to_owned()
    }

    /// Clicks the element `css` matches, as a user would (WebDriver's element click:
    /// scrolled into view, refused if covered or hidden).
    pub async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.command("POST", &format!("/element/{id}/click"), Some(json!({})))
            .await;
    }

    /// Empties the field `css` matches and types `text` into it.
    pub async fn fill(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.command("POST", &format!("/element/{id}/clear"), Some(json!({})))
            .await;
        self.command(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Presses keys on whatever has the focus (WebDriver key codes: `\u{E004}` is Tab,
    /// `\u{E007}` Enter).
    pub async fn keys(&self, keys: &str) {
        let actions: Vec<Value> = keys
            .chars()
            .flat_map(|c| {
                let k = c.to_string();
                [
                    json!({ "type": "keyDown", "value": k }),
                    json!({ "type": "keyUp", "value": k }),
                ]
            })
            .collect();
        self.command(
            "POST",
            "/actions",
            Some(json!({ "actions": [{ "type": "key", "id": "keyboard", "actions": actions }] })),
        )
        .await;
    }

    /// Resizes the window (CSS pixels, as the page sees them).
    pub async fn resize(&self, width: u32, height: u32) {
        self.command(
            "POST",
            "/window/rect",
            Some(json!({ "width": width, "height": height })),
        )
        .await;
    }

    /// Saves what the window shows as a PNG.
    pub async fn screenshot(&self, path: &Path) {
        let v = self.command("GET", "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("a base64 screenshot"))
            .expect("base64");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        std::fs::write(path, png).expect("write the screenshot");
    }
}

impl Browser {
    /// Saves the whole page, top to bottom, at the window's width; the window is
    /// given back its size after.
    pub async fn full_page_screenshot(&self, path: &Path) {
        let size = self
            .script(
                "window.scrollTo(0, 0); return [window.innerWidth, window.innerHeight, \
                 document.documentElement.scrollHeight, window.outerWidth - window.innerWidth, \
                 window.outerHeight - window.innerHeight];",
                json!([]),
            )
            .await;
        let n = |i: usize| u32::try_from(size[i].as_u64().unwrap_or(0)).unwrap_or(0);
        let (w, h, full, dw, dh) = (n(0), n(1), n(2), n(3), n(4));
        self.resize(w + dw, full.max(h) + dh).await;
        self.screenshot(path).await;
        self.resize(w + dw, h + dh).await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session closes Chromium; then chromedriver goes. A plain request
        // on a blocking socket: this runs outside any runtime, or inside one that may
        // be shutting down.
        if let Some((host, path)) = self
            .session
            .strip_prefix("http://")
            .and_then(|rest| rest.split_once('/'))
            && let Ok(mut s) = std::net::TcpStream::connect(host)
        {
            use std::io::{Read as _, Write as _};
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                s,
                "DELETE /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
