//! A real PostgreSQL server for one test: its own data directory in a temporary
//! directory, listening on 127.0.0.1 on a free port and on a Unix socket in that
//! directory, with trust authentication and a database made for the test; stopped,
//! killed and restarted on the same port and data on demand, killed on drop.
//!
//! `initdb` runs once per PostgreSQL version and user, into a template kept in Cargo's
//! temporary directory for tests; each server starts from a copy of it, which is several
//! times faster than running `initdb` for every server. The server keeps `fsync` on, so
//! a crash test sees what a real one would.
//!
//! Neither `initdb` nor the server runs as root. When the tests run as root, both run as
//! an unprivileged user (`postgres` if there is one, else `nobody`), who owns the
//! server's directory.

use super::{free_port, kill_group, log_tail, signal_process, wait_exit};
use rustix::process::Signal;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The database each server has, and its superuser's name.
const DB: &str = "hookgate";

/// How long a start may take: crash recovery on a loaded two-core machine included.
const START_LIMIT: Duration = Duration::from_secs(30);

/// A private PostgreSQL server process.
pub struct PostgresServer {
    pub port: u16,
    /// Holds `data/` (the cluster), the Unix socket and `server.log`.
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl PostgresServer {
    /// Starts a server and waits until it accepts connections.
    pub fn start() -> Self {
        let install = install();
        let dir = tempfile::tempdir().expect("temp dir");
        if let Some(user) = &install.user {
            user.chown(dir.path());
        }
        let copy = Command::new("cp")
            .arg("-a")
            .arg(&install.template)
            .arg(dir.path().join("data"))
            .status()
            .expect("cp");
        assert!(copy.success(), "copying the PostgreSQL template failed");
        let mut s = Self {
            port: free_port(),
            dir,
            child: None,
        };
        s.spawn();
        s
    }

    /// `postgres://hookgate@127.0.0.1:<port>/hookgate`.
    pub fn url(&self) -> String {
        format!("postgres://{DB}@127.0.0.1:{}/{DB}", self.port)
    }

    /// The directory holding the server's Unix socket (`.s.PGSQL.<port>`).
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// A client connected over TCP, its connection driven by a spawned task.
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .expect("connect to the test PostgreSQL");
        tokio::spawn(async move {
            // Ends with an error when the server goes away; the client reports that.
            let _ = connection.await;
        });
        client
    }

    /// Stops the server with a fast shutdown (SIGINT: sessions are cut, everything
    /// committed is checkpointed) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal_process(&child, Signal::INT);
            wait_exit(&mut child, START_LIMIT);
            // Nothing left to kill after a clean stop; else the stop hung.
            kill_group(child);
        }
    }

    /// Kills the server and all its backends (SIGKILL), as a crash would, and waits for
    /// them to exit. The next start runs crash recovery.
    pub fn kill(&mut self) {
        if let Some(child) = self.child.take() {
            kill_group(child);
        }
    }

    /// Starts it again on the same port and data (stopping it first if it runs).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn spawn(&mut self) {
        let data = self.dir.path().join("data");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .expect("server.log");
        let mut child = install()
            .command("postgres")
            .arg("-D")
            .arg(&data)
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1"])
            // Small: many servers may run at once on a small machine.
            .args(["-c", "shared_buffers=16MB", "-c", "max_connections=40"])
            .args(["-c", "autovacuum=off", "-c", "jit=off"])
            .args(["-c", "logging_collector=off"])
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("server.log"))
            .stderr(log)
            // Its own process group, so that `kill` reaches every backend.
            .process_group(0)
            .spawn()
            .expect("postgres");
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if self.ready(&data, child.id()) {
                self.child = Some(child);
                return;
            }
            let exited = !matches!(child.try_wait(), Ok(None));
            if exited || Instant::now() >= deadline {
                kill_group(child);
                panic!(
                    "PostgreSQL on port {} did not start within {START_LIMIT:?}\n{}",
                    self.port,
                    log_tail(&self.log(), 4000)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// True once the server (`pid`) says it is ready in `postmaster.pid` (a killed
    /// server's file says so too, hence the pid) and takes a TCP connection.
    fn ready(&self, data: &Path, pid: u32) -> bool {
        let pid_file = fs::read_to_string(data.join("postmaster.pid")).unwrap_or_default();
        let lines: Vec<&str> = pid_file.lines().collect();
        let line = |i: usize, want: &str| lines.get(i).is_some_and(|l| l.trim() == want);
        line(0, &pid.to_string())
            && line(7, "ready")
            && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The PostgreSQL programs, who runs them, and the template cluster.
struct Install {
    /// The directory holding `initdb` and `postgres` (of the same version).
    bin: PathBuf,
    /// Set when the tests run as root.
    user: Option<RunAs>,
    template: PathBuf,
}

/// The unprivileged user the servers run as when the tests run as root.
struct RunAs {
    uid: u32,
    gid: u32,
}

impl RunAs {
    /// Looks a user up with `id`; `None` if there is no such user.
    fn lookup(name: &str) -> Option<Self> {
        let id = |flag: &str| -> Option<u32> {
            let out = Command::new("id").args([flag, name]).output().ok()?;
            if !out.status.success() {
                return None;
            }
            String::from_utf8_lossy(&out.stdout).trim().parse().ok()
        };
        Some(Self {
            uid: id("-u")?,
            gid: id("-g")?,
        })
    }

    fn chown(&self, path: &Path) {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid)).expect("chown");
    }
}

impl Install {
    /// A command running `program` from the PostgreSQL directory, as the unprivileged
    /// user when the tests run as root (`setpriv` execs it, so the child's pid is the
    /// program's).
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        match &self.user {
            None => Command::new(program),
            Some(user) => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid", &user.uid.to_string()])
                    .args(["--regid", &user.gid.to_string()])
                    .args(["--clear-groups", "--"])
                    .arg(program);
                c
            }
        }
    }
}

/// Finds PostgreSQL and makes the template once per test run.
fn install() -> &'static Install {
    static INSTALL: OnceLock<Install> = OnceLock::new();
    INSTALL.get_or_init(|| {
        let bin = bin_dir();
        let user = rustix::process::getuid().is_root().then(|| {
            RunAs::lookup("postgres")
                .or_else(|| RunAs::lookup("nobody"))
                .expect("the tests run as root, and there is neither a postgres nor a nobody user to run PostgreSQL as")
        });
        let mut install = Install {
            bin,
            user,
            template: PathBuf::new(),
        };
        install.template = template(&install);
        install
    })
}

/// The directory of `initdb`: on `PATH` (symbolic links followed, so that `postgres`
/// is taken from the same version), else the highest version's in Debian's directory
/// per PostgreSQL version, which is off `PATH`.
fn bin_dir() -> PathBuf {
    if let Some(initdb) = super::find_program("initdb", &[])
        && let Some(dir) = fs::canonicalize(&initdb)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        return dir;
    }
    let version = |p: &PathBuf| -> Vec<u32> {
        p.file_name()
            .and_then(|n| n.to_str())
            .map(|n| n.split('.').filter_map(|x| x.parse().ok()).collect())
            .unwrap_or_default()
    };
    fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("bin/initdb").is_file())
        .max_by_key(version)
        .map(|p| p.join("bin"))
        .expect("PostgreSQL's initdb is not installed: run tests/run, which installs it")
}

/// The template cluster for this PostgreSQL version and user: made with `initdb`, the
/// test database created in single-user mode, and kept in Cargo's temporary directory
/// for tests. It is built elsewhere and renamed into place, so that a test run never
/// sees half of one (two runs at once both build it; the first rename wins).
fn template(install: &Install) -> PathBuf {
    let version = install
        .command("postgres")
        .arg("--version")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("postgres --version");
    let version: String = String::from_utf8_lossy(&version.stdout)
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let owner = install
        .user
        .as_ref()
        .map_or_else(|| rustix::process::getuid().as_raw(), |u| u.uid);
    let name = format!("postgres-template-{version}-uid{owner}");
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join(&name);
    if cache.join("PG_VERSION").is_file() {
        return cache;
    }

    let work = tempfile::tempdir().expect("temp dir");
    if let Some(user) = &install.user {
        user.chown(work.path());
    }
    let data = work.path().join("data");
    let initdb = install
        .command("initdb")
        .arg("-D")
        .arg(&data)
        .args(["-U", DB, "--auth=trust", "-E", "UTF8", "--locale=C"])
        // The copies are what servers run on; the server itself keeps fsync on.
        .arg("--no-sync")
        .current_dir(work.path())
        .output()
        .expect("initdb");
    assert!(
        initdb.status.success(),
        "initdb failed:\n{}{}",
        String::from_utf8_lossy(&initdb.stdout),
        String::from_utf8_lossy(&initdb.stderr)
    );
    let mut single = install
        .command("postgres")
        .args(["--single", "-D"])
        .arg(&data)
        .arg("postgres")
        .current_dir(work.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("postgres --single");
    single
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("CREATE DATABASE {DB};\n").as_bytes())
        .expect("write to postgres --single");
    let out = single.wait_with_output().expect("postgres --single");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && !said.contains("ERROR"),
        "creating the test database failed:\n{said}"
    );

    fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).expect("Cargo's temporary directory");
    let staging = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}.partial-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    let copy = Command::new("cp")
        .arg("-a")
        .arg(&data)
        .arg(&staging)
        .status()
        .expect("cp");
    assert!(copy.success(), "copying the PostgreSQL template failed");
    if fs::rename(&staging, &cache).is_err() {
        // Another test run put its template there first.
        let _ = fs::remove_dir_all(&staging);
    }
    assert!(
        cache.join("PG_VERSION").is_file(),
        "no PostgreSQL template at {}",
        cache.display()
    );
    cache
}
