//! Fuzzing of every parser of outside input that needs no server: evidence
//! bundles, signed notes and keys, witness requests, the path text form,
//! durations and sizes, stored event payloads. Each harness starts from
//! the seed corpus kept in `tests/fuzz/corpus/` (a real bundle exported by
//! `sandlog evidence export`, its verifier key, its checkpoint note, paths
//! and human values) and from arbitrary bytes, and mutates them.
//!
//! The properties: no input panics or hangs a parser; what parses
//! round-trips where the format promises it; and for bundles, every
//! mutation that changes what an event says, or drops one, is refused by
//! `verify` (a parser that accepted a forged bundle would be worse than
//! one that crashed).
//!
//! Cases per harness: `PROPTEST_CASES` (256 by default, the bounded run
//! `make test` does); `make fuzz` runs many more.

use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::Config;
use sandlog_core::WorkspacePath;
use sandlog_core::bundle::Bundle;
use sandlog_core::cosignature::WitnessVerifierKey;
use sandlog_core::event::{Event, KNOWN_KINDS};
use sandlog_core::human::{format_size, parse_duration, parse_size};
use sandlog_core::note::{Checkpoint, SignerKey, VerifierKey};
use sandlog_core::witness::AddCheckpoint;

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(corpus(name)).unwrap_or_else(|error| panic!("seed {name}: {error}"))
}

fn text(name: &str) -> String {
    String::from_utf8(read(name)).unwrap_or_else(|error| panic!("seed {name}: {error}"))
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(256)
}

fn config() -> Config {
    Config {
        cases: cases(),
        // The seeds make failures reproducible from the printed input;
        // a regression file in the source tree is not wanted here.
        failure_persistence: None,
        ..Config::default()
    }
}

/// One edit of a byte string.
#[derive(Debug, Clone)]
enum Edit {
    Flip { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Insert { at: usize, bytes: Vec<u8> },
    Remove { at: usize, len: usize },
    Truncate { at: usize },
    Duplicate { at: usize, len: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Edit::Flip { at, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Edit::Set { at, byte }),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(at, bytes)| Edit::Insert { at, bytes }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Edit::Remove { at, len }),
        any::<usize>().prop_map(|at| Edit::Truncate { at }),
        (any::<usize>(), 1usize..256).prop_map(|(at, len)| Edit::Duplicate { at, len }),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for edit in edits {
        let len = bytes.len().max(1);
        match edit {
            Edit::Flip { at, bit } => {
                if let Some(byte) = bytes.get_mut(at % len) {
                    *byte ^= 1 << bit;
                }
            }
            Edit::Set { at, byte } => {
                if let Some(slot) = bytes.get_mut(at % len) {
                    *slot = *byte;
                }
            }
            Edit::Insert { at, bytes: new } => {
                let at = at % (bytes.len() + 1);
                bytes.splice(at..at, new.iter().copied());
            }
            Edit::Remove { at, len: count } => {
                let at = at % len;
                let end = (at + count).min(bytes.len());
                if at < end {
                    bytes.drain(at..end);
                }
            }
            Edit::Truncate { at } => bytes.truncate(at % len),
            Edit::Duplicate { at, len: count } => {
                let at = at % len;
                let end = (at + count).min(bytes.len());
                if at < end {
                    let copy = bytes[at..end].to_vec();
                    bytes.splice(end..end, copy);
                }
            }
        }
    }
    bytes
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    proptest::collection::vec(edit(), 1..8)
}

fn vkey() -> VerifierKey {
    VerifierKey::parse(text("log.vkey").trim()).expect("the seed verifier key parses")
}

/// Goal: the seed bundle itself verifies (the harnesses below mutate a
/// bundle that is accepted, so a refusal is the mutation's doing).
#[test]
fn the_seed_bundle_verifies() {
    let bundle = Bundle::parse(&read("session.bundle")).expect("the seed bundle parses");
    bundle.verify(&vkey()).expect("the seed bundle verifies");
}

proptest! {
    #![proptest_config(config())]

    /// Goal: no byte-level mutation of a real bundle panics `parse` or
    /// `verify`; a mutated bundle that still verifies says the same as
    /// the seed (same events, same blobs, same head).
    #[test]
    fn bundle_byte_mutations_never_panic_or_forge(edits in edits()) {
        let seed = read("session.bundle");
        let mutated = apply(seed.clone(), &edits);
        if let Ok(bundle) = Bundle::parse(&mutated)
            && let Ok(verified) = bundle.verify(&vkey())
        {
            let original = Bundle::parse(&seed).unwrap().verify(&vkey()).unwrap();
            prop_assert_eq!(verified.envelopes, original.envelopes);
            prop_assert_eq!(verified.blobs, original.blobs);
            prop_assert_eq!(verified.head, original.head);
        }
    }

    /// Goal: dropping any event, or changing any field of one, is refused
    /// by `verify`: a bundle cannot hide or alter what a session did.
    /// Method: the seed bundle as JSON; remove event `i`, or replace one
    /// of its scalar fields with another value.
    #[test]
    fn bundle_events_cannot_be_dropped_or_altered(
        index in any::<usize>(),
        field in any::<usize>(),
        drop_it in any::<bool>(),
        replacement in prop_oneof![
            any::<i64>().prop_map(serde_json::Value::from),
            "[a-z0-9/._-]{0,24}".prop_map(serde_json::Value::from),
            Just(serde_json::Value::Null),
        ],
    ) {
        let mut json: serde_json::Value =
            serde_json::from_slice(&read("session.bundle")).unwrap();
        let events = json["events"].as_array_mut().unwrap();
        let at = index % events.len();
        if drop_it {
            events.remove(at);
        } else {
            let event = events[at].as_object_mut().unwrap();
            let keys: Vec<String> = event
                .iter()
                .filter(|(key, value)| {
                    !value.is_array() && !value.is_object() && key.as_str() != "proof"
                })
                .map(|(key, _)| key.clone())
                .collect();
            let key = &keys[field % keys.len()];
            if event[key] == replacement {
                return Ok(());
            }
            event.insert(key.clone(), replacement);
        }
        let bytes = serde_json::to_vec(&json).unwrap();
        let verified = Bundle::parse(&bytes).and_then(|bundle| bundle.verify(&vkey()));
        prop_assert!(verified.is_err(), "a changed bundle verified");
    }

    /// Goal: arbitrary bytes given as a bundle never panic.
    #[test]
    fn bundle_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        if let Ok(bundle) = Bundle::parse(&bytes) {
            let _ = bundle.verify(&vkey());
        }
    }

    /// Goal: mutated signed checkpoints never panic verification, and one
    /// that verifies has the seed's body (the signature covers it).
    #[test]
    fn checkpoint_notes_never_panic_or_forge(edits in edits()) {
        let seed = read("checkpoint.note");
        let mutated = apply(seed.clone(), &edits);
        let Ok(note) = String::from_utf8(mutated) else {
            return Ok(());
        };
        if let Ok(checkpoint) = Checkpoint::verify(&note, &vkey()) {
            let original = Checkpoint::verify(&text("checkpoint.note"), &vkey()).unwrap();
            prop_assert_eq!(checkpoint.size, original.size);
            prop_assert_eq!(checkpoint.root, original.root);
        }
        let _ = Checkpoint::parse_body(&note);
    }

    /// Goal: key texts (signer, verifier, witness verifier), mutated from
    /// the seed or arbitrary, never panic their parsers.
    #[test]
    fn keys_never_panic(edits in edits(), arbitrary in ".{0,200}") {
        let mutated = apply(read("log.vkey"), &edits);
        let mutated = String::from_utf8_lossy(&mutated).into_owned();
        for input in [mutated.trim(), arbitrary.as_str()] {
            let _ = VerifierKey::parse(input);
            let _ = SignerKey::parse(input);
            let _ = WitnessVerifierKey::parse(input);
        }
    }

    /// Goal: a witness's `add-checkpoint` body, built from the seed note
    /// and mutated, never panics the parser; what parses encodes back to
    /// the bytes it came from.
    #[test]
    fn witness_requests_never_panic_and_round_trip(edits in edits()) {
        let seed = format!("old 0\n\n{}", text("checkpoint.note"));
        let mutated = apply(seed.into_bytes(), &edits);
        if let Ok(request) = AddCheckpoint::parse(&mutated) {
            let encoded = request.encode();
            prop_assert_eq!(encoded.as_bytes(), mutated.as_slice());
            let _ = request.verify_note(&[vkey()]);
        }
    }

    /// Goal: the path text form never panics, and a parsed path prints
    /// as text that parses back to itself.
    #[test]
    fn paths_never_panic_and_round_trip(
        seed in any::<usize>(),
        edits in edits(),
        arbitrary in "\\PC{0,64}",
    ) {
        let seeds = text("paths.txt");
        let seeds: Vec<&str> = seeds.lines().collect();
        let mutated = apply(seeds[seed % seeds.len()].as_bytes().to_vec(), &edits);
        let mutated = String::from_utf8_lossy(&mutated).into_owned();
        for input in [mutated.as_str(), arbitrary.as_str()] {
            if let Ok(path) = WorkspacePath::parse(input) {
                let again = WorkspacePath::parse(path.as_str());
                prop_assert_eq!(again.as_ref().ok(), Some(&path), "{:?}", input);
            }
        }
    }

    /// Goal: durations and sizes never panic; a size printed in its
    /// exact form parses back to the same number.
    #[test]
    fn durations_and_sizes_never_panic(
        seed in any::<usize>(),
        edits in edits(),
        arbitrary in "\\PC{0,32}",
        bytes in any::<u64>(),
    ) {
        let seeds = text("human.txt");
        let seeds: Vec<&str> = seeds.lines().collect();
        let mutated = apply(seeds[seed % seeds.len()].as_bytes().to_vec(), &edits);
        let mutated = String::from_utf8_lossy(&mutated).into_owned();
        for input in [mutated.as_str(), arbitrary.as_str()] {
            let _ = parse_duration(input);
            let _ = parse_size(input);
        }
        let printed = format_size(bytes);
        let _ = parse_size(&printed);
        prop_assert_eq!(parse_size(&format!("{bytes}B")).ok(), Some(bytes));
    }

    /// Goal: a stored payload of any kind and schema, however damaged,
    /// decodes to a value or an error, never a panic.
    #[test]
    fn stored_payloads_never_panic(
        kind in any::<usize>(),
        schema in 0u32..4,
        payload in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..512),
            "\\{(\"[a-z_]{1,12}\":(null|[0-9]{1,20}|\"[a-z0-9]{0,12}\"|\\[\\]|\\{\\}),?){0,8}\\}"
                .prop_map(String::into_bytes),
        ],
    ) {
        let (kind, _) = KNOWN_KINDS[kind % KNOWN_KINDS.len()];
        let _ = Event::decode(kind, schema, &payload);
    }
}
