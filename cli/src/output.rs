//! Where output goes and how it looks: JSON or human, colour only on a
//! terminal and never under `NO_COLOR`, progress bars only when stderr is
//! a terminal, tracing on stderr.

use std::io::{IsTerminal, Write};

use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sandlog_runtime::core::human::format_size;
use sandlog_runtime::sandbox::{CompileEvent, CompileObserver};
use sandlog_runtime::sqlite::{Upgrade, UpgradeEvent, UpgradeObserver};
use serde::Serialize;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::args::{Cli, LogFormat, TableFormat};
use crate::exit::CliError;

/// Output settings for one invocation.
#[derive(Debug, Clone)]
pub struct Output {
    /// `--json`.
    pub json: bool,
    /// Colour on stdout.
    pub color: bool,
    /// Progress bars on stderr.
    pub progress: bool,
    /// Who acts, recorded on every event the command appends (see
    /// [`crate::actor::actor`]).
    pub actor: String,
    /// `--correlation-id`: recorded on every event the command appends.
    pub correlation_id: Option<uuid::Uuid>,
    /// `--store`: the shared log, if the root's log is not its own file.
    pub store: Option<String>,
    /// `--node`: the node this command acts for.
    pub node: Option<String>,
    /// `--wide`: whole ids in tables.
    pub wide: bool,
    /// `--format tsv`: tables as tab-separated values.
    pub tsv: bool,
    /// The width human tables fit (cutting a long column with `…`): the
    /// terminal's when stdout is one, else `$COLUMNS` when set; `None`
    /// (never cut) with `--wide`, `--format tsv` or `--json`.
    pub width: Option<usize>,
    /// `--format ocsf`: `log` prints OCSF records.
    pub ocsf: bool,
    /// Notes for a person on stderr, such as why the first execution takes
    /// seconds (a terminal, not `--quiet`; `--json` keeps them: they never
    /// touch stdout).
    pub notices: bool,
}

/// The width of stdout's terminal, else `$COLUMNS`; `None` if neither
/// gives a width.
fn output_width() -> Option<usize> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // TIOCGWINSZ fills `size`, which we own, or fails (not a terminal).
    #[expect(unsafe_code, reason = "TIOCGWINSZ writes into a winsize we own")]
    let status = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    if status == 0 && size.ws_col > 0 {
        return Some(usize::from(size.ws_col));
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|columns| columns.trim().parse::<usize>().ok())
        .filter(|columns| *columns > 0)
}

fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty())
}

impl Output {
    /// From the command line and the terminals.
    pub fn new(cli: &Cli) -> Output {
        Output {
            json: cli.json,
            color: !cli.json
                && cli.format == TableFormat::Table
                && std::io::stdout().is_terminal()
                && !no_color(),
            wide: cli.wide,
            actor: crate::actor::actor(cli.actor.as_deref()),
            correlation_id: cli.correlation_id,
            store: cli.store.clone().filter(|store| !store.is_empty()),
            node: cli.node.clone(),
            tsv: cli.format == TableFormat::Tsv,
            width: (!cli.wide && !cli.json && cli.format == TableFormat::Table)
                .then(output_width)
                .flatten(),
            ocsf: cli.format == TableFormat::Ocsf,
            progress: !cli.quiet && !cli.json && std::io::stderr().is_terminal(),
            notices: !cli.quiet && std::io::stderr().is_terminal(),
        }
    }

    /// Tells the person at the terminal, when a guest runtime has to be
    /// compiled, what is happening and how long it usually takes (only
    /// with `notices`).
    pub fn compile_observer(&self) -> Option<CompileObserver> {
        self.notices.then(|| {
            CompileObserver::new(|event| match event {
                CompileEvent::Started { path, wasm_bytes } => {
                    crate::exit::stderr_line(&compile_started_note(path, wasm_bytes));
                }
                CompileEvent::Finished { path, elapsed, .. } => {
                    crate::exit::stderr_line(&format!(
                        "sandlog: {} ready after {:.1} s; later runs, in any root, load it in milliseconds",
                        sandlog_runtime::core::escape::for_terminal(&module_name(path)),
                        elapsed.as_secs_f64()
                    ));
                }
                _ => {}
            })
        })
    }

    /// Says on stderr why opening an old root takes long: its log is being
    /// upgraded, and other commands on the root wait for it (a terminal
    /// only, with `notices`).
    pub fn upgrade_observer(&self) -> Option<UpgradeObserver> {
        self.notices.then(|| {
            UpgradeObserver::new(|event| match event {
                UpgradeEvent::Started {
                    path,
                    upgrade,
                    events,
                } => {
                    crate::exit::stderr_line(&upgrade_started_note(path, upgrade, events));
                }
                UpgradeEvent::Finished {
                    upgrade, elapsed, ..
                } => {
                    crate::exit::stderr_line(&format!(
                        "sandlog: {} in {:.1} s",
                        upgrade.done(),
                        elapsed.as_secs_f64()
                    ));
                }
            })
        })
    }

    /// Prints one JSON document.
    pub fn json<T: Serialize>(&self, value: &T) -> Result<(), CliError> {
        let text = serde_json::to_string_pretty(value).map_err(|error| CliError::Io {
            context: "encoding JSON".into(),
            source: std::io::Error::other(error),
        })?;
        self.line(&text)
    }

    /// Prints a line on stdout (a closed pipe is not an error).
    pub fn line(&self, text: &str) -> Result<(), CliError> {
        let mut stdout = std::io::stdout().lock();
        match writeln!(stdout, "{text}") {
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            other => other.map_err(|source| CliError::Io {
                context: "writing to stdout".into(),
                source,
            }),
        }
    }

    /// Prints a line on stdout and flushes it; `Ok(false)` once the reader
    /// has gone, for commands that would otherwise keep going (`log
    /// --follow`).
    pub fn line_open(&self, text: &str) -> Result<bool, CliError> {
        let mut stdout = std::io::stdout().lock();
        match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
            Err(source) => Err(CliError::Io {
                context: "writing to stdout".into(),
                source,
            }),
            Ok(()) => Ok(true),
        }
    }

    /// Bold, if colour is on.
    pub fn bold(&self, text: &str) -> String {
        if self.color {
            format!("\x1b[1m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Green, if colour is on.
    pub fn good(&self, text: &str) -> String {
        if self.color {
            format!("\x1b[32m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Red, if colour is on.
    pub fn bad(&self, text: &str) -> String {
        if self.color {
            format!("\x1b[31m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Reports an error on stderr.
    pub fn error(&self, error: &CliError) {
        if self.json {
            let document = serde_json::json!({"error": {"kind": error.kind(), "class": error.class().as_str(), "message": error.to_string()}});
            crate::exit::stderr_line(&document.to_string());
        } else {
            // Messages can carry guest-chosen names: escaped like every
            // human line.
            crate::exit::stderr_line(&format!(
                "sandlog: error: {}",
                sandlog_runtime::core::escape::for_terminal(&error.to_string())
            ));
        }
    }

    /// A progress bar on stderr, drawn only when stderr is a terminal and
    /// only once the work's total is known (never `0/0`).
    pub fn progress_bar(&self, message: &'static str) -> Progress {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template("{msg:12} {bar:40} {pos}/{len} {elapsed}") {
            bar.set_style(style);
        }
        bar.set_message(message);
        Progress {
            bar,
            enabled: self.progress,
        }
    }
}

/// A progress bar that shows itself on the first update with a total.
pub struct Progress {
    bar: ProgressBar,
    enabled: bool,
}

impl Progress {
    /// `done` of `total` steps; a zero total (nothing to do, or not known
    /// yet) draws nothing.
    pub fn update(&self, done: u64, total: u64) {
        if total == 0 {
            return;
        }
        self.bar.set_length(total);
        self.bar.set_position(done.min(total));
        if self.enabled && self.bar.is_hidden() {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Stdout for raw bytes the engine streams (`files cat`, `blob cat`): a
/// reader that has gone (`| head`) ends the copy quietly, its remaining
/// bytes discarded, so the command exits as it would have.
pub struct RawStdout {
    stdout: std::io::StdoutLock<'static>,
    closed: bool,
}

impl RawStdout {
    /// Locks stdout.
    pub fn new() -> RawStdout {
        RawStdout {
            stdout: std::io::stdout().lock(),
            closed: false,
        }
    }

    /// Flushes; a closed pipe is not an error.
    pub fn finish(mut self) -> Result<(), CliError> {
        match self.flush() {
            Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::Io {
                context: "writing to stdout".into(),
                source: error,
            }),
            _ => Ok(()),
        }
    }
}

impl Write for RawStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        match self.stdout.write(buf) {
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(buf.len())
            }
            other => other,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        match self.stdout.flush() {
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            other => other,
        }
    }
}

/// What compiling a guest runtime usually costs per megabyte of `.wasm`
/// on an idle machine with two cores (python.wasm is the yardstick: a guest
/// runtime is mostly code); a busy machine takes a few times longer.
const COMPILE_MS_PER_MB: u64 = 250;

/// The note printed before a compile: what, why, and how long.
fn compile_started_note(path: &Path, wasm_bytes: u64) -> String {
    let megabytes = wasm_bytes.div_ceil(1_000_000).max(1);
    let seconds = (megabytes * COMPILE_MS_PER_MB).div_ceil(1000).max(1);
    format!(
        "sandlog: compiling {} ({}) for this machine, once per user, sandlog version and CPU: \
         usually about {seconds} s, longer on a busy machine…",
        sandlog_runtime::core::escape::for_terminal(&module_name(path)),
        format_size(wasm_bytes),
    )
}

/// What the slowest schema upgrade (one that rewrites the events table)
/// usually costs per million events on an idle machine with an SSD.
const MIGRATE_MS_PER_MILLION_EVENTS: u64 = 30_000;

/// What rebuilding the read models usually costs per million events on an
/// idle machine with two cores (the `projections` bench's rebuild rate).
const REBUILD_MS_PER_MILLION_EVENTS: u64 = 12_000;

/// The note printed before an upgrade: what, how long, and who waits.
fn upgrade_started_note(path: &Path, upgrade: Upgrade, events: u64) -> String {
    let shown = path.display().to_string();
    let path = sandlog_runtime::core::escape::for_terminal(&shown);
    let what = upgrade.starting(&path);
    let cost = match upgrade {
        Upgrade::Schema { .. } => MIGRATE_MS_PER_MILLION_EVENTS,
        Upgrade::ReadModels { .. } => REBUILD_MS_PER_MILLION_EVENTS,
    };
    let seconds = events.saturating_mul(cost).div_ceil(1_000_000_000).max(1);
    format!(
        "sandlog: {what} ({events} events), once: usually at most about {seconds} s; \
         other sandlog commands on this root wait for it…"
    )
}

/// A module's file name, for notes.
fn module_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// The engine's `(done, total)` progress callback, driving `progress`.
pub fn advance(progress: &Progress) -> impl Fn(u64, u64) + Sync + '_ {
    move |done, total| progress.update(done, total)
}

/// What `main` keeps until it returns: with traces on, dropping it sends
/// the last ones (see `crate::otel`).
#[cfg(feature = "otel")]
pub type TracingGuard = Option<crate::otel::Guard>;
/// What `main` keeps until it returns (nothing to send: no traces in this
/// build).
#[cfg(not(feature = "otel"))]
pub struct TracingGuard;

/// Sets up `tracing` on stderr: warnings by default, `-v` info, `-vv`
/// debug, `-vvv` trace, `-q` errors only; `RUST_LOG` overrides. With the
/// `OTEL_*` variables, also OpenTelemetry traces (`crate::otel`), filtered
/// on their own so stderr's level does not decide them.
pub fn init_tracing(cli: &Cli) -> TracingGuard {
    let level = if cli.quiet {
        "error"
    } else {
        match cli.verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && !no_color());
    let stderr = match cli.log_format {
        LogFormat::Json => stderr.json().with_filter(filter).boxed(),
        LogFormat::Text => stderr.with_filter(filter).boxed(),
    };
    let registry = tracing_subscriber::registry().with(stderr);
    #[cfg(feature = "otel")]
    {
        let (traces, guard) = match crate::otel::layer() {
            Some((layer, guard)) => (Some(layer), Some(guard)),
            None => (None, None),
        };
        let _ = registry.with(traces).try_init();
        guard
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = registry.try_init();
        TracingGuard
    }
}
