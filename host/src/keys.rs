//! Key files: the signer key that signs checkpoints and the verifier key
//! that checks them (formats in `sandlog_core::note`). Below the root
//! settings, which check a configured key path when it is set, and the
//! proofs, which sign with it.

use std::io::Write;
use std::path::Path;

use sandlog_core::cosignature::{WitnessKey, WitnessVerifierKey};
use sandlog_core::note::{SignerKey, VerifierKey};

use crate::error::{Result, RuntimeError};

/// Largest key or checkpoint file read, bytes (both are under 200 bytes).
pub const KEY_FILE_BYTES_MAX: u64 = 64 * 1024;

fn read_small_file(path: &Path, what: &str) -> Result<String> {
    crate::input::read_text_bounded(path, what, KEY_FILE_BYTES_MAX, "KEY_FILE_BYTES_MAX")
}

/// 32 bytes from the OS's randomness: a new key's seed.
fn random_seed() -> Result<[u8; 32]> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|error| RuntimeError::Io {
        context: "drawing a random key".into(),
        source: std::io::Error::other(error.to_string()),
    })?;
    Ok(seed)
}

/// Writes a secret key's text to a new file `path` (mode 0600, never over
/// an existing file), synced.
fn write_key_file(path: &Path, text: &str) -> Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let context = format!("writing key file {}", path.display());
    let mut file = options
        .open(path)
        .map_err(RuntimeError::io(context.clone()))?;
    file.write_all(format!("{text}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(RuntimeError::io(context))
}

/// Draws a new Ed25519 key named `origin` from the OS's randomness and
/// writes it to `path` (mode 0600, never over an existing file).
pub fn generate_key_file(origin: &str, path: &Path) -> Result<SignerKey> {
    let key = SignerKey::from_seed(origin, random_seed()?).map_err(RuntimeError::Note)?;
    write_key_file(path, &key.to_private_string())?;
    Ok(key)
}

/// Draws a new witness cosigning key (C2SP cosignature/v1) named `name` and
/// writes it to `path` (mode 0600, never over an existing file).
pub fn generate_witness_key_file(name: &str, path: &Path) -> Result<WitnessKey> {
    let key = WitnessKey::from_seed(name, random_seed()?).map_err(RuntimeError::Note)?;
    write_key_file(path, &key.to_private_string())?;
    Ok(key)
}

/// Reads a witness key file written by [`generate_witness_key_file`]
/// (refused, like a signing key, when others may read it).
pub fn read_witness_key(path: &Path) -> Result<WitnessKey> {
    WitnessKey::parse(&read_private_file(path, "witness key")?).map_err(RuntimeError::Note)
}

/// Reads a witness's verifier key: the text itself, or a file holding it.
pub fn read_witness_verifier_key(text_or_path: &str) -> Result<WitnessVerifierKey> {
    let path = Path::new(text_or_path);
    let text = if path.symlink_metadata().is_ok() {
        read_small_file(path, "witness verifier key")?
    } else {
        text_or_path.to_owned()
    };
    WitnessVerifierKey::parse(&text).map_err(RuntimeError::Note)
}

/// Reads a signer key file written by [`generate_key_file`]. Like ssh, it
/// refuses a key file that its group or others may read or write: a key
/// anyone else can read signs for them too.
pub fn read_signer_key(path: &Path) -> Result<SignerKey> {
    SignerKey::parse(&read_private_file(path, "signing key")?).map_err(RuntimeError::Note)
}

/// A private key file's text. Like ssh, it refuses a key file that its
/// group or others may read or write: a key anyone else can read signs
/// for them too.
fn read_private_file(path: &Path, what: &str) -> Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let (file, metadata) = crate::input::open_regular(path, what)?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(RuntimeError::KeyExposed {
            path: path.display().to_string(),
            mode,
        });
    }
    let bytes = crate::input::read_opened_bounded(
        file,
        &metadata,
        path,
        what,
        KEY_FILE_BYTES_MAX,
        "KEY_FILE_BYTES_MAX",
    )?;
    String::from_utf8(bytes).map_err(|_| RuntimeError::NotText {
        path: path.display().to_string(),
        what: what.to_owned(),
    })
}

/// Reads a verifier key: the text itself, or a file holding it.
pub fn read_verifier_key(text_or_path: &str) -> Result<VerifierKey> {
    let path = Path::new(text_or_path);
    // Anything at the path is read as a file (and refused unread when it
    // is a FIFO or a device); text naming nothing is the key itself.
    let text = if path.symlink_metadata().is_ok() {
        read_small_file(path, "verifier key")?
    } else {
        text_or_path.to_owned()
    };
    VerifierKey::parse(&text).map_err(RuntimeError::Note)
}
