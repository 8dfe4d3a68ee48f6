//! Whether a root can do its work: the checks behind `GET /readyz` and
//! `sandlog doctor`, one list for both, each with what it found and, when
//! it failed, the fix.
//!
//! Every check is cheap (a probe file, a `statvfs`, the head's row): an
//! orchestrator runs them every few seconds. None changes the log.

use std::path::Path;

use serde::Serialize;

use crate::engine::Engine;
use crate::engine::exec::Runtime;
pub use crate::engine::{DISK_FREE_MIN_DEFAULT, HealthOptions};
use sandlog_host::error::RuntimeError;

/// One check: its stable name, whether it passed, what it found, and what
/// to do when it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable name (`log_writable`, `runtimes`, `disk_space`, ...).
    pub name: &'static str,
    /// Whether it passed.
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// What to do about a failure (`None` when it passed).
    pub fix: Option<String>,
}

impl Check {
    fn pass(name: &'static str, detail: String) -> Check {
        Check {
            name,
            ok: true,
            detail,
            fix: None,
        }
    }

    fn fail(name: &'static str, detail: String, fix: String) -> Check {
        Check {
            name,
            ok: false,
            detail,
            fix: Some(fix),
        }
    }
}

/// Whether every check passed.
pub fn all_ok(checks: &[Check]) -> bool {
    checks.iter().all(|check| check.ok)
}

/// The check that stands for a root that does not open at all, so
/// `doctor` reports it in the same form as the others.
pub fn open_failed(root: &Path, error: &RuntimeError) -> Check {
    let fix = match error {
        RuntimeError::RootMissing(_) | RuntimeError::NotARoot { .. } => {
            format!(
                "create it with `sandlog --root {} init`, or pass the right --root",
                root.display()
            )
        }
        error if error.is_integrity() => {
            "the log is damaged or was replaced: see `sandlog verify` and docs/verifiable-log.md; \
             `sandlog init --reset-log` starts a new log only if losing the old one is intended"
                .to_owned()
        }
        _ => "fix what the error names, then run `sandlog doctor` again".to_owned(),
    };
    Check::fail("root_opens", format!("{}: {error}", root.display()), fix)
}

impl Engine {
    /// What [`Engine::health`] holds the root to from now on (a server's
    /// `--min-free`, say).
    pub fn set_health_options(&self, options: HealthOptions) {
        *self
            .health_options
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = options;
    }

    /// The readiness checks of this root: the log and the workspaces
    /// writable, the log readable at its head, the built-in runtimes
    /// present, and at least [`HealthOptions::disk_free_min`] bytes free
    /// (see [`Engine::set_health_options`]).
    pub fn health(&self) -> Vec<Check> {
        let options = *self
            .health_options
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let layout = &self.layout;
        let mut checks = vec![Check::pass(
            "root_opens",
            format!("{} opens", layout.root.display()),
        )];
        checks.push(log_writable(&layout.database, &layout.root));
        checks.push(dir_writable("workspaces_writable", &layout.workspaces));
        checks.push(match self.head() {
            Ok(head) => Check::pass(
                "log_readable",
                format!("the head is at position {}", head.position),
            ),
            Err(error) => Check::fail(
                "log_readable",
                format!("reading the head: {error}"),
                "run `sandlog verify`; an I/O error names the file to repair".to_owned(),
            ),
        });
        checks.push(self.runtimes_check());
        checks.push(disk_space(&layout.root, options.disk_free_min));
        checks
    }

    fn runtimes_check(&self) -> Check {
        let mut missing = Vec::new();
        let mut present = Vec::new();
        for runtime in [Runtime::Python, Runtime::JavaScript] {
            match self.find_runtime(&runtime) {
                Ok((_, path)) => present.push(format!("{} ({})", runtime.name(), path.display())),
                Err(error) => missing.push(error.to_string()),
            }
        }
        if missing.is_empty() {
            Check::pass("runtimes", format!("present: {}", present.join(", ")))
        } else {
            Check::fail(
                "runtimes",
                format!("missing: {}", missing.join("; ")),
                format!(
                    "run `sandlog runtimes install` (the pinned builds, into the per-user \
                     directory every root finds), or point {} at a directory holding \
                     python.wasm and quickjs.wasm",
                    sandlog_host::layout::RUNTIMES_DIR_ENV
                ),
            )
        }
    }
}

/// The log file opens for writing and its directory takes new files
/// (SQLite makes its `-wal`, `-shm` and journal files beside the log).
fn log_writable(database: &Path, dir: &Path) -> Check {
    const NAME: &str = "log_writable";
    if let Err(error) = std::fs::OpenOptions::new().write(true).open(database) {
        return Check::fail(
            NAME,
            format!("{} does not open for writing: {error}", database.display()),
            format!(
                "make {} writable by this user, or remount its filesystem read-write",
                database.display()
            ),
        );
    }
    match probe(dir) {
        Ok(()) => Check::pass(
            NAME,
            format!("{} and its directory are writable", database.display()),
        ),
        Err(error) => Check::fail(
            NAME,
            format!("cannot create files in {}: {error}", dir.display()),
            format!(
                "make {} writable by this user (SQLite keeps its -wal and -shm files beside \
                 the log), or remount its filesystem read-write",
                dir.display()
            ),
        ),
    }
}

fn dir_writable(name: &'static str, dir: &Path) -> Check {
    match probe(dir) {
        Ok(()) => Check::pass(name, format!("{} is writable", dir.display())),
        Err(error) => Check::fail(
            name,
            format!("cannot create files in {}: {error}", dir.display()),
            format!(
                "make {} writable by this user, or remount its filesystem read-write",
                dir.display()
            ),
        ),
    }
}

/// Creates and removes a file of its own in `dir`: what the directory's
/// permissions, attributes and mount allow this process, which mode bits
/// alone do not tell (root ignores them, a read-only mount does not show
/// in them).
fn probe(dir: &Path) -> std::io::Result<()> {
    let path = dir.join(format!(".sandlog-probe-{}", uuid::Uuid::new_v4()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)
}

fn disk_space(root: &Path, min: u64) -> Check {
    const NAME: &str = "disk_space";
    let human = sandlog_core::human::format_size;
    match rustix::fs::statvfs(root) {
        Ok(stat) => {
            let free = stat.f_bavail.saturating_mul(stat.f_frsize);
            let detail = format!(
                "{} free on the filesystem of {} (at least {} wanted)",
                human(free),
                root.display(),
                human(min)
            );
            if free >= min {
                Check::pass(NAME, detail)
            } else {
                Check::fail(
                    NAME,
                    detail,
                    "free space on that filesystem (`sandlog prune` removes old sessions, \
                     `sandlog gc` blobs no event names), or lower the threshold \
                     (`--min-free`)"
                        .to_owned(),
                )
            }
        }
        Err(error) => Check::fail(
            NAME,
            format!("statvfs {}: {error}", root.display()),
            "check that the root's filesystem is mounted".to_owned(),
        ),
    }
}
