//! Witness cosigning latency (C2SP tlog-witness): the witness's decision
//! and cosignature in this process (signature check, consistency proof,
//! Ed25519 cosignature; no I/O), then `POST /add-checkpoint` against a
//! real `sandlog witness serve` process over loopback (one connection per
//! request, the state written and fsynced before each answer), then
//! `sandlog checkpoint` as a process with no witness, one and two.
//! Prints medians and p99s.
//!
//! Run: `make bench` or `cargo build --release -p sandlog-cli && cargo
//! bench -p sandlog-tests --bench witness`. `SANDLOG_BENCH_WITNESS_REQUESTS`
//! sets the request count (default 200); `SANDLOG_BENCH_BIN` another build
//! of the binary.

use std::collections::HashMap;
use std::error::Error;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandlog_core::cosignature::WitnessKey;
use sandlog_core::merkle::{self, Frontier, MerkleError, MerkleHash, NodeId, NodeSource};
use sandlog_core::note::{Checkpoint, SignerKey};
use sandlog_core::witness::AddCheckpoint;

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Leaves the benchmark's log starts with (proofs are about log2 of it).
const BASE_LEAVES: u64 = 100_000;

/// Leaves appended between two checkpoints.
const LEAVES_PER_CHECKPOINT: u64 = 7;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Every node of a tree, in memory.
#[derive(Default)]
struct Tree {
    frontier: Frontier,
    nodes: HashMap<NodeId, MerkleHash>,
}

impl NodeSource for Tree {
    type Error = MerkleError;
    fn node(&self, id: NodeId) -> Result<MerkleHash, MerkleError> {
        self.nodes
            .get(&id)
            .copied()
            .ok_or(MerkleError::RootMismatch)
    }
}

impl Tree {
    fn grow(&mut self, leaves: u64) {
        for _ in 0..leaves {
            let data = self.frontier.size().to_be_bytes();
            self.nodes.extend(self.frontier.append(&data));
        }
    }

    /// The request taking a witness at `old` to this tree's size.
    fn request(&self, key: &SignerKey, old: u64) -> BenchResult<AddCheckpoint> {
        let size = self.frontier.size();
        let note = Checkpoint {
            origin: key.name().to_owned(),
            size,
            root: self.frontier.root(),
            extensions: vec![],
        }
        .sign(key)?;
        let proof = if old == 0 {
            Vec::new()
        } else {
            merkle::consistency_proof(self, old, size)?
        };
        Ok(AddCheckpoint { old, proof, note })
    }
}

fn post(addr: SocketAddr, body: &str) -> BenchResult<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        stream,
        "POST /add-checkpoint HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").ok_or("no header end")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or("no status")?;
    Ok((status, body.to_owned()))
}

fn binary() -> BenchResult<PathBuf> {
    std::env::var_os("SANDLOG_BENCH_BIN")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::current_exe()
                .ok()?
                .parent()
                .and_then(Path::parent)
                .map(|dir| dir.join("sandlog"))
        })
        .filter(|path| path.is_file())
        .ok_or_else(|| {
            "the sandlog binary is not built: run `cargo build --release -p sandlog-cli` first"
                .into()
        })
}

/// A `sandlog witness serve` child; killed when dropped.
struct Served(Child, SocketAddr);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(binary: &Path, key: &Path, state: &Path, log_vkey: &str) -> BenchResult<Served> {
    let mut child = Command::new(binary)
        .args(["witness", "serve", "--listen", "127.0.0.1:0", "--key"])
        .arg(key)
        .arg("--state")
        .arg(state)
        .args(["--log", log_vkey])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .ok_or_else(|| format!("first line {line:?}"))?
        .parse()?;
    Ok(Served(child, addr))
}

fn main() -> BenchResult<()> {
    let requests: usize = std::env::var("SANDLOG_BENCH_WITNESS_REQUESTS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(200);
    let log_key = SignerKey::from_seed("sandlog.bench/log", [7; 32])?;
    let witness_key = WitnessKey::from_seed("witness.bench/w", [9; 32])?;
    let mut tree = Tree::default();
    tree.grow(BASE_LEAVES);

    // 1. The decision and the cosignature, in process.
    let mut pure = Vec::with_capacity(requests);
    let logs = [log_key.verifier()];
    let mut seen: Option<sandlog_core::witness::WitnessedHead> = None;
    let mut prepared = Vec::with_capacity(requests);
    for _ in 0..requests {
        let old = seen.map_or(0, |head| head.size);
        tree.grow(LEAVES_PER_CHECKPOINT);
        let request = tree.request(&log_key, old)?;
        let started = Instant::now();
        let checkpoint = request.verify_note(&logs)?;
        let head = request.check_extends(seen.as_ref(), &checkpoint)?;
        let line = witness_key.cosign(request.body()?, 1_700_000_000)?;
        pure.push(started.elapsed());
        assert!(line.starts_with('\u{2014}'));
        seen = Some(head);
        prepared.push(request);
    }
    pure.sort();

    // 2. Over HTTP against a real witness process, state fsynced.
    let binary = binary()?;
    let dir = tempfile::tempdir()?;
    let key_file = dir.path().join("witness.key");
    std::fs::write(&key_file, witness_key.to_private_string())?;
    let log_vkey = log_key.verifier().to_string();
    let served = serve(&binary, &key_file, &dir.path().join("state"), &log_vkey)?;
    let mut http = Vec::with_capacity(requests);
    for request in &prepared {
        let body = request.encode();
        let started = Instant::now();
        let (status, answer) = post(served.1, &body)?;
        http.push(started.elapsed());
        if status != 200 {
            return Err(format!("witness answered {status}: {answer}").into());
        }
    }
    http.sort();
    drop(served);

    // 3. `sandlog checkpoint` as a process: no witness, one, two.
    let runtimes = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".runtimes"));
    let root = dir.path().join("root");
    let sandlog = |args: &[&str]| {
        let mut command = Command::new(&binary);
        command
            .arg("--root")
            .arg(&root)
            .args(args)
            .env("SANDLOG_RUNTIMES_DIR", &runtimes)
            .env_remove("SANDLOG_KEY")
            .stdout(Stdio::null());
        command
    };
    if !sandlog(&["--json", "init"]).status()?.success() {
        return Err("init failed".into());
    }
    let log_key_file = dir.path().join("log.key");
    std::fs::write(&log_key_file, log_key.to_private_string())?;
    let log_key_path = log_key_file.to_str().ok_or("path")?.to_owned();
    let mut witnesses = Vec::new();
    for index in 0..2u8 {
        let key = WitnessKey::from_seed(&format!("witness.bench/cli{index}"), [index + 1; 32])?;
        let file = dir.path().join(format!("w{index}.key"));
        std::fs::write(&file, key.to_private_string())?;
        let served = serve(
            &binary,
            &file,
            &dir.path().join(format!("w{index}-state")),
            &log_vkey,
        )?;
        let flag = format!("http://{}={}", served.1, key.verifier());
        witnesses.push((served, flag));
    }
    let runs = 15;
    let mut rows = Vec::new();
    for count in 0..=2usize {
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            if !sandlog(&["session", "create"]).status()?.success() {
                return Err("session create failed".into());
            }
            let mut command = sandlog(&["checkpoint", "--key", &log_key_path]);
            for (_, flag) in witnesses.iter().take(count) {
                command.args(["--witness", flag]);
            }
            let started = Instant::now();
            let status = command.status()?;
            samples.push(started.elapsed());
            if !status.success() {
                return Err(format!("checkpoint with {count} witnesses failed").into());
            }
        }
        samples.sort();
        rows.push((count, samples));
    }

    println!();
    println!(
        "witness cosigning ({requests} checkpoints of a {BASE_LEAVES}-leaf log, +{LEAVES_PER_CHECKPOINT} leaves each)"
    );
    println!("                                         |   p50 ms |   p99 ms");
    println!("-----------------------------------------|----------|---------");
    println!(
        "decision + cosignature, in process       | {:8.3} | {:8.3}",
        ms(percentile(&pure, 0.5)),
        ms(percentile(&pure, 0.99))
    );
    println!(
        "POST /add-checkpoint, witness process    | {:8.3} | {:8.3}",
        ms(percentile(&http, 0.5)),
        ms(percentile(&http, 0.99))
    );
    for (count, samples) in &rows {
        println!(
            "`sandlog checkpoint`, {count} witness(es) ({runs}) | {:8.3} | {:8.3}",
            ms(percentile(samples, 0.5)),
            ms(percentile(samples, 0.99))
        );
    }
    Ok(())
}
