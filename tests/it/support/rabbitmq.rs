//! A real RabbitMQ node for one test, private in every way that matters: its own node
//! name, AMQP port, Erlang distribution port and epmd (the Erlang port mapper, on a port
//! of its own, so the node never registers with the machine's epmd nor starts one that
//! outlives the test), with its database, logs, configuration, plugin list and Erlang
//! cookie (in its `HOME`) all in a temporary directory, and everything on 127.0.0.1.
//! No plugins, so no management listener. Stopped, killed and restarted on the same
//! ports and data on demand, killed on drop.
//!
//! A start takes 4 to 5 s on a two-core machine, a restart as long: nearly all of it is
//! the broker's own boot (loading its code, its boot steps), not its data. The AMQP
//! handshake, which the broker answers only once it has booted, says when it is ready.

use super::{free_port, kill_group, log_tail, signal_process, wait_exit};
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties, ExchangeKind, message::Delivery};
use rustix::process::Signal;
use std::fs::{self, OpenOptions};
use std::io::{Read as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a start may take: recovery after a kill, on a loaded machine.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A private RabbitMQ node and its own epmd.
pub struct RabbitServer {
    pub port: u16,
    /// The Erlang distribution port (for other nodes and the CLI tools).
    dist_port: u16,
    /// The port of this node's own epmd.
    epmd_port: u16,
    /// Holds the node's database (`mnesia/`), logs (`log/`), configuration files and
    /// Erlang cookie.
    dir: tempfile::TempDir,
    /// Outlives restarts of the node, so it stays on its port.
    epmd: Option<Child>,
    child: Option<Child>,
}

impl RabbitServer {
    /// Starts epmd and the node, and waits until the node answers the AMQP handshake.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let config = format!(
            "listeners.tcp.1 = 127.0.0.1:{port}\n\
             loopback_users.guest = true\n\
             log.console = false\n\
             log.file.level = info\n"
        );
        fs::write(dir.path().join("rabbitmq.conf"), config).expect("rabbitmq.conf");
        fs::write(dir.path().join("enabled_plugins"), "[].\n").expect("enabled_plugins");
        // Read in place of the machine's environment file, which names its own node.
        fs::write(dir.path().join("rabbitmq-env.conf"), "").expect("rabbitmq-env.conf");
        let mut s = Self {
            port,
            dist_port: free_port(),
            epmd_port: free_port(),
            dir,
            epmd: None,
            child: None,
        };
        s.start_epmd();
        s.spawn();
        s
    }

    /// `amqp://guest:guest@127.0.0.1:<port>/%2f` (the default user, allowed on loopback).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// The node's name, `hookgate-<port>@localhost`.
    pub fn node_name(&self) -> String {
        format!("hookgate-{}@localhost", self.port)
    }

    /// A new AMQP connection.
    pub async fn connect(&self) -> Connection {
        Connection::connect(&self.url(), ConnectionProperties::default())
            .await
            .expect("connect to the test RabbitMQ")
    }

    /// Declares a durable direct exchange and a durable (classic) queue bound to it
    /// with `routing_key`.
    pub async fn declare(&self, exchange: &str, queue: &str, routing_key: &str) {
        let conn = self.connect().await;
        let ch = conn.create_channel().await.expect("channel");
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        ch.exchange_declare(
            exchange.into(),
            ExchangeKind::Direct,
            durable,
            FieldTable::default(),
        )
        .await
        .expect("declare the exchange");
        ch.queue_declare(
            queue.into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await
        .expect("declare the queue");
        ch.queue_bind(
            queue.into(),
            exchange.into(),
            routing_key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind the queue");
        let _ = conn.close(200, "declared".into()).await;
    }

    /// Every message in `queue`, in order, with its properties (`message_id`, headers,
    /// delivery mode). The messages stay in the queue: they are read unacknowledged and
    /// go back when the channel closes (marked redelivered); this returns once the queue
    /// holds them again.
    pub async fn queue_messages(&self, queue: &str) -> Vec<Delivery> {
        let conn = self.connect().await;
        let ch = conn.create_channel().await.expect("channel");
        let mut messages = Vec::new();
        while let Some(m) = ch
            .basic_get(queue.into(), BasicGetOptions { no_ack: false })
            .await
            .expect("basic.get")
        {
            messages.push(m.delivery);
        }
        ch.close(200, "read".into())
            .await
            .expect("close the channel");
        let ch = conn.create_channel().await.expect("channel");
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let q = ch
                .queue_declare(queue.into(), passive, FieldTable::default())
                .await
                .expect("look at the queue");
            if q.message_count() as usize >= messages.len() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the messages read from {queue} did not go back within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = conn.close(200, "read".into()).await;
        messages
    }

    /// Stops the node cleanly (SIGTERM) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal_process(&child, Signal::TERM);
            wait_exit(&mut child, START_LIMIT);
            // Nothing left to kill after a clean stop; else the stop hung.
            kill_group(child);
        }
    }

    /// Kills the node (SIGKILL to it and its helpers), as a crash would, and waits for
    /// them to exit. Its epmd stays up, as the machine's would.
    pub fn kill(&mut self) {
        if let Some(child) = self.child.take() {
            kill_group(child);
        }
    }

    /// Starts it again on the same ports and data (stopping it first if it runs).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Both the script's output and the node's own log, for a failure message.
    fn logs(&self) -> String {
        let node_log = self.log("log").join(format!("{}.log", self.node_name()));
        format!(
            "{}\n{}",
            log_tail(&self.log("stdout.log"), 3000),
            log_tail(&node_log, 5000)
        )
    }

    fn start_epmd(&mut self) {
        let epmd = super::find_program("epmd", &[])
            .expect("epmd (Erlang) is not installed: run tests/run, which installs RabbitMQ");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log("epmd.log"))
            .expect("epmd.log");
        let mut child = Command::new(epmd)
            .args([
                "-address",
                "127.0.0.1",
                "-port",
                &self.epmd_port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("epmd.log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("epmd");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.epmd_port)).is_err() {
            if !matches!(child.try_wait(), Ok(None)) || Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "epmd on port {} did not start\n{}",
                    self.epmd_port,
                    log_tail(&self.log("epmd.log"), 2000)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.epmd = Some(child);
    }

    fn spawn(&mut self) {
        let script = server_script();
        let dir = self.dir.path();
        let path = std::env::var_os("PATH").unwrap_or_default();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log("stdout.log"))
            .expect("stdout.log");
        let mut child = Command::new(&script)
            // Nothing from the machine's environment: every setting is here.
            .env_clear()
            .env("PATH", &path)
            .env("LANG", "C.UTF-8")
            // The Erlang cookie is made and kept in HOME.
            .env("HOME", dir)
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("ERL_CRASH_DUMP", dir.join("erl_crash.dump"))
            .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
            .env("RABBITMQ_NODENAME", self.node_name())
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            // A directory that does not exist: none of the machine's conf.d files.
            .env("RABBITMQ_CONFIG_FILES", dir.join("conf.d"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir.join("advanced.config"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_PID_FILE", dir.join("rabbitmq.pid"))
            // Schedulers unbound: the cores are shared with the tests and the build.
            .env("RABBITMQ_SCHEDULER_BIND_TYPE", "u")
            // The node uses the epmd above and never starts one; its distribution
            // listens on loopback only.
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}",
            )
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("stdout.log"))
            .stderr(log)
            // Its own process group, so that `kill` reaches the Erlang VM behind
            // the start script.
            .process_group(0)
            .spawn()
            .expect("rabbitmq-server");
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if self.ready() {
                self.child = Some(child);
                return;
            }
            let exited = !matches!(child.try_wait(), Ok(None));
            if exited || Instant::now() >= deadline {
                kill_group(child);
                panic!(
                    "RabbitMQ on port {} did not start within {START_LIMIT:?}\n{}",
                    self.port,
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// True once the node answers the AMQP protocol header with a method frame
    /// (`connection.start`).
    fn ready(&self) -> bool {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut frame_type = [0u8; 1];
        s.write_all(b"AMQP\x00\x00\x09\x01").is_ok()
            && s.read_exact(&mut frame_type).is_ok()
            && frame_type[0] == 1
    }
}

impl Drop for RabbitServer {
    fn drop(&mut self) {
        self.kill();
        if let Some(mut epmd) = self.epmd.take() {
            let _ = epmd.kill();
            let _ = epmd.wait();
        }
    }
}

/// The `rabbitmq-server` start script. Debian's, on the sbin path, is a wrapper that
/// switches to the `rabbitmq` user, works in the system's directories and refuses other
/// users; the real script sits beside the wrapper's target.
fn server_script() -> PathBuf {
    let found = super::find_program("rabbitmq-server", &["/usr/local/sbin", "/usr/sbin"])
        .expect("rabbitmq-server is not installed: run tests/run, which installs it");
    let real = fs::canonicalize(&found).unwrap_or(found);
    if real.file_name().is_some_and(|n| n == "rabbitmq-server") {
        return real;
    }
    real.parent()
        .map(|dir| dir.join("rabbitmq-server"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{} is a wrapper, and there is no rabbitmq-server script beside it",
                real.display()
            )
        })
}
