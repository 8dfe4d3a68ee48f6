//! End-to-end tests of the sandbox with the real guest runtimes
//! (`python.wasm`, `quickjs.wasm` from `scripts/fetch-runtimes.sh`).
//!
//! The runtimes are found in `$SANDLOG_RUNTIMES_DIR`, by default
//! `<repo>/.runtimes`; if they are missing the tests fail and say how to
//! fetch them (they never skip silently). Precompiled modules are shared
//! across tests and test runs in `$SANDLOG_TEST_CACHE_DIR`, by default
//! `<repo>/target/sandlog-test-cache`, so python.wasm is compiled once.
//! All tests in this binary share one `Sandbox` (one engine, one ticker),
//! which is also how an embedder uses it.
//!
//! Requirement ids (S2, S3, …) are defined in docs/requirements.md.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use sandlog_runtime::sandbox::limits::{MEMORY_BYTES_DEFAULT, OUTPUT_BYTES_DEFAULT};
use sandlog_runtime::sandbox::{
    CacheStats, CompileEvent, CompileObserver, ExecLimits, LoadedModule, ModuleOrigin, Outcome,
    ReadonlyMount, RunReport, RunRequest, Sandbox, SandboxError, javascript_args, python_args,
};
use tempfile::TempDir;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The path of a pinned runtime, or a failure telling how to get it.
fn runtime_path(file_name: &str) -> PathBuf {
    let dir = std::env::var_os("SANDLOG_RUNTIMES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_dir().join(".runtimes"));
    let path = dir.join(file_name);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/fetch-runtimes.sh (or set SANDLOG_RUNTIMES_DIR)",
        path.display()
    );
    path
}

fn shared_cache_dir() -> PathBuf {
    std::env::var_os("SANDLOG_TEST_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_dir().join("target").join("sandlog-test-cache"))
}

#[expect(
    clippy::expect_used,
    reason = "shared fixture: if it cannot be built, every test must fail"
)]
fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| Sandbox::new(&shared_cache_dir()).expect("sandbox"))
}

#[expect(
    clippy::expect_used,
    reason = "shared fixture: if it cannot be built, every test must fail"
)]
fn python() -> &'static LoadedModule {
    static PYTHON: OnceLock<LoadedModule> = OnceLock::new();
    PYTHON.get_or_init(|| {
        sandbox()
            .load(&runtime_path("python.wasm"))
            .expect("load python.wasm")
    })
}

#[expect(
    clippy::expect_used,
    reason = "shared fixture: if it cannot be built, every test must fail"
)]
fn quickjs() -> &'static LoadedModule {
    static QUICKJS: OnceLock<LoadedModule> = OnceLock::new();
    QUICKJS.get_or_init(|| {
        sandbox()
            .load(&runtime_path("quickjs.wasm"))
            .expect("load quickjs.wasm")
    })
}

/// Runs Python `code` in `workspace` under `limits`.
fn run_python(workspace: &Path, code: &str, limits: ExecLimits) -> Result<RunReport, SandboxError> {
    let mut request = RunRequest::new(workspace);
    request.args = python_args(code);
    request.limits = limits;
    sandbox().run(python(), request)
}

fn stdout_text(report: &RunReport) -> String {
    String::from_utf8_lossy(&report.stdout).into_owned()
}

/// Fails with the guest's stderr when the outcome is not the expected one.
fn assert_outcome(report: &RunReport, expected: Outcome) {
    assert_eq!(
        report.outcome,
        expected,
        "exit {:?}, trap {:?}\nstdout: {}\nstderr: {}",
        report.exit_code,
        report.trap_message,
        stdout_text(report),
        String::from_utf8_lossy(&report.stderr)
    );
}

// ---------------------------------------------------------------- basics

/// Goal: the smallest program runs and its output is captured exactly.
/// Method: `print(1)` under default limits.
#[test]
fn python_print_one_is_ok() -> TestResult {
    let workspace = TempDir::new()?;
    let report = run_python(workspace.path(), "print(1)", ExecLimits::default())?;
    assert_outcome(&report, Outcome::Ok);
    assert_eq!(report.exit_code, Some(0));
    assert_eq!(report.stdout, b"1\n");
    assert_eq!(report.stderr, b"");
    assert!(!report.stdout_truncated);
    assert!(!report.stderr_truncated);
    assert!(report.fuel_consumed > 0);
    assert!(report.memory_bytes_peak > 0);
    Ok(())
}

/// Goal: the guest starts in `/app`, so relative paths land in the
/// workspace. Method: print the cwd, write a relative file, find it on the
/// host.
#[test]
fn python_cwd_is_app_and_relative_paths_land_in_workspace() -> TestResult {
    let workspace = TempDir::new()?;
    let code = "import os\nprint(os.getcwd())\nopen('rel.txt', 'w').write('here')";
    let report = run_python(workspace.path(), code, ExecLimits::default())?;
    assert_outcome(&report, Outcome::Ok);
    assert_eq!(stdout_text(&report), "/app\n");
    assert_eq!(
        fs::read_to_string(workspace.path().join("rel.txt"))?,
        "here"
    );
    Ok(())
}

/// Goal: a file written in one run is read in the next (S3).
/// Method: two runs in the same workspace.
#[test]
fn python_file_persists_across_runs() -> TestResult {
    let workspace = TempDir::new()?;
    let write = run_python(
        workspace.path(),
        "open('/app/state.txt', 'w').write('42')",
        ExecLimits::default(),
    )?;
    assert_outcome(&write, Outcome::Ok);
    let read = run_python(
        workspace.path(),
        "print(open('state.txt').read())",
        ExecLimits::default(),
    )?;
    assert_outcome(&read, Outcome::Ok);
    assert_eq!(stdout_text(&read), "42\n");
    Ok(())
}

/// Goal: `sys.exit(3)` is the guest's own failure: `error` with code 3,
/// and `sys.exit(0)` is `ok`. Method: one run each.
#[test]
fn python_nonzero_exit_is_error_with_code() -> TestResult {
    let workspace = TempDir::new()?;
    let failed = run_python(
        workspace.path(),
        "import sys\nsys.exit(3)",
        ExecLimits::default(),
    )?;
    assert_outcome(&failed, Outcome::Error);
    assert_eq!(failed.exit_code, Some(3));
    assert_eq!(failed.trap_message, None);

    let succeeded = run_python(
        workspace.path(),
        "import sys\nsys.exit(0)",
        ExecLimits::default(),
    )?;
    assert_outcome(&succeeded, Outcome::Ok);
    assert_eq!(succeeded.exit_code, Some(0));

    let raised = run_python(workspace.path(), "1/0", ExecLimits::default())?;
    assert_outcome(&raised, Outcome::Error);
    assert_eq!(raised.exit_code, Some(1));
    assert!(String::from_utf8_lossy(&raised.stderr).contains("ZeroDivisionError"));
    Ok(())
}

/// Goal: `python_args`' `-S` and prelude leave imports working: the
/// standard library, and modules the guest wrote into `/app` earlier.
/// Method: import a spread of stdlib modules; write `helper.py`, import it
/// in the next run.
#[test]
fn python_stdlib_and_workspace_modules_import() -> TestResult {
    let workspace = TempDir::new()?;
    let stdlib = run_python(
        workspace.path(),
        "import json, csv, re, datetime, collections, math, os, pathlib, sqlite3\n\
         print(json.dumps({'n': math.floor(2.5)}), sorted(os.listdir('.')))\n\
         open('helper.py', 'w').write('def answer():\\n    return 42\\n')",
        ExecLimits::default(),
    )?;
    assert_outcome(&stdlib, Outcome::Ok);
    assert_eq!(stdout_text(&stdlib), "{\"n\": 2} []\n");
    let import = run_python(
        workspace.path(),
        "import helper\nprint(helper.answer())",
        ExecLimits::default(),
    )?;
    assert_outcome(&import, Outcome::Ok);
    assert_eq!(stdout_text(&import), "42\n");
    Ok(())
}

/// Goal: stdin, args and env reach the guest exactly as given, and no host
/// env leaks in. Method: echo them back.
#[test]
fn python_sees_only_given_stdin_and_env() -> TestResult {
    let workspace = TempDir::new()?;
    let mut request = RunRequest::new(workspace.path());
    request.args =
        python_args("import os, sys\nprint(sys.stdin.read(), dict(os.environ), sys.argv)");
    request.stdin = b"from stdin".to_vec();
    request.env = vec![("GREETING".to_owned(), "hello".to_owned())];
    let report = sandbox().run(python(), request)?;
    assert_outcome(&report, Outcome::Ok);
    assert_eq!(
        stdout_text(&report),
        "from stdin {'GREETING': 'hello'} ['-c']\n"
    );
    Ok(())
}

// ------------------------------------------------------------- isolation

/// Goal: `os.listdir('/app')` shows exactly the user's files: no metadata,
/// nothing of the sandbox's. Method: two host-written entries, list them.
#[test]
fn python_listdir_app_shows_only_user_files() -> TestResult {
    let workspace = TempDir::new()?;
    fs::write(workspace.path().join("data.csv"), "a,b\n")?;
    fs::create_dir(workspace.path().join("sub"))?;
    let report = run_python(
        workspace.path(),
        "import os\nprint(sorted(os.listdir('/app')))",
        ExecLimits::default(),
    )?;
    assert_outcome(&report, Outcome::Ok);
    assert_eq!(stdout_text(&report), "['data.csv', 'sub']\n");
    Ok(())
}

/// Goal: two workspaces cannot see each other's files (S2).
/// Method: write a secret in A; from B try `/app`, A's host path, and a
/// `..` walk to A's directory name.
#[test]
fn python_workspaces_are_isolated() -> TestResult {
    let parent = TempDir::new()?;
    let workspace_a = parent.path().join("a");
    let workspace_b = parent.path().join("b");
    fs::create_dir(&workspace_a)?;
    fs::create_dir(&workspace_b)?;
    let write = run_python(
        &workspace_a,
        "open('secret.txt', 'w').write('A only')",
        ExecLimits::default(),
    )?;
    assert_outcome(&write, Outcome::Ok);

    let probe = format!(
        "import os\n\
         print(os.listdir('/app'))\n\
         for path in [{host:?}, '/app/../a/secret.txt', '../a/secret.txt', '/a/secret.txt']:\n    \
             try:\n        open(path).read(); print('READ', path)\n    \
             except OSError as error:\n        print('denied', type(error).__name__)",
        host = workspace_a.join("secret.txt").display().to_string()
    );
    let report = run_python(&workspace_b, &probe, ExecLimits::default())?;
    assert_outcome(&report, Outcome::Ok);
    let stdout = stdout_text(&report);
    assert!(stdout.starts_with("[]\n"), "{stdout}");
    assert!(!stdout.contains("READ"), "{stdout}");
    assert_eq!(stdout.matches("denied").count(), 4, "{stdout}");
    Ok(())
}

/// Goal: host files outside the workspace are unreachable: `/etc/passwd`,
/// `..` escapes, and a guest-made symlink pointing out. Method: try each
/// from the guest; every attempt must raise.
#[test]
fn python_cannot_escape_workspace() -> TestResult {
    let workspace = TempDir::new()?;
    let probe = "import os\n\
        attempts = [\n    \
            lambda: open('/etc/passwd').read(),\n    \
            lambda: open('../etc/passwd').read(),\n    \
            lambda: os.listdir('/app/..'),\n    \
            lambda: os.listdir('/'),\n    \
            lambda: (os.symlink('/etc/passwd', 'link'), open('link').read()),\n    \
            lambda: (os.symlink('../../../../etc', 'up'), os.listdir('up')),\n]\n\
        for attempt in attempts:\n    \
            try:\n        attempt(); print('ESCAPED')\n    \
            except OSError:\n        print('denied')";
    let report = run_python(workspace.path(), probe, ExecLimits::default())?;
    assert_outcome(&report, Outcome::Ok);
    assert_eq!(stdout_text(&report), "denied\n".repeat(6));
    Ok(())
}

/// Goal: a read-only mount is readable but not writable, and appears only
/// where asked. Method: mount a host dir at `/data`, read, then try to write.
#[test]
fn python_readonly_mount_is_read_only() -> TestResult {
    let workspace = TempDir::new()?;
    let data = TempDir::new()?;
    fs::write(data.path().join("input.txt"), "vendored")?;
    let mut request = RunRequest::new(workspace.path());
    request.args = python_args(
        "print(open('/data/input.txt').read())\n\
         try:\n    open('/data/new.txt', 'w').write('x'); print('WROTE')\n\
         except OSError:\n    print('denied')",
    );
    request.readonly_mounts = vec![ReadonlyMount {
        host_path: data.path().to_path_buf(),
        guest_path: "/data".to_owned(),
    }];
    let report = sandbox().run(python(), request)?;
    assert_outcome(&report, Outcome::Ok);
    assert_eq!(stdout_text(&report), "vendored\ndenied\n");
    assert!(!data.path().join("new.txt").exists());
    Ok(())
}

// ---------------------------------------------------------------- limits

/// Goal: a busy loop ends as `timeout` within the configured bound.
/// Method: `while True: pass` with a 300 ms timeout and no fuel limit.
#[test]
fn python_busy_loop_times_out() -> TestResult {
    let workspace = TempDir::new()?;
    let timeout = Duration::from_millis(300);
    let limits = ExecLimits {
        fuel: None,
        timeout,
        ..ExecLimits::default()
    };
    let report = run_python(workspace.path(), "while True: pass", limits)?;
    assert_outcome(&report, Outcome::Timeout);
    assert_eq!(report.exit_code, None);
    assert!(report.duration >= timeout, "{:?}", report.duration);
    assert!(
        report.duration < timeout + Duration::from_secs(2),
        "{:?}",
        report.duration
    );
    Ok(())
}

/// Goal: sleeping cannot outlast the timeout (epochs only interrupt running
/// wasm; the sleep guard bounds `poll_oneoff`). Method: `time.sleep(60)`
/// under a 300 ms timeout.
#[test]
fn python_sleep_times_out() -> TestResult {
    let workspace = TempDir::new()?;
    let timeout = Duration::from_millis(300);
    let limits = ExecLimits {
        timeout,
        ..ExecLimits::default()
    };
    let report = run_python(workspace.path(), "import time\ntime.sleep(60)", limits)?;
    assert_outcome(&report, Outcome::Timeout);
    assert!(
        report.duration < timeout + Duration::from_secs(2),
        "{:?}",
        report.duration
    );

    // Short sleeps are untouched.
    let short = run_python(
        workspace.path(),
        "import time\nstart = time.monotonic()\ntime.sleep(0.05)\nprint(time.monotonic() - start >= 0.05)",
        ExecLimits::default(),
    )?;
    assert_outcome(&short, Outcome::Ok);
    assert_eq!(stdout_text(&short), "True\n");
    Ok(())
}

/// Goal: with a fuel limit and no practical timeout, a busy loop ends as
/// `out_of_fuel`, having burnt exactly its fuel (deterministic).
/// Method: `while True: pass` with 600 M fuel (start-up needs ~300 M).
#[test]
fn python_busy_loop_runs_out_of_fuel() -> TestResult {
    let workspace = TempDir::new()?;
    let fuel = 600_000_000;
    let limits = ExecLimits {
        fuel: Some(fuel),
        timeout: Duration::from_secs(60),
        ..ExecLimits::default()
    };
    let report = run_python(workspace.path(), "while True: pass", limits)?;
    assert_outcome(&report, Outcome::OutOfFuel);
    assert_eq!(report.exit_code, None);
    assert_eq!(report.fuel_consumed, fuel);
    Ok(())
}

/// Goal: allocating 4 GiB ends as `memory`, although CPython turns the
/// refused growth into `MemoryError` and exits 1. Method: sixteen 256 MiB
/// buffers under the default 256 MiB limit.
#[test]
fn python_allocating_4_gib_ends_as_memory() -> TestResult {
    let workspace = TempDir::new()?;
    let report = run_python(
        workspace.path(),
        "chunks = [bytearray(256 * 1024 * 1024) for _ in range(16)]",
        ExecLimits::default(),
    )?;
    assert_outcome(&report, Outcome::Memory);
    assert_eq!(report.exit_code, Some(1));
    assert!(String::from_utf8_lossy(&report.stderr).contains("MemoryError"));
    assert!(report.memory_bytes_peak <= MEMORY_BYTES_DEFAULT);
    Ok(())
}

/// Goal: a memory limit below the module's initial memory is the `memory`
/// outcome, not an instantiation error. Method: python.wasm (10 MiB
/// initial memory) under a 1 MiB limit.
#[test]
fn python_initial_memory_over_limit_is_memory() -> TestResult {
    let workspace = TempDir::new()?;
    let limits = ExecLimits {
        memory_bytes: 1024 * 1024,
        ..ExecLimits::default()
    };
    let report = run_python(workspace.path(), "print(1)", limits)?;
    assert_outcome(&report, Outcome::Memory);
    assert_eq!(report.exit_code, None);
    assert_eq!(report.stdout, b"");
    Ok(())
}

/// Goal: a guest that recovers from `MemoryError` and exits 0 is `ok`.
/// Method: catch the error, print, exit normally.
#[test]
fn python_recovered_memory_error_is_ok() -> TestResult {
    let workspace = TempDir::new()?;
    let report = run_python(
        workspace.path(),
        "try:\n    bytearray(1024 ** 3)\nexcept MemoryError:\n    print('recovered')",
        ExecLimits::default(),
    )?;
    assert_outcome(&report, Outcome::Ok);
    assert_eq!(stdout_text(&report), "recovered\n");
    Ok(())
}

/// Goal: printing 100 MB keeps exactly the cap, flags the truncation, and
/// the guest sees no write error (the run is still `ok`).
/// Method: 100 writes of 1 MB under the default 1 MiB cap.
#[test]
fn python_printing_100_mb_is_truncated_at_cap() -> TestResult {
    let workspace = TempDir::new()?;
    let report = run_python(
        workspace.path(),
        "import sys\nchunk = 'x' * 1_000_000\nfor _ in range(100):\n    sys.stdout.write(chunk)\n\
         sys.stderr.write('done')",
        ExecLimits::default(),
    )?;
    assert_outcome(&report, Outcome::Ok);
    assert_eq!(report.stdout.len(), OUTPUT_BYTES_DEFAULT);
    assert!(report.stdout.iter().all(|byte| *byte == b'x'));
    assert!(report.stdout_truncated);
    assert_eq!(report.stderr, b"done");
    assert!(!report.stderr_truncated);
    Ok(())
}

/// Goal: writing past the workspace quota ends as `quota`.
/// Method: a 2 MiB file under a 1 MiB quota; the guest exits normally, the
/// check after the run catches it.
#[test]
fn python_file_past_quota_ends_as_quota() -> TestResult {
    let workspace = TempDir::new()?;
    let limits = ExecLimits {
        workspace_bytes_max: 1024 * 1024,
        ..ExecLimits::default()
    };
    let report = run_python(
        workspace.path(),
        "open('big.bin', 'wb').write(b'0' * (2 * 1024 * 1024))",
        limits,
    )?;
    assert_outcome(&report, Outcome::Quota);
    Ok(())
}

/// Goal: the quota is also enforced while the guest runs: a guest that
/// fills its workspace and then keeps running is stopped as `quota` long
/// before its timeout. Method: write 2 MiB under a 1 MiB quota, then spin
/// under a 20 s timeout.
#[test]
fn python_quota_is_enforced_during_run() -> TestResult {
    let workspace = TempDir::new()?;
    let limits = ExecLimits {
        fuel: None,
        timeout: Duration::from_secs(20),
        workspace_bytes_max: 1024 * 1024,
        ..ExecLimits::default()
    };
    let report = run_python(
        workspace.path(),
        "f = open('big.bin', 'wb')\nf.write(b'0' * (2 * 1024 * 1024))\nf.flush()\nwhile True: pass",
        limits,
    )?;
    assert_outcome(&report, Outcome::Quota);
    assert!(
        report.duration < Duration::from_secs(5),
        "{:?}",
        report.duration
    );
    Ok(())
}

/// Goal: many empty files hit the entry cap as `quota`.
/// Method: 50 files under a 20-entry cap.
#[test]
fn python_too_many_files_ends_as_quota() -> TestResult {
    let workspace = TempDir::new()?;
    let limits = ExecLimits {
        workspace_entries_max: 20,
        ..ExecLimits::default()
    };
    let report = run_python(
        workspace.path(),
        "for i in range(50):\n    open(f'f{i}', 'w').close()",
        limits,
    )?;
    assert_outcome(&report, Outcome::Quota);
    Ok(())
}

// -------------------------------------------------------- requests, errors

/// Goal: bad requests are errors, not outcomes. Method: an out-of-range
/// limit, a mount over `/app`, and a missing workspace.
#[test]
fn invalid_requests_are_errors() -> TestResult {
    let workspace = TempDir::new()?;
    let too_much_memory = ExecLimits {
        memory_bytes: 8 * 1024 * 1024 * 1024,
        ..ExecLimits::default()
    };
    assert!(matches!(
        run_python(workspace.path(), "print(1)", too_much_memory),
        Err(SandboxError::InvalidLimit {
            name: "memory_bytes",
            ..
        })
    ));

    let mut over_app = RunRequest::new(workspace.path());
    over_app.readonly_mounts = vec![ReadonlyMount {
        host_path: workspace.path().to_path_buf(),
        guest_path: "/app/data".to_owned(),
    }];
    assert!(matches!(
        sandbox().run(python(), over_app),
        Err(SandboxError::InvalidRequest { .. })
    ));

    let missing = workspace.path().join("does-not-exist");
    assert!(matches!(
        run_python(&missing, "print(1)", ExecLimits::default()),
        Err(SandboxError::Preopen { .. })
    ));
    Ok(())
}

// --------------------------------------------------------- other runtimes

/// Writes the binary form of `wat` to `dir/name`.
fn write_module(dir: &Path, name: &str, wat: &str) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let path = dir.join(name);
    fs::write(&path, wat::parse_str(wat)?)?;
    Ok(path)
}

/// A WASI command that writes `text` to stdout, then calls
/// `proc_exit(exit_code)`.
fn hello_wat(text: &str, exit_code: i32) -> String {
    let escaped: String = text.bytes().map(|byte| format!("\\{byte:02x}")).collect();
    format!(
        r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "{escaped}")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const {length}))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $proc_exit (i32.const {exit_code}))))"#,
        length = text.len()
    )
}

/// Goal: any WASI command runs, and `proc_exit` codes map to `ok` (0) and
/// `error` (non-zero). Method: a hand-written module exiting 0, then 7.
#[test]
fn wasi_module_proc_exit_maps_to_outcome() -> TestResult {
    let modules = TempDir::new()?;
    let workspace = TempDir::new()?;
    let exit_zero = sandbox().load(&write_module(
        modules.path(),
        "zero.wasm",
        &hello_wat("hi\n", 0),
    )?)?;
    let report = sandbox().run(&exit_zero, RunRequest::new(workspace.path()))?;
    assert_outcome(&report, Outcome::Ok);
    assert_eq!(
        (report.exit_code, report.stdout.as_slice()),
        (Some(0), &b"hi\n"[..])
    );

    let exit_seven = sandbox().load(&write_module(
        modules.path(),
        "seven.wasm",
        &hello_wat("bye\n", 7),
    )?)?;
    let report = sandbox().run(&exit_seven, RunRequest::new(workspace.path()))?;
    assert_outcome(&report, Outcome::Error);
    assert_eq!(report.exit_code, Some(7));
    Ok(())
}

/// Goal: a guest trap is the `trap` outcome with wasmtime's message.
/// Method: a module whose `_start` executes `unreachable`.
#[test]
fn wasi_module_trap_is_trap_outcome() -> TestResult {
    let modules = TempDir::new()?;
    let workspace = TempDir::new()?;
    let wat = r#"(module (memory (export "memory") 1) (func (export "_start") unreachable))"#;
    let module = sandbox().load(&write_module(modules.path(), "trap.wasm", wat)?)?;
    let report = sandbox().run(&module, RunRequest::new(workspace.path()))?;
    assert_outcome(&report, Outcome::Trap);
    assert_eq!(report.exit_code, None);
    let message = report.trap_message.unwrap_or_default();
    assert!(message.contains("unreachable"), "{message}");
    Ok(())
}

/// Goal: modules that are not plain WASI commands are refused at load:
/// no `_start`, a non-WASI import, or an import of the sleep guard's inner
/// `poll_oneoff` (which would bypass the guard). Method: one module each.
#[test]
fn non_command_modules_are_refused() -> TestResult {
    let modules = TempDir::new()?;
    let no_start = write_module(
        modules.path(),
        "reactor.wasm",
        "(module (func (export \"run\")))",
    )?;
    assert!(matches!(
        sandbox().load(&no_start),
        Err(SandboxError::NotACommand { .. })
    ));

    let foreign = write_module(
        modules.path(),
        "foreign.wasm",
        r#"(module (import "env" "f" (func)) (func (export "_start")))"#,
    )?;
    assert!(matches!(
        sandbox().load(&foreign),
        Err(SandboxError::Link { .. })
    ));

    let bypass = write_module(
        modules.path(),
        "bypass.wasm",
        r#"(module (import "sandlog:inner" "poll_oneoff" (func (param i32 i32 i32 i32) (result i32)))
                   (func (export "_start")))"#,
    )?;
    assert!(matches!(
        sandbox().load(&bypass),
        Err(SandboxError::Link { .. })
    ));

    let garbage = modules.path().join("garbage.wasm");
    fs::write(&garbage, b"not wasm at all")?;
    assert!(matches!(
        sandbox().load(&garbage),
        Err(SandboxError::Compile { .. })
    ));
    Ok(())
}

/// Goal: the JavaScript runtime runs with `/app` as its cwd.
/// Method: quickjs.wasm evaluates code that prints and writes a file.
#[test]
fn javascript_runs_in_app() -> TestResult {
    let workspace = TempDir::new()?;
    let mut request = RunRequest::new(workspace.path());
    request.args = javascript_args("console.log(1 + 1); std.open('out.txt', 'w').puts('js');");
    let report = sandbox().run(quickjs(), request)?;
    assert_outcome(&report, Outcome::Ok);
    assert_eq!(stdout_text(&report), "2\n");
    assert_eq!(fs::read_to_string(workspace.path().join("out.txt"))?, "js");
    Ok(())
}

// ------------------------------------------------------- cache, threads

/// Goal: a corrupt precompiled artifact is detected and recompiled, never
/// trusted, and runs still work. Method: with a tiny WASI module (fast to
/// compile) in a private cache: compile, reload from the cache, overwrite
/// the artifact with garbage, load in a fresh `Sandbox`, run.
#[test]
fn corrupt_cache_artifact_is_recompiled() -> TestResult {
    let cache = TempDir::new()?;
    let modules = TempDir::new()?;
    let hello = write_module(modules.path(), "hello.wasm", &hello_wat("still works\n", 0))?;
    assert_eq!(
        Sandbox::new(cache.path())?.load(&hello)?.origin(),
        ModuleOrigin::Compiled
    );
    assert_eq!(
        Sandbox::new(cache.path())?.load(&hello)?.origin(),
        ModuleOrigin::CachedArtifact
    );

    let artifacts = files_with_extension(cache.path(), "cwasm")?;
    assert_eq!(artifacts.len(), 1, "{artifacts:?}");
    fs::write(&artifacts[0], b"\x7fELF this is not a wasmtime artifact")?;

    let fresh = Sandbox::new(cache.path())?;
    let recompiled = fresh.load(&hello)?;
    assert_eq!(recompiled.origin(), ModuleOrigin::Compiled);
    let workspace = TempDir::new()?;
    let report = fresh.run(&recompiled, RunRequest::new(workspace.path()))?;
    assert_outcome(&report, Outcome::Ok);
    assert_eq!(stdout_text(&report), "still works\n");
    assert_eq!(
        Sandbox::new(cache.path())?.load(&hello)?.origin(),
        ModuleOrigin::CachedArtifact
    );
    Ok(())
}

/// Every file under `dir`, at any depth, ending in `.extension`.
fn files_with_extension(dir: &Path, extension: &str) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            found.extend(files_with_extension(&path, extension)?);
        } else if path
            .extension()
            .is_some_and(|found_extension| found_extension == extension)
        {
            found.push(path);
        }
    }
    Ok(found)
}

/// Goal: two processes (here: two sandboxes with engines of their own,
/// whose file locks exclude each other exactly as two processes' do)
/// compiling python.wasm into the same empty cache directory at once both
/// succeed, compile it once between them, and leave a valid entry. Method:
/// start both loads together behind a barrier; count compiles, note which
/// one waited (it was told a compile started, then got the other's
/// artifact), run `print(1)` in both, and load the entry in a third.
#[test]
fn concurrent_first_loads_compile_once_and_leave_a_valid_entry() -> TestResult {
    use std::sync::{Arc, Barrier, Mutex};

    let cache = TempDir::new()?;
    let python_path = runtime_path("python.wasm");
    let barrier = Barrier::new(2);
    let results: Vec<Result<(ModuleOrigin, Vec<String>), String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let events = Arc::new(Mutex::new(Vec::new()));
                    let seen = Arc::clone(&events);
                    let observer = CompileObserver::new(move |event| {
                        let text = match event {
                            CompileEvent::Started { .. } => "started".to_owned(),
                            CompileEvent::Finished { origin, .. } => format!("finished {origin:?}"),
                            _ => "other".to_owned(),
                        };
                        seen.lock().unwrap_or_else(|e| e.into_inner()).push(text);
                    });
                    let sandbox = Sandbox::with_observer(cache.path(), Some(observer))
                        .map_err(|error| error.to_string())?;
                    barrier.wait();
                    let module = sandbox
                        .load(&python_path)
                        .map_err(|error| error.to_string())?;
                    let workspace = TempDir::new().map_err(|error| error.to_string())?;
                    let mut request = RunRequest::new(workspace.path());
                    request.args = python_args("print(1)");
                    let report = sandbox
                        .run(&module, request)
                        .map_err(|error| error.to_string())?;
                    if report.stdout != b"1\n" {
                        return Err(format!("stdout {:?}", report.stdout));
                    }
                    let events = events.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    Ok((module.origin(), events))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap_or_else(|_| Err("panicked".to_owned())))
            .collect()
    });
    let mut origins = Vec::new();
    for result in results {
        let (origin, events) = result?;
        // Both found the cache empty; the one that did not compile waited
        // for the other's artifact instead of compiling too.
        let expected = match origin {
            ModuleOrigin::Compiled => vec!["started", "finished Compiled"],
            ModuleOrigin::CachedArtifact => vec!["started", "finished CachedArtifact"],
        };
        assert_eq!(events, expected, "{origin:?}");
        origins.push(origin);
    }
    origins.sort_by_key(|origin| *origin == ModuleOrigin::CachedArtifact);
    assert_eq!(
        origins,
        vec![ModuleOrigin::Compiled, ModuleOrigin::CachedArtifact]
    );
    assert_eq!(files_with_extension(cache.path(), "cwasm")?.len(), 1);
    let third = Sandbox::new(cache.path())?;
    assert_eq!(
        third.load(&python_path)?.origin(),
        ModuleOrigin::CachedArtifact
    );
    assert_eq!(
        third.cache_stats(),
        CacheStats {
            compiled: 0,
            loaded: 1
        }
    );
    Ok(())
}

/// Goal: a second `load` of the same file is served from memory (same
/// module, no compile or read). Method: load twice, compare hashes and
/// time.
#[test]
fn second_load_is_from_memory() -> TestResult {
    let first = python();
    let started = std::time::Instant::now();
    let second = sandbox().load(&runtime_path("python.wasm"))?;
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(first.blake3(), second.blake3());
    Ok(())
}

/// Goal: concurrent runs in different workspaces work and stay isolated.
/// Method: four threads, each writing and listing its own workspace.
#[test]
fn concurrent_runs_are_isolated() -> TestResult {
    let workspaces: Vec<TempDir> = (0..4).map(|_| TempDir::new()).collect::<Result<_, _>>()?;
    let reports = std::thread::scope(|scope| {
        let handles: Vec<_> = workspaces
            .iter()
            .enumerate()
            .map(|(index, workspace)| {
                scope.spawn(move || {
                    let code = format!(
                        "import os\nopen('mine-{index}', 'w').write('x')\nprint(os.listdir('.'))"
                    );
                    run_python(workspace.path(), &code, ExecLimits::default())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("thread"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    for (index, report) in reports.iter().enumerate() {
        assert_outcome(report, Outcome::Ok);
        assert_eq!(stdout_text(report), format!("['mine-{index}']\n"));
    }
    Ok(())
}
