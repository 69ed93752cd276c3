//! A real `redis-server` for one test: started on a free port in a temporary
//! directory, stopped (and restartable on the same port) on demand, killed on drop.

use super::free_port;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private Redis server process.
pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// Append-only persistence with an fsync per write (survives SIGKILL).
    aof: bool,
    /// More `redis-server` arguments (`--replicaof`, `--maxmemory-policy`).
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server and waits until it answers PING.
    pub fn start() -> Self {
        Self::start_with_aof(false)
    }

    /// Starts a server; with `aof`, every write is appended and fsynced, so a restart
    /// (even after SIGKILL) keeps every key.
    pub fn start_with_aof(aof: bool) -> Self {
        Self::start_with_args(aof, &[])
    }

    /// Starts a server with more `redis-server` arguments.
    pub fn start_with_args(aof: bool, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut s = Self {
            port: free_port(),
            dir,
            child: None,
            aof,
            extra: extra.iter().map(|a| (*a).to_owned()).collect(),
        };
        s.spawn();
        s
    }

    /// Starts a server that loads this RDB file at start (a key space written before).
    pub fn start_from_rdb(rdb: &std::path::Path) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::copy(rdb, dir.path().join("dump.rdb")).expect("copy the RDB file");
        let mut s = Self {
            port: free_port(),
            dir,
            child: None,
            aof: false,
            extra: Vec::new(),
        };
        s.spawn();
        s
    }

    /// Starts a replica of `primary` and waits until it has synced: a probe key written
    /// on the primary is acknowledged by it (`WAIT`).
    pub fn start_replica_of(primary: &RedisServer) -> Self {
        let port = primary.port.to_string();
        let replica = Self::start_with_args(false, &["--replicaof", "127.0.0.1", &port]);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let _: () = primary.cmd(redis::cmd("SET").arg("replica-probe").arg("1"));
            let mut c = redis::Client::open(primary.url())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
                .expect("connect to test redis");
            let acked: i64 = redis::pipe()
                .cmd("SET")
                .arg("replica-probe")
                .arg("2")
                .ignore()
                .cmd("WAIT")
                .arg(1)
                .arg(200)
                .query::<(i64,)>(&mut c)
                .map(|(n,)| n)
                .unwrap_or(0);
            if acked >= 1 {
                return replica;
            }
            assert!(Instant::now() < deadline, "the replica never synced");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends a signal to the server (`STOP` freezes it, `CONT` resumes it).
    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &pid])
            .status()
            .expect("kill");
        assert!(ok.success(), "kill -{sig} {pid}");
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let aof: &[&str] = if self.aof {
            &["--appendonly", "yes", "--appendfsync", "always"]
        } else {
            &["--appendonly", "no"]
        };
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(aof)
            .args(&self.extra)
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is not installed: run tests/run, which installs it");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.ping() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "redis-server on port {} did not answer PING within 10 s",
            self.port
        );
    }

    /// True if the server answers PING.
    pub fn ping(&self) -> bool {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    /// Runs a command synchronously (for inspecting keys and TTLs).
    pub fn cmd<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        let mut c = redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .expect("connect to test redis");
        cmd.query(&mut c).expect("redis command")
    }

    /// Keeps the server busy for `ms` milliseconds (a script that spins): every other
    /// command waits, in order, and runs once it is done. Starts it on a thread of its
    /// own; join it to wait for the end.
    pub fn busy_for(&self, ms: u64) -> std::thread::JoinHandle<()> {
        let url = self.url();
        std::thread::spawn(move || {
            let mut c = redis::Client::open(url)
                .and_then(|c| c.get_connection())
                .expect("connect");
            let spin = "local s = redis.call('TIME') local t0 = s[1] * 1000000 + s[2] \
                while true do local n = redis.call('TIME') \
                if n[1] * 1000000 + n[2] - t0 > tonumber(ARGV[1]) * 1000 then return 1 end end";
            let _: i64 = redis::cmd("EVAL")
                .arg(spin)
                .arg(0)
                .arg(ms)
                .query(&mut c)
                .expect("spin");
        })
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port (empty: it keeps nothing on disk).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A private Redis Cluster: three primaries and three replicas on free ports, created
/// with `redis-cli --cluster create`, killed on drop.
pub struct RedisCluster {
    pub ports: Vec<u16>,
    _dir: tempfile::TempDir,
    children: Vec<Option<Child>>,
}

impl RedisCluster {
    /// Starts six nodes and forms the cluster; waits until it reports `cluster_state:ok`.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let ports: Vec<u16> = (0..6).map(|_| super::free_port_with_bus()).collect();
        let mut children = Vec::new();
        for p in &ports {
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &p.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                // Only the tests change the topology (CLUSTER FAILOVER TAKEOVER): a node
                // stalled by a loaded machine must not be voted out and replaced behind
                // their back, and a replica starts its first sync at once.
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
                .args(["--cluster-replica-no-failover", "yes"])
                .args(["--cluster-config-file", &format!("nodes-{p}.conf")])
                .arg("--dir")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server");
            children.push(Some(child));
        }
        let c = Self {
            ports,
            _dir: dir,
            children,
        };
        for p in &c.ports {
            c.wait_ping(*p);
        }
        let nodes: Vec<String> = c.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        c.wait_ok(&c.ports.clone());
        c.wait_replicas_in_sync();
        c
    }

    fn node_cmd<T: redis::FromRedisValue>(
        port: u16,
        cmd: &mut redis::Cmd,
    ) -> redis::RedisResult<T> {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}"))?
            .get_connection_with_timeout(Duration::from_secs(1))?;
        cmd.query(&mut c)
    }

    /// Waits until every primary's writes reach its replica: a replica reports its link
    /// up as soon as its first sync is loaded, but under load the primary may hold the
    /// stream back for a while after that, and a test that kills a primary in that
    /// window would find an empty replica. So a probe key is written on each primary and
    /// `WAIT` asks for its replica's acknowledgement, until it comes.
    fn wait_replicas_in_sync(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut primaries: Vec<u16> = Vec::new();
        while Instant::now() < deadline && primaries.len() < 3 {
            primaries = self
                .ports
                .iter()
                .copied()
                .filter(|p| {
                    Self::node_cmd::<String>(*p, redis::cmd("INFO").arg("replication")).is_ok_and(
                        |i| i.contains("role:master") && i.contains("connected_slaves:1"),
                    )
                })
                .collect();
            std::thread::sleep(Duration::from_millis(50));
        }
        for primary in primaries {
            let key = (0..)
                .map(|i| format!("hookgate-test:probe:{i}"))
                .find(|k| self.primary_of_via(k, primary) == primary)
                .expect("a key on every primary");
            loop {
                let acked: i64 = redis::Client::open(format!("redis://127.0.0.1:{primary}"))
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                    .and_then(|mut c| {
                        redis::cmd("SET").arg(&key).arg("1").query::<()>(&mut c)?;
                        redis::cmd("WAIT").arg(1).arg(500).query(&mut c)
                    })
                    .unwrap_or(0);
                if acked >= 1 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the replica of {primary} acknowledged nothing within 30 s:\n{}",
                    self.describe()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Every node's view of the cluster and of its replication, for a failure message.
    fn describe(&self) -> String {
        self.ports
            .iter()
            .map(|p| {
                let nodes = Self::node_cmd::<String>(*p, redis::cmd("CLUSTER").arg("NODES"))
                    .unwrap_or_else(|e| e.to_string());
                let repl = Self::node_cmd::<String>(*p, redis::cmd("INFO").arg("replication"))
                    .unwrap_or_else(|e| e.to_string());
                format!("--- node {p}\n{nodes}\n{repl}")
            })
            .collect()
    }

    fn wait_ping(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let ok = redis::Client::open(format!("redis://127.0.0.1:{port}"))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                .is_ok();
            if ok {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("cluster node {port} did not start");
    }

    /// Waits until every listed node reports a healthy cluster with all slots served.
    pub fn wait_ok(&self, ports: &[u16]) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let all = ports.iter().all(|p| {
                redis::Client::open(format!("redis://127.0.0.1:{p}"))
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                    .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c))
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            });
            if all {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the cluster did not become ok");
    }

    /// `redis://127.0.0.1:<port>` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }
}

impl RedisCluster {
    /// Waits until the replica of the primary serving `key` holds `key` with a value
    /// starting with `prefix` (replication is asynchronous). The primary and its replica
    /// are looked up again on every try.
    pub fn wait_replicated(&self, key: &str, prefix: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(replica) = self.replica_serving(key) {
                let v: Option<String> = redis::Client::open(format!("redis://127.0.0.1:{replica}"))
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                    .and_then(|mut c| {
                        redis::cmd("READONLY").query::<()>(&mut c)?;
                        redis::cmd("GET").arg(key).query(&mut c)
                    })
                    .unwrap_or(None);
                if v.is_some_and(|v| v.starts_with(prefix)) {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{key} never reached the replica:\n{}", self.describe());
    }

    /// The port of a replica of the primary that serves `key`.
    fn replica_serving(&self, key: &str) -> Option<u16> {
        self.replica_of(self.primary_of(key))
    }

    /// The node whose replication link names `primary`'s port (it need not be alive).
    fn replica_of(&self, primary: u16) -> Option<u16> {
        self.ports
            .iter()
            .copied()
            .filter(|p| *p != primary)
            .find(|p| {
                Self::node_cmd::<String>(*p, redis::cmd("INFO").arg("replication")).is_ok_and(|i| {
                    i.lines()
                        .any(|l| l.trim() == format!("master_port:{primary}"))
                })
            })
    }

    /// Promotes the replica of the (killed) primary on `dead` with
    /// `CLUSTER FAILOVER TAKEOVER` — what an operator or the cluster's own election
    /// does — and waits until it serves `key`'s slot.
    pub fn wait_failover(&self, key: &str, dead: u16) -> u16 {
        let alive: Vec<u16> = self.ports.iter().copied().filter(|p| *p != dead).collect();
        let replica = self
            .replica_of(dead)
            .unwrap_or_else(|| panic!("no replica of {dead}:\n{}", self.describe()));
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut asked = None::<Instant>;
        while Instant::now() < deadline {
            // Ask (again, every five seconds, in case a loaded node dropped the request).
            if asked.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
                let _ = Self::node_cmd::<String>(
                    replica,
                    redis::cmd("CLUSTER").arg("FAILOVER").arg("TAKEOVER"),
                );
                asked = Some(Instant::now());
            }
            let p = self.primary_of_via(key, alive[0]);
            if p != dead && p != 0 {
                return p;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("no failover within 30 s:\n{}", self.describe());
    }

    /// Moves `slots` slots from the primary serving slot 0 to the primary serving slot
    /// 16383 with `redis-cli --cluster reshard` (keys migrate with them); returns the
    /// number of slots the target primary gained.
    pub fn reshard(&self, slots: u16) -> usize {
        let count = |port: u16| -> usize {
            Self::node_cmd::<String>(port, redis::cmd("CLUSTER").arg("NODES"))
                .ok()
                .and_then(|n| {
                    n.lines().find(|l| l.contains("myself")).map(|l| {
                        l.split(' ')
                            .skip(8)
                            .map(|r| match r.split_once('-') {
                                Some((a, b)) => {
                                    b.parse::<usize>().unwrap_or(0) + 1
                                        - a.parse::<usize>().unwrap_or(0)
                                }
                                None => 1,
                            })
                            .sum()
                    })
                })
                .unwrap_or(0)
        };
        let (from, to) = (self.primary_of_slot(0), self.primary_of_slot(16383));
        let id = |port: u16| -> String {
            Self::node_cmd(port, redis::cmd("CLUSTER").arg("MYID")).expect("node id")
        };
        let before = count(to);
        let out = Command::new("redis-cli")
            .args(["--cluster", "reshard", &format!("127.0.0.1:{from}")])
            .args(["--cluster-from", &id(from), "--cluster-to", &id(to)])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster reshard");
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        count(to) - before
    }

    fn primary_of_slot(&self, slot: i64) -> u16 {
        self.owner_of_slot(slot, self.ports[0])
    }

    /// The port of the primary that serves `key`'s slot.
    pub fn primary_of(&self, key: &str) -> u16 {
        self.primary_of_via(key, self.ports[0])
    }

    fn primary_of_via(&self, key: &str, via: u16) -> u16 {
        let slot: i64 =
            Self::node_cmd(via, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).expect("keyslot");
        self.owner_of_slot(slot, via)
    }

    /// The port of the primary serving `slot`, as the node on `via` sees it.
    fn owner_of_slot(&self, slot: i64, via: u16) -> u16 {
        let slots: redis::Value =
            Self::node_cmd(via, redis::cmd("CLUSTER").arg("SLOTS")).expect("slots");
        let num = |v: &redis::Value| if let redis::Value::Int(n) = v { *n } else { -1 };
        if let redis::Value::Array(ranges) = slots {
            for r in ranges {
                if let redis::Value::Array(parts) = r
                    && parts.len() >= 3
                    && num(&parts[0]) <= slot
                    && slot <= num(&parts[1])
                    && let redis::Value::Array(node) = &parts[2]
                {
                    return u16::try_from(num(&node[1])).unwrap_or(0);
                }
            }
        }
        panic!("no primary for slot {slot}");
    }

    /// SIGKILLs the node on `port`.
    pub fn kill(&mut self, port: u16) {
        if let Some(i) = self.ports.iter().position(|p| *p == port)
            && let Some(mut c) = self.children[i].take()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for c in self.children.iter_mut().filter_map(Option::take) {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
