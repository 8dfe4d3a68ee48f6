//! Warm kernels: one guest instance kept alive between executions, on its
//! own thread, fed code frames through its stdin.
//!
//! # Protocol
//!
//! The guest (a driver program, see `sandlog_runtime::kernel`) reads frames from
//! fd 0: an 8-byte little-endian length, then that many bytes. After each
//! frame it writes its status (`sandlog-status:<code>`) to fd 0 and reads
//! again. The host serves fd 0 itself ([`kernel_fd_read`],
//! [`kernel_fd_write`]); every other descriptor goes to wasmtime-wasi
//! through the kernel trampoline.
//!
//! # Invariants
//!
//! * An execution is over when the guest asks fd 0 for bytes and none are
//!   left: the host sees that in its own `fd_read`, so the guest cannot end
//!   an execution early or late by writing anything anywhere (fd 1 and
//!   fd 2 are plain captured output, and a status write only sets the
//!   status).
//! * Each frame gets its own fuel, deadline and memory cap, set by the host
//!   at the moment it hands the frame over (inside the guest's `fd_read`,
//!   where the store is reachable), and its own capped stdout and stderr.
//! * Whatever breaks the protocol (no status, a trap, a limit, the guest
//!   ending) ends the kernel: the report says it is no longer alive, and
//!   the caller starts a fresh one.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::{Caller, Extern, InstancePre, Store};

use super::clock::GuestMonotonicClock;
use super::error::{boxed, engine_error};
use super::kernel_io::{Frame, Idle, KernelIo, Report, WasiIoFunc};
use super::limits::ExecLimits;
use super::output::CappedOutput;
use super::poll::{INNER_MODULE, POLL_ONEOFF};
use super::quota::{self, Usage};
use super::request::{Outcome, RunReport, RunRequest};
use super::run;
use super::signals::{CancelFlag, RunSignals};
use super::store::{Host, Interrupt, install_limits};
use super::ticker::Overdue;
use super::wasi::{self, GuestStdio};
use super::{LoadedModule, SandboxError, SandboxInner};

/// The trampoline of a kernel: as the sleep guard's (see `poll.rs`), plus
/// forwarders for `fd_read` and `fd_write`, which a kernel shadows to serve
/// fd 0. One instance, so a kernel takes no more pool instances than a run.
#[cfg_attr(
    not(test),
    expect(dead_code, reason = "the source of KERNEL_TRAMPOLINE_WASM")
)]
pub(crate) const KERNEL_TRAMPOLINE_WAT: &str = r#"
(module
  (import "guest" "memory" (memory 0))
  (import "sandlog:inner" "poll_oneoff" (func (param i32 i32 i32 i32) (result i32)))
  (import "sandlog:inner" "fd_read" (func (param i32 i32 i32 i32) (result i32)))
  (import "sandlog:inner" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
  (export "memory" (memory 0))
  (func (export "poll_oneoff") (param i32 i32 i32 i32) (result i32)
    (call 0 (local.get 0) (local.get 1) (local.get 2) (local.get 3)))
  (func (export "fd_read") (param i32 i32 i32 i32) (result i32)
    (call 1 (local.get 0) (local.get 1) (local.get 2) (local.get 3)))
  (func (export "fd_write") (param i32 i32 i32 i32) (result i32)
    (call 2 (local.get 0) (local.get 1) (local.get 2) (local.get 3))))
"#;

/// [`KERNEL_TRAMPOLINE_WAT`] in the binary format (a test checks they
/// agree).
pub(crate) const KERNEL_TRAMPOLINE_WASM: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x09, 0x01, 0x60, 0x04, 0x7f, 0x7f, 0x7f,
    0x7f, 0x01, 0x7f, 0x02, 0x5e, 0x04, 0x05, 0x67, 0x75, 0x65, 0x73, 0x74, 0x06, 0x6d, 0x65, 0x6d,
    0x6f, 0x72, 0x79, 0x02, 0x00, 0x00, 0x0d, 0x73, 0x61, 0x6e, 0x64, 0x6c, 0x6f, 0x67, 0x3a, 0x69,
    0x6e, 0x6e, 0x65, 0x72, 0x0b, 0x70, 0x6f, 0x6c, 0x6c, 0x5f, 0x6f, 0x6e, 0x65, 0x6f, 0x66, 0x66,
    0x00, 0x00, 0x0d, 0x73, 0x61, 0x6e, 0x64, 0x6c, 0x6f, 0x67, 0x3a, 0x69, 0x6e, 0x6e, 0x65, 0x72,
    0x07, 0x66, 0x64, 0x5f, 0x72, 0x65, 0x61, 0x64, 0x00, 0x00, 0x0d, 0x73, 0x61, 0x6e, 0x64, 0x6c,
    0x6f, 0x67, 0x3a, 0x69, 0x6e, 0x6e, 0x65, 0x72, 0x08, 0x66, 0x64, 0x5f, 0x77, 0x72, 0x69, 0x74,
    0x65, 0x00, 0x00, 0x03, 0x04, 0x03, 0x00, 0x00, 0x00, 0x07, 0x2d, 0x04, 0x06, 0x6d, 0x65, 0x6d,
    0x6f, 0x72, 0x79, 0x02, 0x00, 0x0b, 0x70, 0x6f, 0x6c, 0x6c, 0x5f, 0x6f, 0x6e, 0x65, 0x6f, 0x66,
    0x66, 0x00, 0x03, 0x07, 0x66, 0x64, 0x5f, 0x72, 0x65, 0x61, 0x64, 0x00, 0x04, 0x08, 0x66, 0x64,
    0x5f, 0x77, 0x72, 0x69, 0x74, 0x65, 0x00, 0x05, 0x0a, 0x28, 0x03, 0x0c, 0x00, 0x20, 0x00, 0x20,
    0x01, 0x20, 0x02, 0x20, 0x03, 0x10, 0x00, 0x0b, 0x0c, 0x00, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02,
    0x20, 0x03, 0x10, 0x01, 0x0b, 0x0c, 0x00, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0x20, 0x03, 0x10,
    0x02, 0x0b,
];

/// The shadowed read function's name.
pub(crate) const FD_READ: &str = "fd_read";
/// The shadowed write function's name.
pub(crate) const FD_WRITE: &str = "fd_write";

/// What a kernel's guest writes to fd 0 after each frame, followed by its
/// exit-code-like status in decimal.
pub const STATUS_PREFIX: &[u8] = b"sandlog-status:";

/// Longest status write the host keeps, bytes; longer ones are a protocol
/// break (the status is a prefix and an `i32`).
const STATUS_BYTES_MAX: usize = 64;

/// Most iovecs one `fd_read`/`fd_write` on fd 0 may pass (WASI's own
/// `IOV_MAX` is 1024).
const IOVECS_MAX: u32 = 1024;

/// How long after an execution's deadline the host still waits for the
/// kernel to report: the epoch check stops a running guest within a tick
/// or two; a guest blocked in a host call past this is abandoned.
pub const KERNEL_REPORT_GRACE: Duration = Duration::from_secs(5);

/// Stack of a kernel's thread. wasm frames use it (wasmtime's default
/// `max_wasm_stack` is 512 KiB) and the host calls under them need room.
const KERNEL_THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

/// WASI errno `badf`.
const ERRNO_BADF: i32 = 8;
/// WASI errno `fault`.
const ERRNO_FAULT: i32 = 21;
/// WASI errno `inval`.
const ERRNO_INVAL: i32 = 28;

/// How a kernel execution ended.
#[derive(Debug)]
pub struct KernelRun {
    /// What a one-shot run would report.
    pub report: RunReport,
    /// Whether the kernel can take another frame. `false`: drop it.
    pub alive: bool,
    /// Why it is not alive, when it is not.
    pub ended: Option<String>,
    /// The guest's linear memory now, bytes.
    pub memory_bytes: u64,
}

/// A guest kept alive between executions. Dropping it closes its stdin:
/// an idle guest's pending read fails and its thread ends.
pub struct Kernel {
    frames: Option<SyncSender<Frame>>,
    reports: Receiver<Report>,
    thread: Option<JoinHandle<()>>,
    stdout: CappedOutput,
    stderr: CappedOutput,
    workspace: std::path::PathBuf,
    /// The directories the guest can open files under, for [`Overdue`].
    open_dirs: Arc<[std::path::PathBuf]>,
    overdue: Arc<Overdue>,
    alive: bool,
    memory_bytes: u64,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Kernel")
            .field("workspace", &self.workspace)
            .field("alive", &self.alive)
            .field("memory_bytes", &self.memory_bytes)
            .finish_non_exhaustive()
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        self.frames = None;
        if let Some(thread) = self.thread.take() {
            // An idle guest ends at once (its read fails); one that is still
            // running (abandoned past its deadline) is left to its epoch
            // check, off this thread.
            if self.alive {
                let _ = thread.join();
            }
        }
    }
}

impl Kernel {
    /// Starts `module` per `request` (its args run the driver) on a thread
    /// of its own and waits until the guest first asks for a frame.
    pub(crate) fn start(
        sandbox: Arc<SandboxInner>,
        module: &LoadedModule,
        mut request: RunRequest<'_>,
    ) -> Result<(Kernel, RunReport), SandboxError> {
        request.limits.validate()?;
        wasi::validate_request(&request)?;
        let limits = request.limits.clone();
        let started = Instant::now();
        let stdout = CappedOutput::new(limits.stdout_bytes_max);
        let stderr = CappedOutput::new(limits.stderr_bytes_max);
        let guest_clock = GuestMonotonicClock::new(started);
        let stdio = GuestStdio {
            stdout: stdout.clone(),
            stderr: stderr.clone(),
            clock: guest_clock,
        };
        let wasi_ctx = wasi::build_context(module.argv0(), &mut request, stdio)?;
        let mut host = Host::new(wasi_ctx, &limits, request.workspace, started, guest_clock);
        let (frames_tx, frames_rx) = mpsc::sync_channel::<Frame>(1);
        let (reports_tx, reports_rx) = mpsc::sync_channel::<Report>(1);
        host.kernel = Some(Box::new(KernelIo {
            frames: frames_rx,
            reports: reports_tx.clone(),
            pending: Vec::new(),
            offset: 0,
            status: None,
            status_overlong: false,
            inner_fd_read: None,
            inner_fd_write: None,
        }));
        if !wasmtime::Engine::same(&sandbox.engine, module.instance_pre().module().engine()) {
            return Err(SandboxError::ForeignModule);
        }
        let instance_pre = sandbox.kernel_instance_pre(module)?;
        let overdue = Arc::clone(&sandbox.overdue);
        let open_dirs = request.open_dirs();
        let fuel = limits.fuel.unwrap_or(u64::MAX);
        let thread = std::thread::Builder::new()
            .name("sandlog-kernel".to_owned())
            .stack_size(KERNEL_THREAD_STACK_BYTES)
            .spawn(move || {
                kernel_thread(&sandbox, &instance_pre, host, fuel, &reports_tx);
            })
            .map_err(|error| SandboxError::KernelStart {
                reason: format!("could not start the kernel thread: {error}"),
            })?;
        let mut kernel = Kernel {
            frames: Some(frames_tx),
            reports: reports_rx,
            thread: Some(thread),
            stdout,
            stderr,
            workspace: request.workspace.to_path_buf(),
            open_dirs,
            overdue,
            alive: true,
            memory_bytes: 0,
        };
        let wait = limits.timeout.saturating_add(KERNEL_REPORT_GRACE);
        match kernel.reports.recv_timeout(wait) {
            Ok(Report::Idle(idle)) => {
                kernel.memory_bytes = idle.memory_bytes;
                let (stdout, stdout_truncated) = kernel.stdout.take();
                let (stderr, stderr_truncated) = kernel.stderr.take();
                let report = RunReport {
                    outcome: Outcome::Ok,
                    exit_code: None,
                    stdout,
                    stderr,
                    stdout_truncated,
                    stderr_truncated,
                    fuel_consumed: fuel.saturating_sub(idle.fuel_left),
                    memory_bytes_peak: idle.memory_bytes,
                    duration: started.elapsed(),
                    trap_message: None,
                };
                Ok((kernel, report))
            }
            Ok(Report::Failed(error)) => {
                kernel.alive = false;
                Err(error)
            }
            Ok(Report::Ended { ending, .. }) => {
                kernel.alive = false;
                let (_, _) = kernel.stdout.take();
                let (stderr, _) = kernel.stderr.take();
                Err(SandboxError::KernelStart {
                    reason: format!(
                        "the driver ended before its first frame ({}{}){}",
                        ending.outcome.as_str(),
                        ending
                            .trap_message
                            .map_or(String::new(), |message| format!(": {message}")),
                        tail(&stderr)
                    ),
                })
            }
            Err(_) => {
                kernel.alive = false;
                Err(SandboxError::KernelStart {
                    reason: format!(
                        "the driver did not ask for its first frame within {} ms",
                        wait.as_millis()
                    ),
                })
            }
        }
    }

    /// The guest's linear memory after its last execution, bytes.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes
    }

    /// Whether the kernel can take another frame.
    pub fn is_alive(&self) -> bool {
        self.alive
    }

    /// Runs one frame under `limits` (fuel, timeout, memory and output are
    /// this execution's own) and reports as a one-shot run would, plus
    /// whether the kernel survived.
    ///
    /// # Errors
    ///
    /// [`SandboxError::InvalidLimit`] for limits out of range;
    /// [`SandboxError::Measure`] if the workspace cannot be measured after
    /// the run. A guest hitting a limit is an `Ok` report.
    pub fn execute(
        &mut self,
        input: Vec<u8>,
        limits: &ExecLimits,
    ) -> Result<KernelRun, SandboxError> {
        self.execute_signalled(input, limits, None)
    }

    /// [`Kernel::execute`] with a cancel flag and a live-output sink for
    /// this frame only. A cancelled frame ends the kernel (the guest is
    /// stopped mid-code, so its state cannot be trusted).
    ///
    /// # Errors
    ///
    /// As [`Kernel::execute`].
    pub fn execute_signalled(
        &mut self,
        input: Vec<u8>,
        limits: &ExecLimits,
        signals: Option<&RunSignals>,
    ) -> Result<KernelRun, SandboxError> {
        limits.validate()?;
        self.stdout.reset(limits.stdout_bytes_max);
        self.stderr.reset(limits.stderr_bytes_max);
        let cancel = run::attach_signals(signals, &self.stdout, &self.stderr);
        let result = self.execute_frame(input, limits, cancel);
        // The sink belongs to this frame only.
        run::attach_signals(None, &self.stdout, &self.stderr);
        result
    }

    fn execute_frame(
        &mut self,
        input: Vec<u8>,
        limits: &ExecLimits,
        cancel: Option<CancelFlag>,
    ) -> Result<KernelRun, SandboxError> {
        let started = Instant::now();
        let fuel = limits.fuel.unwrap_or(u64::MAX);
        let mut frame = Vec::with_capacity(input.len().saturating_add(8));
        frame.extend_from_slice(&(input.len() as u64).to_le_bytes());
        frame.extend_from_slice(&input);
        // A frame blocked in a host call past its deadline is unblocked,
        // so the kernel reports (ending in `timeout`) instead of being
        // abandoned with its thread stuck.
        let watch = self
            .overdue
            .watch(started + limits.timeout, Arc::clone(&self.open_dirs));
        let sent = match (&self.frames, self.alive) {
            (Some(frames), true) => frames
                .send(Frame {
                    input: frame,
                    fuel,
                    deadline: started + limits.timeout,
                    memory_bytes: limits.memory_bytes,
                    cancel,
                })
                .is_ok(),
            _ => false,
        };
        let received = if sent {
            self.reports
                .recv_timeout(limits.timeout.saturating_add(KERNEL_REPORT_GRACE))
        } else {
            Err(RecvTimeoutError::Disconnected)
        };
        drop(watch);
        let duration = started.elapsed();
        let mut ended = None;
        let (outcome, exit_code, fuel_left, trap_message) = match received {
            Ok(Report::Idle(idle)) => {
                self.memory_bytes = idle.memory_bytes;
                match parse_status(idle.status.as_deref()) {
                    _ if idle.memory_refused => {
                        ended = Some("the execution ran out of memory".to_owned());
                        (Outcome::Memory, Some(1), idle.fuel_left, None)
                    }
                    Some(0) => (Outcome::Ok, Some(0), idle.fuel_left, None),
                    Some(code) => (Outcome::Error, Some(code), idle.fuel_left, None),
                    None => {
                        let reason = "the guest asked for its next frame without reporting a \
                                      status (it read fd 0 itself, or broke the protocol)";
                        ended = Some(reason.to_owned());
                        (
                            Outcome::Error,
                            None,
                            idle.fuel_left,
                            Some(reason.to_owned()),
                        )
                    }
                }
            }
            Ok(Report::Ended {
                ending,
                fuel_left,
                memory_bytes,
            }) => {
                self.memory_bytes = memory_bytes;
                ended = Some(match &ending.trap_message {
                    Some(message) => format!("{}: {message}", ending.outcome.as_str()),
                    None => format!(
                        "the guest ended ({}, exit code {})",
                        ending.outcome.as_str(),
                        ending
                            .exit_code
                            .map_or_else(|| "none".to_owned(), |code| code.to_string())
                    ),
                });
                (
                    ending.outcome,
                    ending.exit_code,
                    fuel_left,
                    ending.trap_message,
                )
            }
            Ok(Report::Failed(error)) => {
                ended = Some(error.to_string());
                (Outcome::Trap, None, fuel, Some(error.to_string()))
            }
            Err(RecvTimeoutError::Timeout) => {
                let message = format!(
                    "{} (the kernel did not report within {} ms of its deadline and was abandoned)",
                    Interrupt::Timeout,
                    KERNEL_REPORT_GRACE.as_millis()
                );
                ended = Some(message.clone());
                (Outcome::Timeout, None, fuel, Some(message))
            }
            Err(RecvTimeoutError::Disconnected) => {
                let message = "the kernel had already ended".to_owned();
                ended = Some(message.clone());
                (Outcome::Trap, None, fuel, Some(message))
            }
        };
        if ended.is_some() {
            self.alive = false;
            self.frames = None;
        }
        // As after a one-shot run, the final measure is authoritative; a
        // kernel over its quota is ended too (its open files may hold it).
        let (outcome, trap_message) = match quota::measure(
            &self.workspace,
            limits.workspace_bytes_max,
            limits.workspace_entries_max,
        ) {
            Ok(Usage::Exceeded) if outcome != Outcome::Quota => {
                if ended.is_none() {
                    ended = Some(Interrupt::Quota.to_string());
                    self.alive = false;
                    self.frames = None;
                }
                (Outcome::Quota, Some(Interrupt::Quota.to_string()))
            }
            Ok(_) => (outcome, trap_message),
            Err(source) => {
                return Err(SandboxError::Measure {
                    path: self.workspace.clone(),
                    source,
                });
            }
        };
        let (stdout, stdout_truncated) = self.stdout.take();
        let (stderr, stderr_truncated) = self.stderr.take();
        Ok(KernelRun {
            report: RunReport {
                outcome,
                exit_code,
                stdout,
                stderr,
                stdout_truncated,
                stderr_truncated,
                fuel_consumed: fuel.saturating_sub(fuel_left),
                memory_bytes_peak: self.memory_bytes,
                duration,
                trap_message,
            },
            alive: self.alive,
            ended,
            memory_bytes: self.memory_bytes,
        })
    }
}

/// The last lines of a failed driver's stderr, for an error message.
fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim_end();
    if text.is_empty() {
        return String::new();
    }
    let start = text.len().saturating_sub(400);
    let start = (start..text.len())
        .find(|index| text.is_char_boundary(*index))
        .unwrap_or(text.len());
    format!("; stderr: {}", &text[start..])
}

/// The status a guest wrote, if it is `sandlog-status:<i32>`.
fn parse_status(status: Option<&[u8]>) -> Option<i32> {
    let digits = status?.strip_prefix(STATUS_PREFIX)?;
    std::str::from_utf8(digits).ok()?.trim().parse().ok()
}

/// The kernel's thread: owns the store for the kernel's whole life.
fn kernel_thread(
    sandbox: &SandboxInner,
    instance_pre: &InstancePre<Host>,
    host: Host,
    fuel: u64,
    reports: &SyncSender<Report>,
) {
    let (linker, trampoline) = match sandbox.kernel_parts() {
        Ok(parts) => parts,
        Err(error) => {
            let _ = reports.send(Report::Failed(error));
            return;
        }
    };
    let mut store = Store::new(&sandbox.engine, host);
    if let Err(error) = install_limits(&mut store, fuel) {
        let _ = reports.send(Report::Failed(error));
        return;
    }
    let call_result = match instance_pre.instantiate(&mut store) {
        Ok(instance) => {
            if let Err(error) = link_trampoline(linker, trampoline, &mut store, &instance) {
                let _ = reports.send(Report::Failed(error));
                return;
            }
            match instance.get_typed_func::<(), ()>(&mut store, "_start") {
                Ok(start) => start.call(&mut store, ()),
                Err(error) => {
                    let _ = reports.send(Report::Failed(SandboxError::Instantiate {
                        source: boxed(error),
                    }));
                    return;
                }
            }
        }
        Err(_) if store.data().limiter.memory_refused() => Err(wasmtime::format_err!(
            "initial linear memory exceeds the memory limit"
        )),
        Err(error) => {
            let _ = reports.send(Report::Failed(SandboxError::Instantiate {
                source: boxed(error),
            }));
            return;
        }
    };
    let fuel_left = store.get_fuel().unwrap_or(0);
    let memory_refused = store.data().limiter.memory_refused();
    let memory_bytes = store.data().limiter.memory_bytes_peak();
    // The host closing the kernel is how an idle kernel is dropped; nobody
    // waits for that report.
    let closed = matches!(
        call_result
            .as_ref()
            .err()
            .and_then(|error| error.downcast_ref::<Interrupt>()),
        Some(Interrupt::KernelClosed)
    );
    // Release the instance (its pool slot) before reporting.
    drop(store);
    if closed {
        return;
    }
    let ending = run::classify(call_result, memory_refused);
    let _ = reports.send(Report::Ended {
        ending,
        fuel_left,
        memory_bytes,
    });
}

/// Instantiates the kernel trampoline over the guest's memory and hands
/// the guards their ways to wasmtime-wasi's functions.
fn link_trampoline(
    linker: &wasmtime::Linker<Host>,
    trampoline: &wasmtime::Module,
    store: &mut Store<Host>,
    instance: &wasmtime::Instance,
) -> Result<(), SandboxError> {
    let Some(memory) = instance.get_memory(&mut *store, "memory") else {
        return Err(SandboxError::KernelStart {
            reason: "the guest exports no memory".to_owned(),
        });
    };
    let mut imports: Vec<Extern> = vec![memory.into()];
    for name in [POLL_ONEOFF, FD_READ, FD_WRITE] {
        imports.push(
            linker
                .get(&mut *store, INNER_MODULE, name)
                .map_err(engine_error)?,
        );
    }
    let trampoline =
        wasmtime::Instance::new(&mut *store, trampoline, &imports).map_err(|error| {
            SandboxError::Instantiate {
                source: boxed(error),
            }
        })?;
    let get = |store: &mut Store<Host>, name: &str| {
        trampoline
            .get_typed_func::<(i32, i32, i32, i32), i32>(&mut *store, name)
            .map_err(engine_error)
    };
    let poll = get(store, POLL_ONEOFF)?;
    let read = get(store, FD_READ)?;
    let write = get(store, FD_WRITE)?;
    let host = store.data_mut();
    host.inner_poll_oneoff = Some(poll);
    if let Some(kernel) = host.kernel.as_mut() {
        kernel.inner_fd_read = Some(read);
        kernel.inner_fd_write = Some(write);
    }
    Ok(())
}

/// `(base, len)` pairs of an iovec array in guest memory, or `None` if it
/// is out of bounds.
fn iovecs(memory: &[u8], iovs: i32, iovs_len: i32) -> Option<Vec<(usize, usize)>> {
    let count = u32::try_from(iovs_len).ok()?;
    if count > IOVECS_MAX {
        return None;
    }
    let start = usize::try_from(u32::try_from(iovs).ok()?).ok()?;
    let mut out = Vec::with_capacity(count as usize);
    for index in 0..count as usize {
        let at = start.checked_add(index.checked_mul(8)?)?;
        let entry = memory.get(at..at.checked_add(8)?)?;
        let base = u32::from_le_bytes(entry.get(0..4)?.try_into().ok()?) as usize;
        let len = u32::from_le_bytes(entry.get(4..8)?.try_into().ok()?) as usize;
        memory.get(base..base.checked_add(len)?)?;
        out.push((base, len));
    }
    Some(out)
}

fn write_u32(memory: &mut [u8], at: i32, value: u32) -> bool {
    let Ok(at) = u32::try_from(at) else {
        return false;
    };
    let at = at as usize;
    match at.checked_add(4).and_then(|end| memory.get_mut(at..end)) {
        Some(slot) => {
            slot.copy_from_slice(&value.to_le_bytes());
            true
        }
        None => false,
    }
}

fn forward(
    mut caller: Caller<'_, Host>,
    inner: Option<WasiIoFunc>,
    args: (i32, i32, i32, i32),
) -> wasmtime::Result<i32> {
    match inner {
        Some(inner) => inner.call(&mut caller, args),
        None => Err(wasmtime::format_err!(
            "fd_read/fd_write need the guest's `memory` export"
        )),
    }
}

/// `fd_read` of a kernel: fd 0 is the host's frames; anything else goes to
/// wasmtime-wasi.
pub(crate) fn kernel_fd_read(
    mut caller: Caller<'_, Host>,
    fd: i32,
    iovs: i32,
    iovs_len: i32,
    nread: i32,
) -> wasmtime::Result<i32> {
    let Some(kernel) = caller.data().kernel.as_ref() else {
        return Err(wasmtime::format_err!("kernel fd_read outside a kernel"));
    };
    if fd != 0 {
        let inner = kernel.inner_fd_read.clone();
        return forward(caller, inner, (fd, iovs, iovs_len, nread));
    }
    if kernel.offset >= kernel.pending.len() {
        wait_for_frame(&mut caller)?;
    }
    let Some(memory) = caller.get_export("memory").and_then(Extern::into_memory) else {
        return Ok(ERRNO_BADF);
    };
    let (bytes, host) = memory.data_and_store_mut(&mut caller);
    let Some(kernel) = host.kernel.as_mut() else {
        return Ok(ERRNO_BADF);
    };
    let Some(vectors) = iovecs(bytes, iovs, iovs_len) else {
        return Ok(ERRNO_FAULT);
    };
    let mut total: usize = 0;
    for (base, len) in vectors {
        let left = kernel.pending.len().saturating_sub(kernel.offset);
        let take = len.min(left);
        if take == 0 {
            break;
        }
        // Both ranges are in bounds: `iovecs` checked the guest's, and
        // `take` is at most what is left of the frame.
        let (Some(to), Some(from)) = (
            bytes.get_mut(base..base + take),
            kernel.pending.get(kernel.offset..kernel.offset + take),
        ) else {
            return Ok(ERRNO_FAULT);
        };
        to.copy_from_slice(from);
        kernel.offset += take;
        total += take;
    }
    if kernel.offset >= kernel.pending.len() {
        kernel.pending = Vec::new();
        kernel.offset = 0;
    }
    let total = u32::try_from(total).unwrap_or(u32::MAX);
    if !write_u32(bytes, nread, total) {
        return Ok(ERRNO_FAULT);
    }
    Ok(0)
}

/// `fd_write` of a kernel: fd 0 takes the guest's status; anything else
/// goes to wasmtime-wasi.
pub(crate) fn kernel_fd_write(
    mut caller: Caller<'_, Host>,
    fd: i32,
    iovs: i32,
    iovs_len: i32,
    nwritten: i32,
) -> wasmtime::Result<i32> {
    let Some(kernel) = caller.data().kernel.as_ref() else {
        return Err(wasmtime::format_err!("kernel fd_write outside a kernel"));
    };
    if fd != 0 {
        let inner = kernel.inner_fd_write.clone();
        return forward(caller, inner, (fd, iovs, iovs_len, nwritten));
    }
    let Some(memory) = caller.get_export("memory").and_then(Extern::into_memory) else {
        return Ok(ERRNO_BADF);
    };
    let (bytes, host) = memory.data_and_store_mut(&mut caller);
    let Some(kernel) = host.kernel.as_mut() else {
        return Ok(ERRNO_BADF);
    };
    let Some(vectors) = iovecs(bytes, iovs, iovs_len) else {
        return Ok(ERRNO_FAULT);
    };
    let mut status = Vec::new();
    let mut total: usize = 0;
    for (base, len) in vectors {
        total = total.saturating_add(len);
        if status.len() + len <= STATUS_BYTES_MAX
            && let Some(part) = bytes.get(base..base + len)
        {
            status.extend_from_slice(part);
        }
    }
    if total > STATUS_BYTES_MAX {
        kernel.status_overlong = true;
        kernel.status = None;
        return Ok(ERRNO_INVAL);
    }
    kernel.status = Some(status);
    let total = u32::try_from(total).unwrap_or(u32::MAX);
    if !write_u32(bytes, nwritten, total) {
        return Ok(ERRNO_FAULT);
    }
    Ok(0)
}

/// The guest asked fd 0 for bytes and none are left: the execution is
/// over. Reports it, then blocks until the host sends the next frame and
/// arms that frame's limits.
fn wait_for_frame(caller: &mut Caller<'_, Host>) -> wasmtime::Result<()> {
    let fuel_left = caller.get_fuel().unwrap_or(0);
    let host = caller.data_mut();
    let Some(kernel) = host.kernel.as_mut() else {
        return Err(wasmtime::format_err!("kernel fd_read outside a kernel"));
    };
    let status = if kernel.status_overlong {
        None
    } else {
        kernel.status.take()
    };
    kernel.status = None;
    kernel.status_overlong = false;
    let idle = Idle {
        fuel_left,
        status,
        memory_refused: host.limiter.memory_refused(),
        memory_bytes: host.limiter.memory_bytes_peak(),
    };
    if kernel.reports.send(Report::Idle(idle)).is_err() {
        return Err(Interrupt::KernelClosed.into());
    }
    let Ok(frame) = kernel.frames.recv() else {
        return Err(Interrupt::KernelClosed.into());
    };
    kernel.pending = frame.input;
    kernel.offset = 0;
    host.deadline = frame.deadline;
    host.cancel = frame.cancel;
    host.limiter.set_memory_bytes_max(frame.memory_bytes);
    caller.set_fuel(frame.fuel)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the status parser takes exactly `sandlog-status:<i32>`.
    /// Method: table of writes.
    #[test]
    fn statuses_parse_strictly() {
        assert_eq!(parse_status(Some(b"sandlog-status:0")), Some(0));
        assert_eq!(parse_status(Some(b"sandlog-status:-3")), Some(-3));
        assert_eq!(parse_status(Some(b"sandlog-status:x")), None);
        assert_eq!(parse_status(Some(b"status:0")), None);
        assert_eq!(parse_status(None), None);
    }

    /// Goal: iovec arrays outside guest memory are refused, not read.
    /// Method: a 64-byte memory with arrays in and out of bounds.
    #[test]
    fn iovecs_are_bounds_checked() {
        let mut memory = vec![0u8; 64];
        memory[0..4].copy_from_slice(&16u32.to_le_bytes());
        memory[4..8].copy_from_slice(&8u32.to_le_bytes());
        assert_eq!(iovecs(&memory, 0, 1), Some(vec![(16, 8)]));
        memory[4..8].copy_from_slice(&60u32.to_le_bytes());
        assert_eq!(iovecs(&memory, 0, 1), None);
        assert_eq!(iovecs(&memory, 60, 1), None);
        assert_eq!(iovecs(&memory, -1, 1), None);
        assert_eq!(iovecs(&memory, 0, IOVECS_MAX as i32 + 1), None);
    }

    /// Goal: the kernel trampoline's binary is its text.
    /// Method: assemble the text with `wat` and compare.
    #[test]
    fn kernel_trampoline_binary_matches_its_text() {
        let assembled = wat::parse_str(KERNEL_TRAMPOLINE_WAT).unwrap();
        let engine = wasmtime::Engine::default();
        let ours = wasmtime::Module::from_binary(&engine, KERNEL_TRAMPOLINE_WASM).unwrap();
        let theirs = wasmtime::Module::from_binary(&engine, &assembled).unwrap();
        let names = |module: &wasmtime::Module| {
            let imports: Vec<String> = module
                .imports()
                .map(|import| format!("{}::{}", import.module(), import.name()))
                .collect();
            let exports: Vec<String> = module.exports().map(|e| e.name().to_owned()).collect();
            (imports, exports)
        };
        assert_eq!(names(&ours), names(&theirs));
        assert_eq!(assembled, KERNEL_TRAMPOLINE_WASM);
    }
}
