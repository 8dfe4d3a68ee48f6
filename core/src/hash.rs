//! [`Hash`]: a blake3 hash, of an envelope (the chain) or of content
//! (blobs, files), and its 64-hex-digit text form. Below the envelope and
//! the events, which both carry hashes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::CoreError;

/// A blake3 hash: of an envelope (the chain), or of content (blobs, files).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hash(pub [u8; 32]);

/// The hash recorded for content that was not read: all zeros, which no
/// content hashes to. A scan records it in the `file.written` of a file it
/// may not read (`not_kept: unreadable`); `reconcile --deep` gives it to a
/// file its bounds left unread, so that file shows as changed.
pub const NOT_HASHED: Hash = Hash([0; 32]);

impl Hash {
    /// The `prev_hash` of the first event.
    pub const GENESIS: Hash = Hash([0; 32]);

    /// blake3 of `bytes`.
    pub fn of(bytes: &[u8]) -> Hash {
        Hash(*blake3::hash(bytes).as_bytes())
    }

    /// Lower-case hex, 64 digits.
    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    /// Parses 64 hex digits.
    pub fn from_hex(input: &str) -> Result<Hash, CoreError> {
        decode_hex_32(input.trim().as_bytes())
            .map(Hash)
            .ok_or_else(|| CoreError::InvalidHash {
                input: input.to_owned(),
            })
    }

    /// From a stored byte slice; `None` unless it is exactly 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Hash> {
        <[u8; 32]>::try_from(bytes).ok().map(Hash)
    }
}

/// The value of each ASCII hex digit (either case); [`NOT_HEX`] for every
/// other byte.
#[expect(
    clippy::indexing_slicing,
    reason = "evaluated at compile time: a bad index fails the build"
)]
const HEX_VALUES: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut digit = 0;
    while digit < 10 {
        table[b'0' as usize + digit] = digit as u8;
        digit += 1;
    }
    let mut letter = 0;
    while letter < 6 {
        table[b'a' as usize + letter] = 10 + letter as u8;
        table[b'A' as usize + letter] = 10 + letter as u8;
        letter += 1;
    }
    table
};

/// Marks a byte that is not a hex digit in [`HEX_VALUES`].
const NOT_HEX: u8 = 0xff;

/// 64 hex digits to 32 bytes, `None` for any other input. A table lookup
/// per digit: every stored event carries up to four hashes as hex, and a
/// rebuild decodes millions of them (blake3's own parser was a tenth of a
/// rebuild's decoding time).
fn decode_hex_32(digits: &[u8]) -> Option<[u8; 32]> {
    let pairs = digits.as_chunks::<2>();
    let ([], 32) = (pairs.1, pairs.0.len()) else {
        return None;
    };
    let mut bytes = [0u8; 32];
    let mut invalid = 0u8;
    for (byte, [high, low]) in bytes.iter_mut().zip(pairs.0) {
        let value = |digit: u8| {
            HEX_VALUES
                .get(usize::from(digit))
                .copied()
                .unwrap_or(NOT_HEX)
        };
        let (high, low) = (value(*high), value(*low));
        invalid |= (high | low) & 0xf0;
        *byte = (high << 4) | (low & 0x0f);
    }
    (invalid == 0).then_some(bytes)
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.to_hex())
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl FromStr for Hash {
    type Err = CoreError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        Hash::from_hex(input)
    }
}

impl Serialize for Hash {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Hash {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A visitor rather than `String::deserialize`: the hex is parsed
        // from the borrowed input, with no allocation per hash (an execution
        // event carries four, and a rebuild decodes every event).
        struct HexVisitor;
        impl serde::de::Visitor<'_> for HexVisitor {
            type Value = Hash;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a blake3 hash as 64 hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Hash, E> {
                Hash::from_hex(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(HexVisitor)
    }
}
