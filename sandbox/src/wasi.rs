//! The guest's whole world: a WASI preview 1 context with the workspace as
//! `/app`, the caller's read-only mounts, the caller's args and env, stdin
//! from bytes, and capped stdout/stderr. Nothing else is granted.
//!
//! What is deliberately absent: host env (`inherit_env` is never called),
//! host stdio, host args, any preopen but the ones listed, and network
//! (preview 1 cannot open sockets; the socket permissions are also denied
//! explicitly so a future preview 2 path inherits the same stance). Clocks
//! and randomness are the host's; the guest's monotonic clock is ours so the
//! sleep guard can convert absolute deadlines.

use std::path::Path;

use bytes::Bytes;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::SandboxError;
use super::clock::GuestMonotonicClock;
use super::error::boxed;
use super::limits::{ARGS_ENV_BYTES_MAX, READONLY_MOUNTS_MAX, STDIN_BYTES_MAX};
use super::output::CappedOutput;
use super::request::{ReadonlyMount, RunRequest};

/// Where the guest sees its workspace (read-write).
pub const WORKSPACE_GUEST_PATH: &str = "/app";

/// Checks the parts of a request that `ExecLimits::validate` does not: mount
/// guest paths, and the sizes of args, env and stdin.
///
/// # Errors
///
/// [`SandboxError::InvalidRequest`] saying what is wrong.
pub fn validate_request(request: &RunRequest<'_>) -> Result<(), SandboxError> {
    if request.readonly_mounts.len() > READONLY_MOUNTS_MAX {
        return Err(invalid(format!(
            "{} read-only mounts, at most {READONLY_MOUNTS_MAX} allowed",
            request.readonly_mounts.len()
        )));
    }
    for (index, mount) in request.readonly_mounts.iter().enumerate() {
        validate_guest_path(&mount.guest_path)?;
        if overlaps(&mount.guest_path, WORKSPACE_GUEST_PATH) {
            return Err(invalid(format!(
                "mount {} overlaps the workspace at {WORKSPACE_GUEST_PATH}",
                mount.guest_path
            )));
        }
        let earlier = request.readonly_mounts.iter().take(index);
        if let Some(other) = earlier
            .into_iter()
            .find(|other| overlaps(&mount.guest_path, &other.guest_path))
        {
            return Err(invalid(format!(
                "mounts {} and {} overlap",
                other.guest_path, mount.guest_path
            )));
        }
    }

    let mut args_env_bytes: usize = 0;
    for arg in &request.args {
        reject_nul("argument", arg)?;
        args_env_bytes = args_env_bytes.saturating_add(arg.len() + 1);
    }
    for (key, value) in &request.env {
        if key.is_empty() || key.contains('=') {
            return Err(invalid(format!(
                "environment variable name {key:?} is empty or contains '='"
            )));
        }
        reject_nul("environment variable", key)?;
        reject_nul("environment variable", value)?;
        args_env_bytes = args_env_bytes.saturating_add(key.len() + value.len() + 2);
    }
    if args_env_bytes > ARGS_ENV_BYTES_MAX {
        return Err(invalid(format!(
            "args and env take {args_env_bytes} bytes, at most {ARGS_ENV_BYTES_MAX} allowed"
        )));
    }
    if request.stdin.len() > STDIN_BYTES_MAX {
        return Err(invalid(format!(
            "stdin is {} bytes, at most {STDIN_BYTES_MAX} allowed",
            request.stdin.len()
        )));
    }
    Ok(())
}

fn invalid(reason: String) -> SandboxError {
    SandboxError::InvalidRequest { reason }
}

fn reject_nul(what: &str, text: &str) -> Result<(), SandboxError> {
    if text.contains('\0') {
        return Err(invalid(format!("{what} contains a NUL byte")));
    }
    Ok(())
}

/// A guest path must be absolute and plain: `/name(/name)*`, no `.`, `..`,
/// empty or trailing components, and not `/` itself.
fn validate_guest_path(guest_path: &str) -> Result<(), SandboxError> {
    // Checked on the raw string: `Path::components` would silently
    // normalise `/a/./b`, `//a` and `/a/`, hiding what the caller wrote.
    let plain = match guest_path.strip_prefix('/') {
        Some(rest) => rest
            .split('/')
            .all(|segment| !segment.is_empty() && segment != "." && segment != ".."),
        None => false,
    };
    if plain {
        Ok(())
    } else {
        Err(invalid(format!(
            "guest path {guest_path:?} must be absolute, normalised and not \"/\""
        )))
    }
}

/// True if one path equals the other or lies under it (component-wise).
fn overlaps(one: &str, other: &str) -> bool {
    Path::new(one).starts_with(other) || Path::new(other).starts_with(one)
}

/// Everything the WASI context is built from, besides the request.
pub(crate) struct GuestStdio {
    /// The captured stdout (a clone stays with the run).
    pub(crate) stdout: CappedOutput,
    /// The captured stderr (a clone stays with the run).
    pub(crate) stderr: CappedOutput,
    /// The guest's monotonic clock.
    pub(crate) clock: GuestMonotonicClock,
}

/// Builds the guest's WASI context. `argv0` is the program name the guest
/// sees before the request's args.
///
/// # Errors
///
/// [`SandboxError::Preopen`] if the workspace or a mount cannot be opened.
pub(crate) fn build_context(
    argv0: &str,
    request: &mut RunRequest<'_>,
    stdio: GuestStdio,
) -> Result<WasiP1Ctx, SandboxError> {
    let mut builder = WasiCtxBuilder::new();
    // Blocking file operations run on the calling thread instead of hopping
    // to a tokio blocking pool and back; runs are synchronous anyway. Sleeps
    // then use `thread::sleep`, which the sleep guard bounds.
    builder.allow_blocking_current_thread(true);
    builder.arg(argv0);
    builder.args(&request.args);
    builder.envs(&request.env);
    builder.stdin(MemoryInputPipe::new(Bytes::from(std::mem::take(
        &mut request.stdin,
    ))));
    builder.stdout(stdio.stdout);
    builder.stderr(stdio.stderr);
    builder.monotonic_clock(stdio.clock);
    builder.allow_tcp(false);
    builder.allow_udp(false);
    builder.allow_ip_name_lookup(false);

    preopen(
        &mut builder,
        request.workspace,
        WORKSPACE_GUEST_PATH,
        FsPerms::ReadWrite,
    )?;
    for ReadonlyMount {
        host_path,
        guest_path,
    } in &request.readonly_mounts
    {
        preopen(&mut builder, host_path, guest_path, FsPerms::ReadOnly)?;
    }
    Ok(builder.build_p1())
}

fn preopen(
    builder: &mut WasiCtxBuilder,
    host_path: &Path,
    guest_path: &str,
    perms: FsPerms,
) -> Result<(), SandboxError> {
    builder
        .preopened_dir(host_path, guest_path, perms)
        .map(|_| ())
        .map_err(|error| SandboxError::Preopen {
            host_path: host_path.to_path_buf(),
            guest_path: guest_path.to_owned(),
            source: boxed(error),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: only plain absolute guest paths outside `/app` are accepted.
    /// Method: table of accepted and rejected paths.
    #[test]
    fn guest_paths_must_be_plain_and_apart() {
        for good in ["/data", "/opt/lib", "/application"] {
            assert!(validate_guest_path(good).is_ok(), "{good}");
            assert!(!overlaps(good, WORKSPACE_GUEST_PATH), "{good}");
        }
        for bad in [
            "data", "/", "", "/data/", "/a/../b", "/a/./b", "//a", "/a//b",
        ] {
            assert!(validate_guest_path(bad).is_err(), "{bad}");
        }
        assert!(overlaps("/app/x", WORKSPACE_GUEST_PATH));
        assert!(overlaps("/data", "/data/sub"));
    }
}
