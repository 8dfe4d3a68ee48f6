//! `init`, `completions`, `man`, `export-metadata`, `stats`.

use std::path::Path;

use clap::CommandFactory;
use sandlog_runtime::projections::SessionStatus;
use sandlog_runtime::sandbox::ModuleOrigin;
use sandlog_runtime::{Engine, PreparedRuntime, Runtime, RuntimeError};
use serde_json::json;

use crate::args::Cli;
use crate::exit::CliError;
use crate::output::Output;

pub fn init(root: &Path, reset_log: bool, output: &Output) -> Result<u8, CliError> {
    let replaced = if reset_log {
        Engine::reset_log(root)?
    } else {
        None
    };
    // The first open appends the genesis event and completes the anchor;
    // on an anchored root whose log is gone it fails (exit 4). A node of a
    // shared log makes its root as it opens: its database is a replica
    // of the shared log, copied on open.
    let engine = if output.store.is_some() {
        super::open_with(root, true, output)?
    } else {
        let root = Engine::init(root)?;
        super::open(&root, output)?
    };
    let root = engine.layout().root.clone();
    let root = root.canonicalize().unwrap_or(root);
    // Compiled now, with a note on a terminal, so that the first `exec`
    // loads them in milliseconds. A runtime that is missing or does not
    // load leaves the root initialised; `exec` reports it again.
    let runtimes: Vec<RuntimeReady> = [Runtime::Python, Runtime::JavaScript]
        .iter()
        .map(|runtime| RuntimeReady {
            name: runtime.name(),
            result: engine.prepare_runtime(runtime),
        })
        .collect();
    let cache_dir = engine.cache_dir();
    if output.json {
        output.json(&json!({
            "root": crate::render::host_path_json(&root),
            "replaced_anchor": replaced.as_deref().map(crate::render::host_path_json),
            "cache_dir": crate::render::host_path_json(&cache_dir),
            "runtimes": runtimes.iter().map(RuntimeReady::json).collect::<Vec<_>>(),
        }))?;
    } else {
        if let Some(replaced) = &replaced {
            output.line(&format!(
                "kept the old anchor as {}",
                crate::render::host_path(replaced)
            ))?;
        }
        output.line(&format!("initialised {}", crate::render::host_path(&root)))?;
        for runtime in &runtimes {
            output.line(&runtime.human())?;
        }
        output.line(&format!(
            "precompiled runtimes are kept in {}, shared by every root",
            crate::render::host_path(&cache_dir)
        ))?;
    }
    Ok(0)
}

/// How making one runtime ready at `init` went.
struct RuntimeReady {
    name: String,
    result: Result<PreparedRuntime, RuntimeError>,
}

impl RuntimeReady {
    fn status(&self) -> &'static str {
        match &self.result {
            Ok(ready) if ready.origin == ModuleOrigin::Compiled => "compiled",
            Ok(_) => "cached",
            Err(RuntimeError::RuntimeMissing { .. }) => "missing",
            Err(_) => "failed",
        }
    }

    fn json(&self) -> serde_json::Value {
        match &self.result {
            Ok(ready) => json!({
                "runtime": self.name,
                "status": self.status(),
                "path": crate::render::host_path_json(&ready.path),
                "elapsed_ms": u64::try_from(ready.elapsed.as_millis()).unwrap_or(u64::MAX),
            }),
            Err(error) => json!({
                "runtime": self.name,
                "status": self.status(),
                "error": {"kind": error.kind(), "message": error.to_string()},
            }),
        }
    }

    fn human(&self) -> String {
        match &self.result {
            Ok(ready) if ready.origin == ModuleOrigin::Compiled => format!(
                "{}: compiled {} for this machine in {:.1} s",
                self.name,
                crate::render::host_path(&ready.path),
                ready.elapsed.as_secs_f64()
            ),
            Ok(ready) => format!(
                "{}: {} already compiled (loaded in {} ms)",
                self.name,
                crate::render::host_path(&ready.path),
                ready.elapsed.as_millis()
            ),
            Err(error) => format!(
                "{}: not ready: {}",
                self.name,
                crate::render::escape_for_terminal(&error.to_string())
            ),
        }
    }
}

pub fn completions(shell: clap_complete::Shell) -> Result<u8, CliError> {
    let mut command = Cli::command();
    // Generated into memory: clap_complete panics on a failed write, and a
    // closed pipe (`| head -1`) must end the command quietly.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "sandlog", &mut script);
    write_stdout(&script, "writing completions")?;
    Ok(0)
}

pub fn man() -> Result<u8, CliError> {
    let page = clap_mangen::Man::new(Cli::command());
    let mut roff = Vec::new();
    page.render(&mut roff).map_err(|source| CliError::Io {
        context: "rendering the man page".into(),
        source,
    })?;
    write_stdout(&roff, "writing the man page")?;
    Ok(0)
}

/// Writes `bytes` to stdout; a closed pipe is not an error.
fn write_stdout(bytes: &[u8], context: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|source| CliError::Io {
            context: context.into(),
            source,
        }),
    }
}

/// Writes one metadata file under `dir` without following a symlink at
/// `path`: a new file is created exclusively (`O_EXCL` fails on a symlink
/// too); with `force`, a temporary file is created exclusively and renamed
/// over `path` (a rename replaces a symlink, never its target).
fn write_metadata(dir: &Path, path: &Path, text: &str, force: bool) -> Result<(), CliError> {
    use std::io::Write;
    let io = |context: String| move |source| CliError::Io { context, source };
    if !force {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|source| {
                let context = if source.kind() == std::io::ErrorKind::AlreadyExists {
                    format!(
                        "refusing to overwrite {} (pass --force to replace it; a symlink is replaced, never followed)",
                        crate::render::host_path(path)
                    )
                } else {
                    format!("creating {}", crate::render::host_path(path))
                };
                CliError::Io { context, source }
            })?;
        file.write_all(text.as_bytes())
            .map_err(io(format!("writing {}", crate::render::host_path(path))))?;
        return Ok(());
    }
    let temporary = dir.join(format!(
        ".sandlog-export-{}.tmp",
        sandlog_runtime::core::SessionId::new_v4()
    ));
    let result = (|| -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        file.write_all(text.as_bytes())?;
        std::fs::rename(&temporary, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result.map_err(io(format!("writing {}", crate::render::host_path(path))))
}

pub fn export_metadata(
    engine: &Engine,
    dir: &Path,
    force: bool,
    output: &Output,
) -> Result<u8, CliError> {
    std::fs::create_dir_all(dir).map_err(|source| CliError::Io {
        context: format!("creating {}", crate::render::host_path(dir)),
        source,
    })?;
    let mut written = 0u64;
    let mut skipped_legacy = 0u64;
    for session in engine.sessions(Some(SessionStatus::Active))? {
        if session.legacy {
            skipped_legacy += 1;
            continue;
        }
        let path = dir.join(format!("{}.json", session.session_id));
        let text = serde_json::to_string_pretty(&session.seed_metadata()).map_err(|error| {
            CliError::Io {
                context: "encoding metadata".into(),
                source: std::io::Error::other(error),
            }
        })?;
        write_metadata(dir, &path, &text, force)?;
        written += 1;
    }
    if output.json {
        output.json(&json!({"written": written, "skipped_legacy": skipped_legacy}))?;
    } else {
        output.line(&format!(
            "wrote {written} metadata files to {} ({skipped_legacy} legacy sessions have none)",
            crate::render::host_path(dir)
        ))?;
    }
    Ok(0)
}

pub fn stats(engine: &Engine, output: &Output) -> Result<u8, CliError> {
    let stats = engine.stats()?;
    let failed_intents = engine.failed_intents()?;
    let head = engine.head()?;
    let blobs = engine.blob_totals()?;
    let log_bytes = std::fs::metadata(&engine.layout().database)
        .map(|m| m.len())
        .unwrap_or(0)
        + std::fs::metadata(engine.layout().database.with_extension("db-wal"))
            .map(|m| m.len())
            .unwrap_or(0);
    if output.json {
        output.json(&json!({
            "events": head.position.0,
            "log_bytes": log_bytes,
            "sessions": stats.sessions,
            "legacy_sessions": stats.legacy_sessions,
            "workspace_bytes": stats.workspace_bytes,
            "files": stats.files,
            "executions": stats.executions,
            "cleanup": stats.cleanup,
            "failed_intents": failed_intents,
            "blobs": {
                "kept": blobs.kept,
                "kept_bytes": blobs.kept_bytes,
                "stored_bytes": blobs.stored_bytes,
                "erased": blobs.erased,
            },
        }))?;
        return Ok(0);
    }
    let mut table = crate::render::table(output, &["", ""]);
    table.add_row(vec!["events".to_owned(), head.position.0.to_string()]);
    table.add_row(vec![
        "log size".to_owned(),
        crate::render::size(output, log_bytes),
    ]);
    for (status, count) in &stats.sessions {
        table.add_row(vec![format!("sessions {status}"), count.to_string()]);
    }
    table.add_row(vec![
        "legacy sessions".to_owned(),
        stats.legacy_sessions.to_string(),
    ]);
    table.add_row(vec![
        "workspace bytes".to_owned(),
        crate::render::size(output, stats.workspace_bytes),
    ]);
    table.add_row(vec!["files".to_owned(), stats.files.to_string()]);
    table.add_row(vec!["executions".to_owned(), stats.executions.to_string()]);
    table.add_row(vec![
        "blobs kept".to_owned(),
        format!(
            "{} ({} raw, {} stored)",
            blobs.kept,
            crate::render::size(output, blobs.kept_bytes),
            crate::render::size(output, blobs.stored_bytes)
        ),
    ]);
    table.add_row(vec!["blobs erased".to_owned(), blobs.erased.to_string()]);
    let cleanup = &stats.cleanup;
    table.add_row(vec![
        "prune runs".to_owned(),
        cleanup.prune_runs.to_string(),
    ]);
    table.add_row(vec![
        "sessions pruned".to_owned(),
        format!(
            "{} ({})",
            cleanup.sessions_pruned,
            crate::render::size(output, cleanup.pruned_bytes)
        ),
    ]);
    table.add_row(vec![
        "prune errors".to_owned(),
        cleanup.prune_errors.to_string(),
    ]);
    table.add_row(vec![
        "sessions deleted".to_owned(),
        cleanup.sessions_deleted.to_string(),
    ]);
    table.add_row(vec![
        "reconcile runs".to_owned(),
        cleanup.reconcile_runs.to_string(),
    ]);
    table.add_row(vec![
        "orphans".to_owned(),
        format!(
            "{} quarantined, {} purged",
            cleanup.orphans_quarantined, cleanup.orphans_purged
        ),
    ]);
    table.add_row(vec![
        "intents finished".to_owned(),
        cleanup.intents_finished.to_string(),
    ]);
    table.add_row(vec![
        "intents failing".to_owned(),
        failed_intents.len().to_string(),
    ]);
    for failed in &failed_intents {
        table.add_row(vec![
            crate::render::escaped(format!("  {} {}", failed.intent, failed.session_id)),
            crate::render::escaped(&failed.error),
        ]);
    }
    table.add_row(vec![
        "cleanup time".to_owned(),
        sandlog_runtime::core::human::format_duration(std::time::Duration::from_micros(
            cleanup.cleanup_duration_us,
        )),
    ]);
    output.line(&table.to_string())?;
    Ok(0)
}

/// `doctor`: the root's readiness checks (the engine's, as `GET /readyz`
/// runs them), each with its fix; a root that does not open is a failed
/// check, not an error.
pub fn doctor(
    root: &Path,
    args: &crate::args::DoctorArgs,
    output: &Output,
) -> Result<u8, CliError> {
    use sandlog_runtime::health::{self, HealthOptions};
    let disk_free_min =
        sandlog_runtime::core::human::parse_size(&args.min_free).map_err(|error| {
            CliError::Usage {
                kind: "bad_size",
                message: format!("--min-free {:?}: {error}", args.min_free),
            }
        })?;
    let checks = match super::open(root, output) {
        Ok(engine) => {
            engine.set_health_options(HealthOptions { disk_free_min });
            engine.health()
        }
        Err(CliError::Runtime(error)) => vec![health::open_failed(root, &error)],
        Err(CliError::Reworded { source, .. }) => vec![health::open_failed(root, &source)],
        Err(error) => return Err(error),
    };
    let ok = health::all_ok(&checks);
    if output.json {
        output.json(&json!({ "ok": ok, "checks": checks }))?;
    } else {
        let width = checks
            .iter()
            .map(|check| check.name.len())
            .max()
            .unwrap_or(0);
        for check in &checks {
            let mark = if check.ok {
                output.good("ok  ")
            } else {
                output.bad("FAIL")
            };
            output.line(&format!(
                "{mark}  {:<width$}  {}",
                check.name,
                crate::render::escaped(&check.detail)
            ))?;
            if let Some(fix) = &check.fix {
                output.line(&format!(
                    "      {:<width$}  fix: {}",
                    "",
                    crate::render::escaped(fix)
                ))?;
            }
        }
    }
    Ok(if ok { 0 } else { crate::exit::EXIT_FAILURE })
}
