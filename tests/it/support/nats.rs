//! A real NATS server with JetStream for one test: started on a free port of 127.0.0.1
//! with its JetStream store in a temporary directory (no monitoring port, no cluster);
//! stopped, killed and restarted on the same port and store on demand, killed on drop.

use super::{free_port, log_tail, signal_process, wait_exit};
use async_nats::jetstream::{self, message::StreamMessage, stream};
use rustix::process::Signal;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a start may take, store recovery on a loaded machine included.
const START_LIMIT: Duration = Duration::from_secs(20);

/// A private NATS server process with JetStream on.
pub struct NatsServer {
    pub port: u16,
    /// Holds `js/` (the JetStream store) and `server.log`.
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl NatsServer {
    /// Starts a server and waits until it accepts clients with JetStream on.
    pub fn start() -> Self {
        let mut s = Self {
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        };
        s.spawn();
        s
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// A JetStream context on a new client connection.
    pub async fn jetstream(&self) -> jetstream::Context {
        let client = async_nats::connect(self.url())
            .await
            .expect("connect to the test NATS");
        jetstream::new(client)
    }

    /// Creates a stream kept in files, taking `subjects`, which drops a message whose
    /// `Nats-Msg-Id` it saw within `duplicate_window` (acknowledged as a duplicate).
    pub async fn create_stream(
        &self,
        name: &str,
        subjects: &[&str],
        duplicate_window: Duration,
    ) -> stream::Info {
        let mut stream = self
            .jetstream()
            .await
            .create_stream(stream::Config {
                name: name.to_owned(),
                subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
                storage: stream::StorageType::File,
                duplicate_window,
                ..Default::default()
            })
            .await
            .expect("create the stream");
        stream.info().await.expect("stream info").clone()
    }

    /// Every message the stream holds, in sequence order, with its headers.
    pub async fn stream_messages(&self, name: &str) -> Vec<StreamMessage> {
        let mut stream = self
            .jetstream()
            .await
            .get_stream(name)
            .await
            .expect("get the stream");
        let state = stream.info().await.expect("stream info").state.clone();
        let mut messages = Vec::new();
        if state.messages == 0 {
            return messages;
        }
        for seq in state.first_sequence..=state.last_sequence {
            match stream.get_raw_message(seq).await {
                Ok(m) => messages.push(m),
                // A gap: the message was deleted.
                Err(e) if e.kind() == stream::RawMessageErrorKind::NoMessageFound => {}
                Err(e) => panic!("read message {seq} of stream {name}: {e}"),
            }
        }
        messages
    }

    /// Stops the server (SIGTERM: it closes its store cleanly) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal_process(&child, Signal::TERM);
            if !wait_exit(&mut child, START_LIMIT) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    /// Kills the server (SIGKILL), as a crash would, and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and store (stopping it first if it runs).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn spawn(&mut self) {
        let program = super::find_program("nats-server", &["/usr/local/sbin", "/usr/sbin"])
            .expect("nats-server is not installed: run tests/run, which installs it");
        let mut child = Command::new(program)
            .args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-n", &format!("hookgate-{}", self.port)])
            .arg("-sd")
            .arg(self.dir.path().join("js"))
            .arg("-l")
            .arg(self.log())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server");
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if self.ready() {
                self.child = Some(child);
                return;
            }
            let exited = !matches!(child.try_wait(), Ok(None));
            if exited || Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "nats-server on port {} did not start within {START_LIMIT:?}\n{}",
                    self.port,
                    log_tail(&self.log(), 4000)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// True once the server greets a client with an `INFO` that has JetStream on (it
    /// loads the store before it takes clients).
    fn ready(&self) -> bool {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut info = Vec::new();
        let mut buf = [0u8; 1024];
        while !info.ends_with(b"\r\n") {
            match s.read(&mut buf) {
                Ok(n) if n > 0 => info.extend_from_slice(&buf[..n]),
                _ => return false,
            }
        }
        let info = String::from_utf8_lossy(&info);
        info.starts_with("INFO ") && info.contains("\"jetstream\":true")
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
