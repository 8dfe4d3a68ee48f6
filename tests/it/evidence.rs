//! Evidence end to end (issue 12) with real parts: a real SQLite file,
//! wasmtime running python.wasm, real directories and, for the crash test,
//! real processes killed with SIGKILL.
//!
//! * Restore: after random executions and host writes and deletes, the
//!   workspace restored at every position of the session's stream equals,
//!   byte for byte, what the projection says was there, and the files past
//!   the execution's evidence budget are exactly the ones named missing.
//! * Crash: a child running executions that keep evidence is SIGKILLed at
//!   random moments; after each reopen every blob an event names is there
//!   and hashes to its key, the log verifies, and `gc` leaves no blob no
//!   event names.
//! * Erasure: the bytes are gone from the database file and its WAL, the
//!   chain verifies, reading them says they were erased, and a held
//!   session keeps what it shares.
//! * Fork: a fork at a past position holds the files of then and is
//!   independent of its origin.
//!
//! The crash test prints its base seed; rerun one with
//! `SANDLOG_EVIDENCE_CRASH_SEED=<seed>`. `SANDLOG_EVIDENCE_CRASH_KILLS`
//! sets the number of kills (default 10).

#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use proptest::prelude::*;
use sandlog_core::event::NotKept;
use sandlog_core::{Event, Hash, Position, PrunePolicy, SessionId, WorkspacePath};
use sandlog_eventstore::BlobState;
use sandlog_projections::{Cut, replay};
use sandlog_runtime::{Engine, ExecRequest, LimitOverrides, RuntimeError};
use sandlog_sqlite::EventStore;
use sandlog_tests::engine::RawLog;
use sandlog_tests::engine::TestRoot;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn path(text: &str) -> WorkspacePath {
    WorkspacePath::parse(text).unwrap()
}

/// Python code under a per-execution evidence budget.
fn python_with_budget(code: String, budget: u64) -> ExecRequest {
    ExecRequest {
        limits: LimitOverrides {
            evidence_bytes: Some(budget),
            ..LimitOverrides::default()
        },
        ..ExecRequest::python(code)
    }
}

/// Every regular file under `dir`, by `/`-separated relative path.
fn read_tree(dir: &Path) -> std::io::Result<BTreeMap<String, Vec<u8>>> {
    fn walk(base: &Path, dir: &Path, files: &mut BTreeMap<String, Vec<u8>>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                walk(base, &entry.path(), files)?;
            } else {
                assert!(kind.is_file(), "{} is not a file", entry.path().display());
                let relative = entry
                    .path()
                    .strip_prefix(base)
                    .map_err(std::io::Error::other)?
                    .to_string_lossy()
                    .replace('\\', "/");
                files.insert(relative, std::fs::read(entry.path())?);
            }
        }
        Ok(())
    }
    let mut files = BTreeMap::new();
    walk(dir, dir, &mut files)?;
    Ok(files)
}

/// The blake3 of a blob's bytes as read back from the store.
fn hash_of_blob(
    log: &EventStore,
    hash: &Hash,
) -> Result<Hash, Box<dyn std::error::Error + Send + Sync>> {
    let mut hasher = blake3::Hasher::new();
    match log.read_blob(hash, &mut hasher)? {
        BlobState::Kept { .. } => Ok(Hash(*hasher.finalize().as_bytes())),
        state => Err(format!("blob {hash} is {state:?}, not kept").into()),
    }
}

// ---------------------------------------------------------------------------
// Restore at every position equals the projection
// ---------------------------------------------------------------------------

/// The names operations pick from: flat and nested, sorted the same way
/// as strings and as paths, so the model's path order is the engine's.
const NAMES: [&str; 6] = ["a.txt", "b.bin", "c", "d/x", "d/y", "e.dat"];

/// The per-execution evidence budget of the property test: small, so
/// random sizes up to [`SIZE_MAX`] land in all three cases (kept, past
/// what is left, larger than the whole budget).
const BUDGET: u64 = 4096;

/// Largest file an operation writes.
const SIZE_MAX: usize = 6144;

/// What a file's bytes are: a seed and a length (the content is made
/// unique per write by a counter, see [`content`]).
type Content = (u64, usize);

#[derive(Debug, Clone)]
enum Op {
    /// One Python execution: per name, write the content or (`None`)
    /// delete the file if it exists.
    Exec(BTreeMap<usize, Option<Content>>),
    /// `engine.write_file`, overwriting.
    HostWrite(usize, Content),
    /// `engine.delete_file` of the name, or of an existing file picked by
    /// it when the name does not exist.
    HostDelete(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let content = || (any::<u64>(), 8usize..=SIZE_MAX);
    prop_oneof![
        3 => proptest::collection::btree_map(
            0..NAMES.len(),
            proptest::option::weighted(0.8, content()),
            1..=4
        )
        .prop_map(Op::Exec),
        2 => (0..NAMES.len(), content()).prop_map(|(name, content)| Op::HostWrite(name, content)),
        1 => (0..NAMES.len()).prop_map(Op::HostDelete),
    ]
}

/// `len` (≥ 8) pseudo-random bytes from `seed`, starting with `counter`,
/// so no two writes of a run have the same bytes and every write by a
/// guest is a change the scan records.
fn content(counter: u64, (seed, len): Content) -> Vec<u8> {
    let mut bytes = counter.to_le_bytes().to_vec();
    let mut state = seed | 1;
    while bytes.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(len.max(8));
    bytes
}

/// What the test expects of one file: its bytes, and why they were not
/// kept (`None`: kept).
type Model = BTreeMap<String, (Vec<u8>, Option<NotKept>)>;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Runs `ops` on a fresh session; returns the session, and the model
/// after each operation by the last position it appended.
fn run_ops(
    root: &TestRoot,
    ops: &[Op],
) -> Result<(SessionId, BTreeMap<u64, Model>), Box<dyn std::error::Error + Send + Sync>> {
    let engine = &root.engine;
    let id = engine.create_session(BTreeMap::new())?.session_id;
    let mut model = Model::new();
    let mut counter = 0u64;
    let mut boundaries = BTreeMap::new();
    let last_position = |id| -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
        Ok(engine
            .session_events(id)?
            .last()
            .map_or(0, |envelope| envelope.position.0))
    };
    boundaries.insert(last_position(id)?, model.clone());
    for op in ops {
        match op {
            Op::Exec(actions) => {
                let mut code = String::from("import os\nos.makedirs('d', exist_ok=True)\n");
                let mut written = Vec::new();
                let mut deleted = Vec::new();
                for (index, action) in actions {
                    let name = NAMES[*index];
                    match action {
                        Some(spec) => {
                            counter += 1;
                            let bytes = content(counter, *spec);
                            code.push_str(&format!(
                                "open('{name}', 'wb').write(bytes.fromhex('{}'))\n",
                                hex(&bytes)
                            ));
                            written.push((name, bytes));
                        }
                        None => {
                            code.push_str(&format!(
                                "if os.path.exists('{name}'): os.remove('{name}')\n"
                            ));
                            if model.contains_key(name) {
                                deleted.push(name);
                            }
                        }
                    }
                }
                code.push_str("print('done')\n");
                let run = engine.execute(id, &python_with_budget(code, BUDGET))?;
                assert_eq!(
                    run.outcome,
                    sandlog_core::Outcome::Ok,
                    "{}",
                    String::from_utf8_lossy(&run.stderr)
                );
                let names = |list: &[WorkspacePath]| -> Vec<String> {
                    list.iter().map(|p| p.as_str().to_owned()).collect()
                };
                assert_eq!(
                    names(&run.files_written),
                    written
                        .iter()
                        .map(|(n, _)| n.to_string())
                        .collect::<Vec<_>>()
                );
                assert_eq!(
                    names(&run.files_deleted),
                    deleted.iter().map(|n| n.to_string()).collect::<Vec<_>>()
                );
                // The budget rule, restated: in path order, a file is kept
                // if its whole size fits in what is left.
                let mut left = BUDGET;
                for (name, bytes) in written {
                    let size = bytes.len() as u64;
                    let reason = if size > BUDGET {
                        Some(NotKept::TooLarge)
                    } else if size > left {
                        Some(NotKept::Budget)
                    } else {
                        left -= size;
                        None
                    };
                    model.insert(name.to_owned(), (bytes, reason));
                }
                for name in deleted {
                    model.remove(name);
                }
                let record = engine.execution_record(
                    id,
                    sandlog_runtime::history::ExecSelector::Position(run.position),
                    None,
                )?;
                assert_eq!(record.stdout.raw, b"done\n");
                assert_eq!(record.stdout.state, "kept");
                let evidence = record.evidence.ok_or("no evidence recorded")?;
                assert_eq!(evidence.budget_bytes, BUDGET);
                assert_eq!(evidence.kept_bytes, BUDGET - left);
            }
            Op::HostWrite(index, spec) => {
                counter += 1;
                let bytes = content(counter, *spec);
                engine.write_file(id, &path(NAMES[*index]), &bytes, true)?;
                model.insert(NAMES[*index].to_owned(), (bytes, None));
            }
            Op::HostDelete(index) => {
                let existing: Vec<String> = model.keys().cloned().collect();
                let name = if model.contains_key(NAMES[*index]) {
                    NAMES[*index].to_owned()
                } else if existing.is_empty() {
                    continue;
                } else {
                    existing[*index % existing.len()].clone()
                };
                engine.delete_file(id, &path(&name), false)?;
                model.remove(&name);
            }
        }
        boundaries.insert(last_position(id)?, model.clone());
    }
    Ok((id, boundaries))
}

/// Restores `id` at every position of its stream and checks it against
/// the projection there and, after each operation, against the model.
fn check_restores(root: &TestRoot, id: SessionId, boundaries: &BTreeMap<u64, Model>) -> TestResult {
    let engine = &root.engine;
    let scratch = tempfile::tempdir()?;
    let positions: Vec<u64> = engine
        .session_events(id)?
        .iter()
        .map(|envelope| envelope.position.0)
        .collect();
    let log = engine.raw_log()?;
    for position in positions {
        let cut = Cut::Position(Position(position));
        let projected = replay::session_at(&log, id, cut)?
            .ok_or("the session is missing from the projection")?;
        let past = engine.session_as_of(id, cut)?;
        assert_eq!(past.state.files, projected.files, "at {position}");
        let target = scratch.path().join(position.to_string());
        let report = engine.restore(id, cut, &target)?;
        assert_eq!(report.position, position);
        let restored = read_tree(&target)?;
        let missing: BTreeMap<String, String> = report
            .missing
            .iter()
            .map(|file| (file.path.as_str().to_owned(), file.reason.clone()))
            .collect();
        assert_eq!(missing.len(), report.missing.len(), "a file missing twice");
        for (file, entry) in &projected.files {
            let name = file.as_str();
            match (restored.get(name), missing.get(name)) {
                (Some(bytes), None) => {
                    assert_eq!(bytes.len() as u64, entry.size, "{name} at {position}");
                    assert_eq!(Hash::of(bytes), entry.blake3, "{name} at {position}");
                }
                (None, Some(reason)) => assert!(
                    reason == "budget" || reason == "too_large",
                    "{name} at {position} is missing for {reason}"
                ),
                (restored, missing) => panic!(
                    "{name} at {position}: restored {}, missing {missing:?}",
                    restored.is_some()
                ),
            }
        }
        for name in restored.keys().chain(missing.keys()) {
            assert!(
                projected.files.contains_key(&path(name)),
                "{name} restored or named missing at {position}, but the projection has no such file"
            );
        }
        assert_eq!(report.files, restored.len() as u64);
        assert_eq!(
            report.bytes,
            restored
                .values()
                .map(|bytes| bytes.len() as u64)
                .sum::<u64>()
        );
        let Some(model) = boundaries.get(&position) else {
            continue;
        };
        // After a whole operation: exactly what the test wrote.
        let expected_restored: BTreeMap<&str, &Vec<u8>> = model
            .iter()
            .filter(|(_, (_, reason))| reason.is_none())
            .map(|(name, (bytes, _))| (name.as_str(), bytes))
            .collect();
        let actual_restored: BTreeMap<&str, &Vec<u8>> = restored
            .iter()
            .map(|(name, bytes)| (name.as_str(), bytes))
            .collect();
        assert_eq!(actual_restored, expected_restored, "at {position}");
        let expected_missing: BTreeMap<String, String> = model
            .iter()
            .filter_map(|(name, (_, reason))| reason.map(|r| (name.clone(), r.as_str().to_owned())))
            .collect();
        assert_eq!(missing, expected_missing, "at {position}");
        for (name, (bytes, reason)) in model {
            let mut out = Vec::new();
            match (engine.read_file_at(id, &path(name), cut, &mut out), reason) {
                (Ok(size), None) => {
                    assert_eq!(size, bytes.len() as u64);
                    assert_eq!(&out, bytes, "{name} at {position}");
                }
                (Err(RuntimeError::ContentNotKept { reason: text, .. }), Some(reason)) => {
                    assert_eq!(text, reason.describe(), "{name} at {position}");
                }
                (outcome, reason) => {
                    panic!(
                        "{name} at {position}: read {outcome:?}, expected not kept for {reason:?}"
                    )
                }
            }
        }
    }
    Ok(())
}

proptest! {
    // Each execution costs a python.wasm run, so few short sequences.
    #![proptest_config(ProptestConfig {
        cases: 6,
        max_shrink_iters: 16,
        ..ProptestConfig::default()
    })]

    /// Goal: `files restore --at P` equals the projection at P for every P
    /// of the session, byte for byte, within the evidence budget, and names
    /// exactly the files past it (issue 12). Method: random sequences of
    /// Python executions (writing, overwriting and deleting files of random
    /// content, some larger than the per-exec budget) and host writes and
    /// deletes; every position of the stream restored into a fresh
    /// directory and compared with the replayed projection (paths, sizes,
    /// blake3 of the restored bytes), and after each operation with the
    /// bytes the test wrote and the reasons the budget rule gives.
    #[test]
    fn restore_at_every_position_equals_the_projection(
        ops in proptest::collection::vec(op(), 1..=6)
    ) {
        let root = TestRoot::new().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (id, boundaries) =
            run_ops(&root, &ops).map_err(|e| TestCaseError::fail(e.to_string()))?;
        check_restores(&root, id, &boundaries).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}

/// The property's rarer cases, pinned: a file larger than the whole
/// budget, one past what is left, one kept after them in path order, then
/// a host overwrite of the too-large one and a guest delete.
#[test]
fn restore_names_files_past_the_budget_and_keeps_later_small_ones() -> TestResult {
    let root = TestRoot::new()?;
    let ops = vec![
        Op::Exec(BTreeMap::from([
            (0, Some((1, 3000))),
            (1, Some((2, 2000))),
            (2, Some((3, 5000))),
            (3, Some((4, 1000))),
        ])),
        Op::HostWrite(2, (5, 6000)),
        Op::Exec(BTreeMap::from([(0, None), (4, Some((6, 100)))])),
        Op::HostDelete(3),
    ];
    let (id, boundaries) = run_ops(&root, &ops)?;
    let after_first = boundaries.values().nth(1).ok_or("no first operation")?;
    let reasons: BTreeMap<&str, Option<NotKept>> = after_first
        .iter()
        .map(|(name, (_, reason))| (name.as_str(), *reason))
        .collect();
    assert_eq!(
        reasons,
        BTreeMap::from([
            ("a.txt", None),
            ("b.bin", Some(NotKept::Budget)),
            ("c", Some(NotKept::TooLarge)),
            ("d/x", None),
        ])
    );
    check_restores(&root, id, &boundaries)
}

// ---------------------------------------------------------------------------
// SIGKILL during executions that keep evidence
// ---------------------------------------------------------------------------

const EVIDENCE_KILLS_DEFAULT: u64 = 10;
/// How long a child runs before the kill (after its first acknowledgement
/// in most rounds), ms: from mid-operation to several operations in.
const LIFETIME_MIN_MS: u64 = 10;
const LIFETIME_SPAN_MS: u64 = 1500;
/// Longest wait for a child's first acknowledged operation (it opens the
/// engine, loads python.wasm from the cache and runs one execution).
const FIRST_ACK_TIMEOUT: Duration = Duration::from_secs(120);

/// Every blob the log's events say they stored: code always, stdout and
/// stderr when the execution kept output, a written file's bytes when its
/// event says they were stored.
fn named_blobs(
    engine: &Engine,
) -> Result<BTreeSet<Hash>, Box<dyn std::error::Error + Send + Sync>> {
    let mut named = BTreeSet::new();
    for envelope in engine.raw_log()?.read_all_after(Position::ZERO) {
        match envelope?.event()? {
            Some(Event::SessionExecuted(executed)) => {
                named.insert(executed.code_blake3);
                if executed.evidence.is_some_and(|e| e.output_kept) {
                    named.insert(executed.stdout_blake3);
                    named.insert(executed.stderr_blake3);
                }
            }
            Some(Event::FileWritten(written)) if written.content_stored() => {
                named.insert(written.blake3);
            }
            _ => {}
        }
    }
    Ok(named)
}

/// Goal: a crash during executions that keep evidence never leaves an
/// event naming a missing or damaged blob, nor a blob `gc` cannot account
/// for (issue 12). Method: a child process (`evidence-child`) runs Python
/// executions writing random files (some past their budget, some sharing
/// bytes, evidence sometimes off) and host writes, and is SIGKILLed at a
/// random moment, several times over one root. After each kill the root is
/// reopened: `verify` passes; every blob an event names is kept and its
/// bytes hash to its key; a blob stored alone is removed by `gc`, which
/// leaves only blobs some event names and removes none of those.
#[test]
fn sigkill_during_evidence_writes_leaves_every_named_blob_whole() -> TestResult {
    let base_seed: u64 = match std::env::var("SANDLOG_EVIDENCE_CRASH_SEED") {
        Ok(seed) => seed.parse()?,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64,
    };
    let kills: u64 = std::env::var("SANDLOG_EVIDENCE_CRASH_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(EVIDENCE_KILLS_DEFAULT);
    println!(
        "evidence crash test: base seed {base_seed} (SANDLOG_EVIDENCE_CRASH_SEED={base_seed} replays it), {kills} kills"
    );
    // A warm module cache, so children spend their lifetime executing.
    let warm = TestRoot::new()?;
    let warm_id = warm.engine.create_session(BTreeMap::new())?.session_id;
    warm.engine.execute(warm_id, &ExecRequest::python("pass"))?;
    drop(warm);

    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let mut acknowledged = 0usize;
    let mut checked_blobs = 0usize;
    let mut waited_rounds = 0usize;
    for round in 0..kills {
        let seed = base_seed.wrapping_add(round.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut child = Command::new(env!("CARGO_BIN_EXE_evidence-child"))
            .arg(&root)
            .arg(seed.to_string())
            .env(
                "SANDLOG_RUNTIMES_DIR",
                sandlog_tests::engine::runtimes_dir(),
            )
            .env("SANDLOG_TEST_CACHE_DIR", sandlog_tests::engine::cache_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let out = child.stdout.take().ok_or("no stdout pipe")?;
        let (lines, acks) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(out)) {
                let Ok(line) = line else { break };
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        // One round in three is killed at a time counted from the start
        // (possibly while the engine opens); the others once the child has
        // acknowledged work, so every such round kills a child in the
        // middle of its stream of evidence writes however loaded the
        // machine is.
        let mut seen = Vec::new();
        if round % 3 != 0 {
            waited_rounds += 1;
            let first = acks.recv_timeout(FIRST_ACK_TIMEOUT).map_err(|_| {
                format!("seed {seed}: the child acknowledged nothing in {FIRST_ACK_TIMEOUT:?}")
            })?;
            seen.push(first);
        }
        std::thread::sleep(Duration::from_millis(
            LIFETIME_MIN_MS + seed % LIFETIME_SPAN_MS,
        ));
        child.kill()?;
        child.wait()?;
        reader.join().map_err(|_| "the stdout reader panicked")?;
        seen.extend(acks.try_iter());
        acknowledged += seen.iter().filter(|l| l.starts_with("ack ")).count();
        if !root.join("sandlog.db").exists() {
            continue;
        }
        checked_blobs += check_evidence_root(&root, seed)?;
    }
    println!(
        "evidence crash test: {kills} kills, {acknowledged} operations acknowledged, {checked_blobs} named blobs checked"
    );
    assert!(
        acknowledged >= waited_rounds,
        "fewer acknowledgements ({acknowledged}) than rounds that waited for one ({waited_rounds})"
    );
    assert!(checked_blobs > 0, "no event named a blob");
    Ok(())
}

/// Reopens the root and checks its blobs; returns how many were named.
fn check_evidence_root(
    root: &Path,
    seed: u64,
) -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
    let options = sandlog_runtime::EngineOptions {
        runtimes_dir: Some(sandlog_tests::engine::runtimes_dir()),
        cache_dir: Some(sandlog_tests::engine::cache_dir()),
        ..sandlog_runtime::EngineOptions::default()
    };
    Engine::init(root).map_err(|error| format!("seed {seed}: init failed: {error}"))?;
    let engine = Engine::open(root, options)
        .map_err(|error| format!("seed {seed}: reopen failed: {error}"))?;
    let verified = engine
        .verify(None, &|_| {})
        .map_err(|error| format!("seed {seed}: verify failed: {error}"))?;
    assert!(
        verified.ok,
        "seed {seed}: {:?}",
        verified.read_model_mismatches
    );
    let named = named_blobs(&engine)?;
    let log = engine.raw_log()?;
    for hash in &named {
        assert!(
            matches!(engine.blob_state(hash)?, BlobState::Kept { .. }),
            "seed {seed}: blob {hash} is named by an event but not kept"
        );
        assert_eq!(
            hash_of_blob(&log, hash)?,
            *hash,
            "seed {seed}: blob {hash} does not hash to its key"
        );
    }
    // A blob stored alone (no event names it) is what gc must remove.
    let orphan = log.put_blob(format!("stored alone in round {seed}").as_bytes())?;
    let gc = engine.gc(None)?;
    assert!(gc.blobs_removed >= 1, "seed {seed}: gc removed nothing");
    assert_eq!(engine.blob_state(&orphan)?, BlobState::Missing);
    for (hash, kept) in log.blob_hashes()? {
        assert!(
            named.contains(&hash),
            "seed {seed}: blob {hash} survived gc but no event names it"
        );
        assert!(
            kept,
            "seed {seed}: blob {hash} is erased; nothing erased here"
        );
    }
    for hash in &named {
        assert!(
            matches!(engine.blob_state(hash)?, BlobState::Kept { .. }),
            "seed {seed}: gc removed blob {hash}, which an event names"
        );
    }
    Ok(named.len())
}

// ---------------------------------------------------------------------------
// Erasure
// ---------------------------------------------------------------------------

/// `len` bytes that do not compress (so they are stored raw and can be
/// searched for in the file) with `marker` in the middle.
fn marked_bytes(marker: &[u8], len: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(len + marker.len());
    let mut state = blake3::Hasher::new();
    state.update(marker);
    let mut reader = state.finalize_xof();
    let mut noise = vec![0u8; len];
    reader.fill(&mut noise);
    bytes.extend_from_slice(&noise[..len / 2]);
    bytes.extend_from_slice(marker);
    bytes.extend_from_slice(&noise[len / 2..]);
    bytes
}

/// Whether `needle` occurs in the database file or its WAL (raw bytes).
fn in_database_files(engine: &Engine, needle: &[u8]) -> std::io::Result<bool> {
    let database = engine.layout().database.clone();
    let mut wal = database.clone().into_os_string();
    wal.push("-wal");
    for file in [database, wal.into()] {
        let bytes = match std::fs::read(&file) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        if bytes.windows(needle.len()).any(|window| window == needle) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Goal: `erase` removes the bytes from the database's files while every
/// event and hash stays and the chain verifies; reading erased content
/// says it was erased; a held session keeps what it shares and refuses
/// erasure; prune skips it (issue 12). Method: session A gets a host
/// write and a guest write of incompressible bytes each holding a unique
/// marker, plus a file whose bytes held session B also wrote; the markers
/// are found in `sandlog.db` + `-wal` before, and in neither after
/// `erase(A)`.
#[test]
fn erase_removes_the_bytes_from_the_files_and_keeps_what_a_hold_shares() -> TestResult {
    let root = TestRoot::new()?;
    let engine = &root.engine;
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let host_marker = format!("SANDLOG-ERASE-HOST-{unique}");
    let guest_marker = format!("SANDLOG-ERASE-GUEST-{unique}");
    let shared_marker = format!("SANDLOG-ERASE-SHARED-{unique}");
    let small_marker = format!("SANDLOG-ERASE-SMALL-{unique}");
    let secret = marked_bytes(host_marker.as_bytes(), 64 * 1024);
    // Small enough to lie in a b-tree leaf cell, not an overflow page:
    // cells move when pages split, and no copy may stay behind.
    let small_secret = marked_bytes(small_marker.as_bytes(), 1500);
    let guest_secret = marked_bytes(guest_marker.as_bytes(), 32 * 1024);
    let shared = marked_bytes(shared_marker.as_bytes(), 16 * 1024);

    let a = engine.create_session(BTreeMap::new())?.session_id;
    let b = engine.create_session(BTreeMap::new())?.session_id;
    engine.write_file(a, &path("secret.bin"), &secret, false)?;
    engine.write_file(a, &path("shared.bin"), &shared, false)?;
    engine.write_file(a, &path("small.bin"), &small_secret, false)?;
    engine.write_file(b, &path("copy.bin"), &shared, false)?;
    // Blobs of another session stored after A's, splitting the pages
    // that hold A's.
    let c = engine.create_session(BTreeMap::new())?.session_id;
    for index in 0..60 {
        let filler = marked_bytes(format!("filler {index}").as_bytes(), 1000 + 50 * index);
        engine.write_file(c, &path(&format!("filler/{index}.bin")), &filler, false)?;
    }
    // The guest writes its file from bytes given in hex, so the marker is
    // not in the code blob (which the erasure removes too).
    let run = engine.execute(
        a,
        &ExecRequest::python(format!(
            "open('guest.bin', 'wb').write(bytes.fromhex('{}'))\nprint('wrote')",
            hex(&guest_secret)
        )),
    )?;
    assert_eq!(run.files_written, vec![path("guest.bin")]);
    engine.hold(b, "litigation 42")?;
    let head = engine.head()?.position;
    let events_before = engine.head()?;

    for marker in [&host_marker, &guest_marker, &shared_marker, &small_marker] {
        assert!(
            in_database_files(engine, marker.as_bytes())?,
            "sanity: {marker} is not in the database's files before erasure"
        );
    }

    // A held session is never erased.
    match engine.erase(b, None, "test") {
        Err(error @ RuntimeError::Held { .. }) => assert_eq!(error.kind(), "held"),
        other => panic!("erasing a held session: {other:?}"),
    }

    let report = engine.erase(a, None, "test")?;
    // secret.bin, small.bin, guest.bin, the code, stdout and stderr;
    // shared.bin is held through B.
    assert_eq!(report.kept_for_hold, 1, "{report:?}");
    assert_eq!(report.erased, 6, "{report:?}");
    assert!(report.wal_cleared, "{report:?}");
    assert!(
        !in_database_files(engine, host_marker.as_bytes())?,
        "the host-written bytes survive erasure in the database's files"
    );
    assert!(
        !in_database_files(engine, guest_marker.as_bytes())?,
        "the guest-written bytes survive erasure in the database's files"
    );
    assert!(
        !in_database_files(engine, small_marker.as_bytes())?,
        "the small file's bytes survive erasure in the database's files"
    );
    assert!(
        in_database_files(engine, shared_marker.as_bytes())?,
        "the held session's bytes are gone"
    );

    // Every event and hash stays, one event records the erasure, and the
    // chain and read models verify.
    let after = engine.head()?;
    assert_eq!(after.position.0, events_before.position.0 + 1);
    let last = engine
        .raw_log()?
        .get(after.position)?
        .ok_or("no head event")?;
    match last.event()? {
        Some(Event::EvidenceErased(erased)) => {
            assert_eq!(erased.reason, "test");
            assert_eq!(erased.blobs.len(), 6);
            assert!(erased.blobs.contains(&Hash::of(&secret)));
            assert_eq!(erased.kept_for_hold, vec![Hash::of(&shared)]);
        }
        other => panic!("the last event is {other:?}"),
    }
    let verified = engine.verify(None, &|_| {})?;
    assert!(verified.ok, "{:?}", verified.read_model_mismatches);
    assert_eq!(verified.events, after.position.0);

    // Reading erased content says so.
    let at = Cut::Position(head);
    let mut out = Vec::new();
    match engine.read_file_at(a, &path("secret.bin"), at, &mut out) {
        Err(error @ RuntimeError::ContentErased { .. }) => {
            assert_eq!(error.kind(), "erased");
            let message = error.to_string();
            assert!(message.contains("erased"), "{message}");
            assert!(message.contains("test"), "{message}");
            assert!(
                message.contains(&Hash::of(&secret).to_string()),
                "{message}"
            );
        }
        other => panic!("reading erased content: {other:?}"),
    }
    assert!(out.is_empty());
    match engine.read_file_at(a, &path("guest.bin"), at, &mut Vec::new()) {
        Err(RuntimeError::ContentErased { .. }) => {}
        other => panic!("reading erased guest content: {other:?}"),
    }
    let record =
        engine.execution_record(a, sandlog_runtime::history::ExecSelector::Number(1), None)?;
    assert_eq!(record.code.state, "erased");
    assert_eq!(record.stdout.state, "erased");
    // What the hold protects is still whole, for both sessions.
    let mut copy = Vec::new();
    engine.read_file_at(b, &path("copy.bin"), Cut::Position(head), &mut copy)?;
    assert_eq!(copy, shared);
    let mut shared_in_a = Vec::new();
    engine.read_file_at(a, &path("shared.bin"), at, &mut shared_in_a)?;
    assert_eq!(shared_in_a, shared);
    let restored = tempfile::tempdir()?;
    let report = engine.restore(a, at, &restored.path().join("a"))?;
    let mut missing: Vec<(String, String)> = report
        .missing
        .iter()
        .map(|m| (m.path.as_str().to_owned(), m.reason.clone()))
        .collect();
    missing.sort();
    assert_eq!(
        missing,
        vec![
            ("guest.bin".to_owned(), "erased".to_owned()),
            ("secret.bin".to_owned(), "erased".to_owned()),
            ("small.bin".to_owned(), "erased".to_owned())
        ]
    );
    assert_eq!(report.files, 1);

    // Prune skips the held session (and only it), with reason "held".
    root.clock.advance(Duration::from_secs(3600));
    let pruned = engine.prune(&PrunePolicy::older_than(Duration::ZERO), false, &|_, _| {})?;
    assert_eq!(
        pruned.skipped_reasons.get(&b).map(String::as_str),
        Some("held"),
        "{pruned:?}"
    );
    assert!(pruned.deleted_sessions.contains(&a), "{pruned:?}");
    assert!(!pruned.deleted_sessions.contains(&b), "{pruned:?}");
    assert!(engine.layout().workspace(b).join("copy.bin").is_file());
    let verified = engine.verify(None, &|_| {})?;
    assert!(verified.ok, "{:?}", verified.read_model_mismatches);
    Ok(())
}

// ---------------------------------------------------------------------------
// Fork
// ---------------------------------------------------------------------------

/// Goal: a fork at a past position holds exactly the origin's files of
/// then, names the origin and position, and is independent of it (issue
/// 12). Method: an origin with host and guest writes (one past the
/// budget), then later overwrites, a delete and a new file; a fork at the
/// earlier position compared file by file with that past state; then
/// writes and an execution in the fork leave the origin unchanged.
#[test]
fn fork_at_a_past_position_has_the_files_of_then_and_is_independent() -> TestResult {
    let root = TestRoot::new()?;
    let engine = &root.engine;
    let origin = engine.create_session(BTreeMap::new())?.session_id;
    engine.write_file(origin, &path("notes.txt"), b"first notes", false)?;
    let run = engine.execute(
        origin,
        &python_with_budget(
            "import os\nos.makedirs('out', exist_ok=True)\n\
             open('out/small.txt', 'w').write('small ' * 10)\n\
             open('out/zbig.bin', 'wb').write(b'z' * 5000)\n"
                .to_owned(),
            1024,
        ),
    )?;
    assert_eq!(run.files_written.len(), 2);
    let then = engine.head()?.position;
    let past = engine.session_as_of(origin, Cut::Position(then))?;
    let files_then: BTreeMap<String, Vec<u8>> = read_tree(&engine.layout().workspace(origin))?;

    // Later changes to the origin.
    engine.write_file(origin, &path("notes.txt"), b"second notes", true)?;
    engine.delete_file(origin, &path("out/small.txt"), false)?;
    engine.execute(
        origin,
        &ExecRequest::python("open('later.txt', 'w').write('later')"),
    )?;

    let labels = BTreeMap::from([("purpose".to_owned(), "replay".to_owned())]);
    let fork = engine.fork(origin, Cut::Position(then), labels.clone())?;
    assert_eq!(fork.forked_from, origin);
    assert_eq!(fork.at, then.0);
    assert_eq!(fork.files, 2);
    assert_eq!(
        fork.missing
            .iter()
            .map(|m| (m.path.as_str(), m.reason.as_str()))
            .collect::<Vec<_>>(),
        vec![("out/zbig.bin", "too_large")]
    );
    let forked = fork.session_id;
    assert_ne!(forked, origin);

    // Its files are the origin's of then (the one not kept is absent).
    let mut expected = files_then.clone();
    expected.remove("out/zbig.bin");
    let fork_files = read_tree(&engine.layout().workspace(forked))?;
    assert_eq!(fork_files, expected);
    let summary = engine.session(forked)?;
    assert_eq!(summary.labels, labels);
    assert_eq!(summary.file_count, 2);
    for (name, bytes) in &expected {
        assert_eq!(&engine.read_file(forked, &path(name))?, bytes);
        let entry = past
            .state
            .files
            .get(&path(name))
            .ok_or("not in the past state")?;
        assert_eq!(Hash::of(bytes), entry.blake3);
    }

    // Its stream starts with session.created and session.forked naming the
    // origin and the position.
    let events = engine.session_events(forked)?;
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        vec![
            "session.created",
            "session.forked",
            "file.written",
            "file.written"
        ]
    );
    match events[1].event()? {
        Some(Event::SessionForked(forked_event)) => {
            assert_eq!(forked_event.from, origin);
            assert_eq!(forked_event.at, then.0);
            assert_eq!(forked_event.files, 2);
            assert_eq!(forked_event.missing, vec![path("out/zbig.bin")]);
        }
        other => panic!("second event of the fork is {other:?}"),
    }

    // Independent: writing in the fork changes nothing in the origin.
    let origin_before = read_tree(&engine.layout().workspace(origin))?;
    let origin_files_before = engine.list_files(origin, None)?;
    let origin_version = engine.session(origin)?.version;
    engine.write_file(forked, &path("notes.txt"), b"fork notes", true)?;
    engine.execute(
        forked,
        &ExecRequest::python(
            "import os\nos.remove('out/small.txt')\nopen('forked.txt', 'w').write('fork')",
        ),
    )?;
    assert_eq!(
        read_tree(&engine.layout().workspace(origin))?,
        origin_before
    );
    assert_eq!(engine.list_files(origin, None)?, origin_files_before);
    assert_eq!(engine.session(origin)?.version, origin_version);
    assert_eq!(
        engine.read_file(origin, &path("notes.txt"))?,
        b"second notes"
    );
    assert_eq!(engine.read_file(forked, &path("notes.txt"))?, b"fork notes");
    // And the origin's past is still readable from the fork's point.
    let mut notes = Vec::new();
    engine.read_file_at(origin, &path("notes.txt"), Cut::Position(then), &mut notes)?;
    assert_eq!(notes, b"first notes");
    let verified = engine.verify(None, &|_| {})?;
    assert!(verified.ok, "{:?}", verified.read_model_mismatches);
    Ok(())
}
