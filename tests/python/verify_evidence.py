#!/usr/bin/env python3
"""An independent verifier for sandlog's verifiable log, written from the
specifications and sharing no code with sandlog: RFC 6962 / RFC 9162 Merkle
proofs (SHA-256, 0x00 leaf and 0x01 node prefixes), the C2SP signed-note
format with Ed25519 keys (key id = SHA-256(name || 0x0A || 0x01 || key)[:4]),
the C2SP tlog-checkpoint body (origin, size, base64 root) and C2SP
tlog-cosignature v1 witness cosignatures (signature type 0x04; the signature
is key id || 8-byte big-endian time || Ed25519 over
"cosignature/v1", "time <time>" and the checkpoint body, one line each).

Usage:
  verify_evidence.py bundle BUNDLE.json VKEY
      checks the checkpoint's signature and every event's inclusion proof
  verify_evidence.py consistency OLD_NOTE NEW_NOTE PROOF.json VKEY
      checks both checkpoints' signatures and the consistency proof
      (the JSON printed by `sandlog prove consistency`) between them
  verify_evidence.py cosigned NOTE VKEY K WITNESS_VKEY...
      checks the checkpoint's signature, then that at least K of the
      witnesses' cosignatures on it verify

Prints one line per check and exits 0 only if every check passed.
"""

import base64
import hashlib
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def leaf_hash(data: bytes) -> bytes:
    return sha256(b"\x00" + data)


def node_hash(left: bytes, right: bytes) -> bytes:
    return sha256(b"\x01" + left + right)


def verify_inclusion(leaf: bytes, index: int, size: int, proof, root: bytes) -> bool:
    """RFC 9162 section 2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(first: int, second: int, proof, first_root: bytes, second_root: bytes) -> bool:
    """RFC 9162 section 2.1.4.2."""
    if first == second:
        return not proof and first_root == second_root
    if first == 0 or first > second or not proof:
        return False
    if first & (first - 1) == 0:
        proof = [first_root] + list(proof)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_root and sr == second_root


def parse_vkey(text: str, signature_type: int = 0x01):
    name, key_id, key = text.strip().split("+", 2)
    raw = base64.b64decode(key, validate=True)
    if raw[0] != signature_type or len(raw) != 33:
        raise ValueError(f"not an Ed25519 verifier key of signature type {signature_type}")
    public = raw[1:]
    if sha256(name.encode() + b"\n" + bytes([signature_type]) + public)[:4].hex() != key_id:
        raise ValueError("key id does not match the key")
    return name, bytes.fromhex(key_id), Ed25519PublicKey.from_public_bytes(public)


def verify_cosignature(note: str, wkey):
    """Returns the time of a valid cosignature/v1 by wkey on note, or None."""
    name, key_id, public = wkey
    body, _, signatures = note.rpartition("\n\n")
    body += "\n"
    for line in signatures.splitlines():
        dash, signer, blob = line.split(" ", 2)
        if dash != "\u2014" or signer != name:
            continue
        blob = base64.b64decode(blob, validate=True)
        if blob[:4] != key_id or len(blob) != 4 + 8 + 64:
            continue
        timestamp = int.from_bytes(blob[4:12], "big")
        message = f"cosignature/v1\ntime {timestamp}\n".encode() + body.encode()
        try:
            public.verify(blob[12:], message)
            return timestamp
        except InvalidSignature:
            continue
    return None


def verify_note(note: str, vkey) -> str:
    """Returns the body of a note signed by vkey, or raises."""
    name, key_id, public = vkey
    body, _, signatures = note.rpartition("\n\n")
    body += "\n"
    for line in signatures.splitlines():
        dash, signer, blob = line.split(" ", 2)
        if dash != "\u2014" or signer != name:
            continue
        blob = base64.b64decode(blob, validate=True)
        if blob[:4] != key_id:
            continue
        try:
            public.verify(blob[4:], body.encode())
            return body
        except InvalidSignature:
            raise ValueError("signature does not verify")
    raise ValueError("no signature by the key")


def parse_checkpoint(body: str, origin: str):
    lines = body.split("\n")
    if lines[0] != origin:
        raise ValueError("origin is not the key's name")
    return int(lines[1]), base64.b64decode(lines[2], validate=True)


def check(ok: bool, what: str, failures: list) -> None:
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def main(argv) -> int:
    failures = []
    if len(argv) == 4 and argv[1] == "bundle":
        bundle = json.load(open(argv[2]))
        vkey = parse_vkey(argv[3])
        size, root = parse_checkpoint(verify_note(bundle["checkpoint"], vkey), vkey[0])
        check(True, f"checkpoint signed by {vkey[0]}: size {size}", failures)
        for event in bundle["events"]:
            proof = [bytes.fromhex(h) for h in event["inclusion"]]
            leaf = leaf_hash(bytes.fromhex(event["hash"]))
            check(
                verify_inclusion(leaf, event["position"] - 1, size, proof, root),
                f"event {event['position']} ({event['kind']}) is in the tree",
                failures,
            )
        check(len(bundle["events"]) > 0, "the bundle has events", failures)
    elif len(argv) == 6 and argv[1] == "consistency":
        vkey = parse_vkey(argv[5])
        old_size, old_root = parse_checkpoint(verify_note(open(argv[2]).read(), vkey), vkey[0])
        new_size, new_root = parse_checkpoint(verify_note(open(argv[3]).read(), vkey), vkey[0])
        proof = json.load(open(argv[4]))
        check(proof["old"] == old_size and proof["new"] == new_size, "proof is for the two sizes", failures)
        hashes = [bytes.fromhex(h) for h in proof["hashes"]]
        check(
            verify_consistency(old_size, new_size, hashes, old_root, new_root),
            f"log of {new_size} events extends the checkpoint of {old_size}",
            failures,
        )
    elif len(argv) >= 6 and argv[1] == "cosigned":
        note = open(argv[2]).read()
        vkey = parse_vkey(argv[3])
        required = int(argv[4])
        size, _ = parse_checkpoint(verify_note(note, vkey), vkey[0])
        check(True, f"checkpoint signed by {vkey[0]}: size {size}", failures)
        valid = 0
        for text in argv[5:]:
            wkey = parse_vkey(text, 0x04)
            timestamp = verify_cosignature(note, wkey)
            print(("PASS" if timestamp is not None else "MISS") + f" cosignature by {wkey[0]}"
                  + (f" at {timestamp}" if timestamp is not None else ""))
            valid += timestamp is not None
        check(valid >= required, f"{valid} valid cosignatures, {required} required", failures)
    else:
        print(__doc__)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (ValueError, KeyError, OSError) as error:
        print(f"FAIL {error}")
        sys.exit(1)
