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
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(RuntimeError::io(format!(
        "reading {what} {}",
        path.display()
    )))?;
    let mut text = String::new();
    file.take(KEY_FILE_BYTES_MAX + 1)
        .read_to_string(&mut text)
        .map_err(RuntimeError::io(format!(
            "reading {what} {}",
            path.display()
        )))?;
    if text.len() as u64 > KEY_FILE_BYTES_MAX {
        return Err(RuntimeError::Io {
            context: format!("reading {what} {}", path.display()),
            source: std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!("larger than {KEY_FILE_BYTES_MAX} bytes: not a {what}"),
            ),
        });
    }
    Ok(text)
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

/// Reads a witness key file written by [`generate_witness_key_file`].
pub fn read_witness_key(path: &Path) -> Result<WitnessKey> {
    WitnessKey::parse(&read_small_file(path, "witness key file")?).map_err(RuntimeError::Note)
}

/// Reads a witness's verifier key: the text itself, or a file holding it.
pub fn read_witness_verifier_key(text_or_path: &str) -> Result<WitnessVerifierKey> {
    let path = Path::new(text_or_path);
    let text = if path.is_file() {
        read_small_file(path, "witness verifier key")?
    } else {
        text_or_path.to_owned()
    };
    WitnessVerifierKey::parse(&text).map_err(RuntimeError::Note)
}

/// Reads a signer key file written by [`generate_key_file`].
pub fn read_signer_key(path: &Path) -> Result<SignerKey> {
    SignerKey::parse(&read_small_file(path, "key file")?).map_err(RuntimeError::Note)
}

/// Reads a verifier key: the text itself, or a file holding it.
pub fn read_verifier_key(text_or_path: &str) -> Result<VerifierKey> {
    let path = Path::new(text_or_path);
    let text = if path.is_file() {
        read_small_file(path, "verifier key")?
    } else {
        text_or_path.to_owned()
    };
    VerifierKey::parse(&text).map_err(RuntimeError::Note)
}
