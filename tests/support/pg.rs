//! A real PostgreSQL server for the tests and benches, and a fresh database
//! per test.
//!
//! * With `$SANDLOG_TEST_PG_URL` (a URL or `key=value` string of a role that
//!   may `CREATE DATABASE`), that server is used.
//! * Otherwise a throwaway cluster is started once per test process under
//!   `target/sandlog-pg/cluster-PID`: `initdb` (found on `PATH`, then in
//!   `/usr/lib/postgresql/*/bin`, then `/usr/local/bin`), `pg_ctl` with
//!   `listen_addresses=''` (a Unix socket only, no TCP). `initdb` refuses
//!   to run as root, so as root the cluster belongs to the `postgres` user
//!   (which the Debian package creates) and runs through `runuser`.
//! * The cluster is stopped and removed when the process exits, however it
//!   exits: a watchdog process holds the read end of a pipe whose write end
//!   only this process holds, and stops the cluster when it reads EOF. A
//!   cluster left behind anyway (the machine went down) is stopped and
//!   removed by the next run, which finds its owner's PID dead.
//! * Each test gets its own database (`CREATE DATABASE` with a unique
//!   name), so tests run in parallel on one server.
//!
//! No server is no skip: [`database`] returns an error saying why, and the
//! test fails with it.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// The environment variable naming an existing server to use.
pub const PG_URL_VARIABLE: &str = "SANDLOG_TEST_PG_URL";

/// The superuser of a throwaway cluster.
const CLUSTER_SUPERUSER: &str = "sandlog";

/// Longest Unix socket path the kernel takes (`sun_path` is 108 bytes with
/// its NUL); a socket directory deeper than this goes under `/tmp`.
const SOCKET_PATH_MAX: usize = 100;

/// How long `pg_ctl` waits for the server to start or stop, seconds.
const PG_CTL_TIMEOUT_SECONDS: &str = "60";

/// A server the tests can create databases on.
pub struct PgServer {
    /// Connection string without a database name.
    base: String,
    /// Whether it is an external server (databases are dropped after use).
    external: bool,
    /// The watchdog that stops a throwaway cluster at exit, and the write
    /// end of its pipe: kept, never written, closed only by the exit.
    _watchdog: Option<Mutex<(Child, ChildStdin)>>,
}

impl std::fmt::Debug for PgServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgServer")
            .field("base", &self.base)
            .field("external", &self.external)
            .finish_non_exhaustive()
    }
}

/// One test's database, dropped (on an external server) with this.
#[derive(Debug)]
pub struct PgDatabase {
    /// Its name.
    pub name: String,
    /// A connection string for it, as `PgEventStore::connect` takes.
    pub url: String,
    server: &'static PgServer,
}

impl PgDatabase {
    /// A plain client on this database as the server's superuser (or the
    /// external URL's role): the tamperer's and the bench's raw access.
    pub fn client(&self) -> Result<postgres::Client, String> {
        postgres::Client::connect(&self.url, postgres::NoTls)
            .map_err(|error| format!("connecting to test database {}: {error}", self.name))
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        if self.server.external
            && let Ok(mut admin) = self.server.admin()
        {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.name
            ));
        }
    }
}

impl PgServer {
    fn url_for(&self, database: &str) -> String {
        with_dbname(&self.base, database)
    }

    fn admin(&self) -> Result<postgres::Client, String> {
        postgres::Client::connect(&self.url_for("postgres"), postgres::NoTls)
            .map_err(|error| format!("connecting to the test server ({}): {error}", self.base))
    }
}

/// `url` with its database replaced by `database`, for a URL or a
/// `key=value` string (where a later key overrides an earlier one).
fn with_dbname(url: &str, database: &str) -> String {
    for scheme in ["postgresql://", "postgres://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            let (before_query, query) = match rest.split_once('?') {
                Some((before, query)) => (before, Some(query)),
                None => (rest, None),
            };
            let authority = before_query
                .split_once('/')
                .map_or(before_query, |(a, _)| a);
            return match query {
                Some(query) => format!("{scheme}{authority}/{database}?{query}"),
                None => format!("{scheme}{authority}/{database}"),
            };
        }
    }
    format!("{url} dbname={database}")
}

static SERVER: OnceLock<Result<PgServer, String>> = OnceLock::new();
static DATABASES: AtomicU64 = AtomicU64::new(0);

/// The test server, started on first use.
pub fn server() -> Result<&'static PgServer, String> {
    SERVER
        .get_or_init(|| match std::env::var(PG_URL_VARIABLE) {
            Ok(url) if !url.trim().is_empty() => Ok(PgServer {
                base: url,
                external: true,
                _watchdog: None,
            }),
            _ => start_cluster().map_err(|reason| {
                format!(
                    "no PostgreSQL server for the tests: {reason}. Install PostgreSQL \
                     (Debian: `apt-get install postgresql`, which `make test` does) or set \
                     ${PG_URL_VARIABLE} to a server where this role may CREATE DATABASE"
                )
            }),
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A fresh, empty database on the test server.
pub fn database() -> Result<PgDatabase, String> {
    let server = server()?;
    let name = format!(
        "sandlog_test_{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::SeqCst)
    );
    let mut admin = server.admin()?;
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .map_err(|error| format!("creating test database {name}: {error}"))?;
    Ok(PgDatabase {
        url: server.url_for(&name),
        name,
        server,
    })
}

/// Where PostgreSQL's server programs are.
fn bin_dir() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                return Ok(dir);
            }
        }
    }
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok().map(|entry| entry.path().join("bin")))
                .filter(|bin| bin.join("initdb").is_file())
                .collect()
        })
        .unwrap_or_default();
    // The newest version: directories are named by major version.
    debian.sort_by_key(|bin| {
        bin.parent()
            .and_then(Path::file_name)
            .and_then(|name| name.to_str())
            .and_then(|name| name.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(bin) = debian.pop() {
        return Ok(bin);
    }
    let local = PathBuf::from("/usr/local/bin");
    if local.join("initdb").is_file() {
        return Ok(local);
    }
    Err(
        "initdb was found neither on PATH, nor in /usr/lib/postgresql/*/bin, nor in /usr/local/bin"
            .into(),
    )
}

/// The Cargo target directory this test binary runs from.
fn target_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe =
        std::env::current_exe().map_err(|error| format!("finding this executable: {error}"))?;
    // target/<profile>/deps/<binary>
    exe.ancestors()
        .nth(3)
        .map(Path::to_owned)
        .ok_or_else(|| format!("{} is not inside a Cargo target directory", exe.display()))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .is_some_and(|uid| uid.trim() == "0")
}

/// Runs a PostgreSQL program, as `postgres` through `runuser` when root.
fn pg_command(bin: &Path, program: &str, as_postgres: bool) -> Command {
    if as_postgres {
        let mut command = Command::new("runuser");
        command
            .args(["-u", "postgres", "--"])
            .arg(bin.join(program));
        command
    } else {
        Command::new(bin.join(program))
    }
}

fn run(mut command: Command, what: &str) -> Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("{what}: cannot run it: {error}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

/// Stops and removes clusters whose owning test process is gone.
fn remove_stale(root: &Path, bin: &Path, as_postgres: bool) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix("cluster-"))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let data = entry.path().join("data");
        if data.join("postmaster.pid").exists() {
            let mut stop = pg_command(bin, "pg_ctl", as_postgres);
            stop.arg("-D")
                .arg(&data)
                .args(["-m", "immediate", "-w", "stop"]);
            if run(stop, "stopping a stale test cluster").is_err()
                && let Ok(text) = std::fs::read_to_string(data.join("postmaster.pid"))
                && let Some(server_pid) = text.lines().next()
            {
                let _ = Command::new("kill")
                    .args(["-KILL", server_pid.trim()])
                    .status();
            }
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

fn start_cluster() -> Result<PgServer, String> {
    let bin = bin_dir()?;
    let as_postgres = is_root();
    if as_postgres
        && !Command::new("id")
            .args(["-u", "postgres"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    {
        return Err(
            "running as root, and initdb refuses to: the cluster would run as the \
                    `postgres` user, which does not exist (Debian's postgresql package creates \
                    it; or `useradd --system postgres`)"
                .into(),
        );
    }
    let root = target_dir()?.join("sandlog-pg");
    std::fs::create_dir_all(&root)
        .map_err(|error| format!("creating {}: {error}", root.display()))?;
    remove_stale(&root, &bin, as_postgres);
    let dir = root.join(format!("cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("data");
    let mut socket = dir.join("socket");
    if socket.join(".s.PGSQL.5432").as_os_str().len() > SOCKET_PATH_MAX {
        socket = std::env::temp_dir().join(format!("sandlog-pg-{}", std::process::id()));
    }
    for path in [&dir, &data, &socket] {
        std::fs::create_dir_all(path)
            .map_err(|error| format!("creating {}: {error}", path.display()))?;
    }
    if as_postgres {
        let mut chown = Command::new("chown");
        chown.args(["-R", "postgres:"]).arg(&dir).arg(&socket);
        run(
            chown,
            "giving the test cluster's directory to the postgres user (initdb refuses to run as root)",
        )?;
    }
    let mut initdb = pg_command(&bin, "initdb", as_postgres);
    initdb
        .arg("-D")
        .arg(&data)
        .args([
            "-U",
            CLUSTER_SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
        ])
        .args(["--no-instructions", "--no-sync"]);
    run(initdb, &format!("initdb in {}", data.display()))?;

    // The watchdog first: from here on, however this process ends, the
    // cluster is stopped and removed.
    let pg_ctl = bin.join("pg_ctl");
    let runuser = if as_postgres {
        "runuser -u postgres -- "
    } else {
        ""
    };
    let script = format!(
        "read _ignored; {runuser}'{}' -D '{}' -m immediate -w stop >/dev/null 2>&1; rm -rf '{}' '{}'",
        pg_ctl.display(),
        data.display(),
        dir.display(),
        socket.display()
    );
    let mut watchdog = {
        use std::os::unix::process::CommandExt;
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C to the test run must not
            // kill it before it has stopped the cluster.
            .process_group(0)
            .spawn()
            .map_err(|error| format!("starting the cluster's watchdog: {error}"))?
    };
    let pipe = watchdog
        .stdin
        .take()
        .ok_or("the watchdog has no stdin pipe")?;

    let mut start = pg_command(&bin, "pg_ctl", as_postgres);
    start
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(dir.join("server.log"))
        .args(["-w", "-t", PG_CTL_TIMEOUT_SECONDS, "-o"])
        .arg(format!(
            "-c listen_addresses='' -c unix_socket_directories='{}' -c max_connections=300",
            socket.display()
        ))
        .arg("start");
    if let Err(error) = run(start, "pg_ctl start") {
        let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
        return Err(format!("{error}\nserver log:\n{log}"));
    }
    Ok(PgServer {
        base: format!(
            "host={} port=5432 user={CLUSTER_SUPERUSER}",
            socket.display()
        ),
        external: false,
        _watchdog: Some(Mutex::new((watchdog, pipe))),
    })
}
