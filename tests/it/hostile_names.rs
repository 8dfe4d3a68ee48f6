//! Hostile file names: any byte string a directory can hold is named
//! exactly, and no name or path text reaches outside the workspace.

#![cfg(test)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sandlog_core::limits::PATH_COMPONENT_BYTES_MAX;
use sandlog_core::{CoreError, Outcome, PathError, SessionId, WorkspacePath};
use sandlog_runtime::{ExecRequest, RuntimeError};
use sandlog_tests::engine::TestRoot;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// Cases of the property test: each writes, reads, lists and deletes one
/// file in a fresh session, so a few seconds in all.
const CASES: u32 = 64;

/// One entry of a snapshot: a directory, a symlink (target) or a file
/// (size and contents hash).
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Directory,
    Symlink(Vec<u8>),
    File(u64, blake3::Hash),
}

/// Everything under `root` except the database files, the session leases
/// (the engine's own lock files, named by session id, not by any path) and
/// the workspace `skip`, by path bytes. Symlinks are recorded, not followed.
fn snapshot(root: &Path, skip: &Path) -> std::io::Result<BTreeMap<Vec<u8>, Entry>> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_owned()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory)? {
            let entry = entry?;
            let path = entry.path();
            let top_level_db = directory == root
                && (entry.file_name().as_bytes().starts_with(b"sandlog.db")
                    || entry.file_name() == "leases");
            if path == skip || top_level_db {
                continue;
            }
            let file_type = entry.file_type()?;
            let value = if file_type.is_dir() {
                pending.push(path.clone());
                Entry::Directory
            } else if file_type.is_symlink() {
                Entry::Symlink(std::fs::read_link(&path)?.as_os_str().as_bytes().to_vec())
            } else {
                let contents = std::fs::read(&path)?;
                Entry::File(contents.len() as u64, blake3::hash(&contents))
            };
            entries.insert(path.as_os_str().as_bytes().to_vec(), value);
        }
    }
    Ok(entries)
}

/// One name, biased towards the bytes that matter: backslash, `x` and hex
/// digits (escape look-alikes), `.`, `/`, NUL, control characters, lead and
/// continuation bytes, and names at the component limit.
fn name_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 1..=40),
        proptest::collection::vec(
            prop::sample::select(vec![
                b'\\', b'x', b'f', b'0', b'.', b'/', 0, b'\n', 0x1b, 0x80, 0xc3, 0xa9, 0xe2, 0xff,
            ]),
            1..=12,
        ),
        Just(b"..".to_vec()),
        Just(b".".to_vec()),
        proptest::collection::vec(
            Just(0xffu8),
            PATH_COMPONENT_BYTES_MAX - 1..=PATH_COMPONENT_BYTES_MAX + 1
        ),
    ]
}

/// A path as it reaches sandlog: raw names from a directory listing, or
/// text typed by a user or stored in an event.
#[derive(Debug, Clone)]
enum Input {
    Names(Vec<Vec<u8>>),
    Text(String),
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        proptest::collection::vec(name_bytes(), 1..=3).prop_map(Input::Names),
        any::<String>().prop_map(Input::Text),
        "(\\\\\\\\|\\\\x[0-9a-fA-F]{0,2}|\\\\|[a-z]|/|\\.|é|\n){1,24}".prop_map(Input::Text),
        "(/|\\.\\./|\\./|[a-z]{1,3}/){1,6}(\\.\\.|[a-z]{1,3})".prop_map(Input::Text),
    ]
}

/// Whether a directory listing could hold `name` as an entry.
fn listable(name: &[u8]) -> bool {
    !name.is_empty()
        && name != b"."
        && name != b".."
        && !name.contains(&0)
        && !name.contains(&b'/')
        && name.len() <= PATH_COMPONENT_BYTES_MAX
}

/// The path `input` names, `None` if refused. Raw names that a listing
/// could hold are never refused; refusals are `InvalidPath`.
fn to_path(input: &Input) -> Result<Option<WorkspacePath>, TestCaseError> {
    let names = match input {
        Input::Text(text) => {
            return match WorkspacePath::parse(text) {
                Ok(path) => Ok(Some(path)),
                Err(CoreError::InvalidPath { .. }) => Ok(None),
                Err(other) => Err(TestCaseError::fail(format!("not InvalidPath: {other}"))),
            };
        }
        Input::Names(names) => names,
    };
    let mut path: Option<WorkspacePath> = None;
    for name in names {
        let joined = match &path {
            None => WorkspacePath::from_os_name(OsStr::from_bytes(name)),
            Some(parent) => parent.join_os(OsStr::from_bytes(name)),
        };
        match joined {
            Ok(joined) => path = Some(joined),
            Err(error) => {
                // At most three names of a few hundred bytes: only a name
                // no listing holds can be refused.
                prop_assert!(!listable(name), "{:?} refused: {}", name, error);
                let invalid_path = matches!(error, CoreError::InvalidPath { .. });
                prop_assert!(invalid_path, "{}", error);
                return Ok(None);
            }
        }
    }
    let path = path.ok_or_else(|| TestCaseError::fail("no names"))?;
    prop_assert_eq!(path.to_bytes().into_owned(), names.join(&b'/'));
    Ok(Some(path))
}

/// Checks one input against the engine's host file operations in a fresh
/// session: an accepted path round-trips exactly through write, read,
/// list and delete, and nothing else under the root changes.
/// Returns whether the path was accepted and holds an escape.
fn check_host_operations(root: &TestRoot, input: &Input) -> Result<bool, TestCaseError> {
    let fail = |error: &dyn std::fmt::Display| TestCaseError::fail(error.to_string());
    let Some(path) = to_path(input)? else {
        return Ok(false);
    };
    prop_assert_eq!(
        WorkspacePath::parse(&path.to_string()).map_err(|e| fail(&e))?,
        path.clone()
    );
    let id: SessionId = root
        .engine
        .create_session(BTreeMap::new())
        .map_err(|e| fail(&e))?
        .session_id;
    let workspace = root.engine.layout().workspace(id);
    let before = snapshot(root.path(), &workspace).map_err(|e| fail(&e))?;

    let contents = path.to_bytes().into_owned();
    let written = root
        .engine
        .write_file(id, &path, &contents, false)
        .map_err(|e| fail(&format!("writing {path:?}: {e}")))?;
    prop_assert_eq!(&written.path, &path);
    prop_assert_eq!(
        root.engine.read_file(id, &path).map_err(|e| fail(&e))?,
        contents.clone()
    );
    // The name on disk is the decoded bytes, not the text form.
    prop_assert_eq!(
        std::fs::read(workspace.join(path.as_std_path())).map_err(|e| fail(&e))?,
        contents.clone()
    );
    let listed: Vec<WorkspacePath> = root
        .engine
        .list_files(id, None)
        .map_err(|e| fail(&e))?
        .into_iter()
        .map(|file| file.path)
        .collect();
    prop_assert_eq!(listed, vec![path.clone()]);
    prop_assert_eq!(
        root.engine
            .delete_file(id, &path, false)
            .map_err(|e| fail(&e))?,
        vec![path.clone()]
    );
    let gone = matches!(
        root.engine.read_file(id, &path),
        Err(RuntimeError::FileNotFound { .. })
    );
    prop_assert!(gone, "{:?} still readable after delete", path);
    // No temporary file is left behind.
    let left = snapshot(&workspace, Path::new("")).map_err(|e| fail(&e))?;
    prop_assert!(
        left.values().all(|entry| *entry == Entry::Directory),
        "{left:?}"
    );

    let after = snapshot(root.path(), &workspace).map_err(|e| fail(&e))?;
    prop_assert_eq!(before, after);
    Ok(path.as_str().contains('\\'))
}

/// The root is still usable: a new session runs `print(1)` and the log
/// and read models verify.
fn assert_root_usable(root: &TestRoot) -> TestResult {
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let run = root.engine.execute(id, &ExecRequest::python("print(1)"))?;
    assert_eq!(run.outcome, Outcome::Ok);
    assert_eq!(run.stdout, b"1\n");
    let verified = root.engine.verify(None, &|_| {})?;
    assert!(verified.ok, "{verified:?}");
    Ok(())
}

/// Arbitrary byte strings as raw names and as path text, fed to the
/// engine's host file operations: no panic; raw names a directory could
/// hold are always accepted; an accepted path writes, reads back, lists as
/// the same path and deletes, with the exact bytes as its name on disk;
/// nothing under the root outside that session's workspace changes.
/// Method: proptest (64 cases), one fresh session per case, a snapshot of
/// the root (paths, kinds, sizes, contents hashes) before and after.
#[test]
fn arbitrary_names_round_trip_through_host_file_operations() -> TestResult {
    let root = TestRoot::new()?;
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    // Fixed cases first, so that whatever the random ones draw, names that
    // need escapes (not UTF-8, a backslash, a control byte) reach the engine.
    let escaping = [
        Input::Names(vec![b"\xff\xfe".to_vec()]),
        Input::Names(vec![b"dir\\".to_vec(), b"\x80name\n".to_vec()]),
        Input::Text("a\\\\b/c".to_owned()),
    ];
    for input in &escaping {
        let escaped = check_host_operations(&root, input).map_err(|error| error.to_string())?;
        assert!(escaped, "{input:?} was not accepted with an escape");
    }
    runner
        .run(&input(), |input| {
            check_host_operations(&root, &input)?;
            Ok(())
        })
        .map_err(|error| error.to_string())?;
    assert_root_usable(&root)
}

/// Every entry of a real directory, with hostile names, gets a path from
/// `from_os_name` / `join_os` (nothing is skipped), and each path leads
/// back to its own file. Method: std::fs creates the entries, a walk builds
/// the paths, and each file is read through the decoded path.
#[test]
fn every_entry_of_a_real_directory_is_named_exactly() -> TestResult {
    let dir = tempfile::tempdir()?;
    let names: [&[u8]; 6] = [
        b"a\\b",
        b"\\x41",
        b"\xff\xfe",
        b"line\nbreak",
        b"\x1b[31m",
        b"caf\xc3\xa9",
    ];
    std::fs::create_dir(dir.path().join(OsStr::from_bytes(b"d\\\x80")))?;
    let mut expected = BTreeMap::new();
    for name in names {
        for parent in [&b""[..], b"d\\\x80/"] {
            let relative = [parent, name].concat();
            std::fs::write(dir.path().join(OsStr::from_bytes(&relative)), &relative)?;
            expected.insert(relative.clone(), relative);
        }
    }
    let mut found = BTreeMap::new();
    let mut pending: Vec<Option<WorkspacePath>> = vec![None];
    while let Some(directory) = pending.pop() {
        let on_disk = match &directory {
            None => dir.path().to_owned(),
            Some(path) => dir.path().join(path.as_std_path()),
        };
        for entry in std::fs::read_dir(on_disk)? {
            let entry = entry?;
            let path = match &directory {
                None => WorkspacePath::from_os_name(&entry.file_name())?,
                Some(parent) => parent.join_os(&entry.file_name())?,
            };
            assert_eq!(WorkspacePath::parse(path.as_str())?, path);
            if entry.file_type()?.is_dir() {
                pending.push(Some(path));
            } else {
                let contents = std::fs::read(dir.path().join(path.as_std_path()))?;
                found.insert(path.to_bytes().into_owned(), contents);
            }
        }
    }
    assert_eq!(found, expected);
    assert_eq!(
        WorkspacePath::from_os_name(OsStr::from_bytes(b"a\\b"))?.as_str(),
        "a\\\\b"
    );
    assert_eq!(
        WorkspacePath::from_os_name(OsStr::from_bytes(b"\\x41"))?.as_str(),
        "\\\\x41"
    );
    Ok(())
}

/// Path text with a bad or needless escape is refused with its reason
/// before anything is touched, and the message says how to write it.
#[test]
fn path_text_with_bad_escapes_is_a_clear_error() -> TestResult {
    let reason = |text: &str| match WorkspacePath::parse(text) {
        Err(CoreError::InvalidPath { reason, .. }) => reason,
        other => panic!("{text:?} was not refused: {other:?}"),
    };
    assert_eq!(reason("dir\\file"), PathError::BadEscape);
    assert_eq!(reason("\\x2e\\x2e/etc"), PathError::NonCanonicalEscape);
    assert_eq!(reason("\\x2f"), PathError::NonCanonicalEscape);
    assert_eq!(reason("a/\\x00"), PathError::NulByte);
    let message = WorkspacePath::parse("dir\\file").unwrap_err().to_string();
    assert!(
        message.contains("write `\\\\` for a backslash"),
        "{message}"
    );
    Ok(())
}

// Depends on the scan calling WorkspacePath::join_os (and from_os_name):
// until the workspace scan names entries through them, it skips these.
/// Files a guest or the host created with a backslash or bytes that are not
/// UTF-8 in their names are recorded by the next execution's scan, listed,
/// readable, and the log verifies: no name is dropped. Method: python.wasm
/// creates `a\b` and `d\e/f` (WASI refuses names that are not UTF-8, so
/// those are created on disk by the test) and the execution's
/// `files_written` and the listing are compared with the expected paths.
#[test]
fn names_on_disk_with_backslashes_or_bad_utf8_are_recorded() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let workspace = root.engine.layout().workspace(id);
    std::fs::write(
        workspace.join(OsStr::from_bytes(b"bad\xff\xfe.bin")),
        b"raw",
    )?;
    std::fs::create_dir(workspace.join(OsStr::from_bytes(b"dir\x80")))?;
    std::fs::write(
        workspace.join(OsStr::from_bytes(b"dir\x80/in\\side")),
        b"nested",
    )?;
    let run = root.engine.execute(
        id,
        &ExecRequest::python(
            "import os\nopen('a\\\\b', 'w').write('guest')\nos.mkdir('d\\\\e')\nopen('d\\\\e/f', 'w').write('deep')\nopen('touch.txt', 'w').write('x')",
        ),
    )?;
    assert_eq!(
        run.outcome,
        Outcome::Ok,
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let name = |bytes: &[u8]| -> Result<WorkspacePath, CoreError> {
        let mut parts = bytes.split(|&byte| byte == b'/');
        let first = parts.next().unwrap_or_default();
        parts.try_fold(
            WorkspacePath::from_os_name(OsStr::from_bytes(first))?,
            |path, part| path.join_os(OsStr::from_bytes(part)),
        )
    };
    let mut expected = vec![
        name(b"a\\b")?,
        name(b"bad\xff\xfe.bin")?,
        name(b"d\\e/f")?,
        name(b"dir\x80/in\\side")?,
        name(b"touch.txt")?,
    ];
    expected.sort();
    let mut written = run.files_written.clone();
    written.sort();
    assert_eq!(written, expected);
    let listed: Vec<WorkspacePath> = root
        .engine
        .list_files(id, None)?
        .into_iter()
        .map(|file| file.path)
        .collect();
    assert_eq!(listed, expected);
    assert_eq!(
        root.engine.read_file(id, &name(b"bad\xff\xfe.bin")?)?,
        b"raw"
    );
    assert_eq!(
        root.engine.read_file(id, &name(b"dir\x80/in\\side")?)?,
        b"nested"
    );
    assert_eq!(root.engine.read_file(id, &name(b"a\\b")?)?, b"guest");
    // A second run changes nothing, so nothing is recorded as deleted.
    let again = root.engine.execute(id, &ExecRequest::python("pass"))?;
    assert_eq!(again.files_deleted, Vec::<WorkspacePath>::new());
    assert_eq!(again.files_written, Vec::<WorkspacePath>::new());
    assert_root_usable(&root)
}

/// Host writes of names holding a backslash or bytes that are not UTF-8
/// list under their text form, and a glob matches them with the glob's own
/// backslash escape (as `docs/names.md` says). Method: write two such files
/// through the engine and list with `*` and with an escaped glob.
#[test]
fn escaped_names_list_and_match_globs() -> TestResult {
    let root = TestRoot::new()?;
    let id = root.engine.create_session(BTreeMap::new())?.session_id;
    let backslash = WorkspacePath::from_os_name(OsStr::from_bytes(b"a\\b"))?;
    let latin1 = WorkspacePath::from_os_name(OsStr::from_bytes(b"caf\xe9"))?;
    root.engine.write_file(id, &backslash, b"1", false)?;
    root.engine.write_file(id, &latin1, b"2", false)?;
    let listed = |pattern: &str| -> Result<Vec<String>, RuntimeError> {
        Ok(root
            .engine
            .list_files(id, Some(pattern))?
            .into_iter()
            .map(|file| file.path.to_string())
            .collect())
    };
    assert_eq!(listed("*")?, vec!["a\\\\b", "caf\\xe9"]);
    assert_eq!(listed("a\\\\\\\\b")?, vec!["a\\\\b"]);
    assert_eq!(listed("caf\\\\x*")?, vec!["caf\\xe9"]);
    assert_eq!(
        std::fs::read(
            root.engine
                .layout()
                .workspace(id)
                .join(OsStr::from_bytes(b"caf\xe9"))
        )?,
        b"2"
    );
    assert_root_usable(&root)
}
