"""An agent-style loop over one warm sandlog session, end to end.

A scripted "model" (no network: a list of replies) answers each turn with
tool calls; the loop runs them against a warm kernel, so variables and
imports persist between steps as they would for an LLM agent, feeds the
results back, and at the end exports the session's evidence bundle, signed
with a fresh key, and verifies it offline.

    python python/examples/agent_loop.py [ROOT]

ROOT defaults to a temporary directory. Needs python.wasm where the CLI
installs it (`sandlog runtimes install`) or in $SANDLOG_RUNTIMES_DIR.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List

import sandlog


def scripted_model() -> Iterator[List[Dict[str, Any]]]:
    """What a model would emit, turn by turn: a list of tool calls each."""
    yield [
        {"tool": "write_file", "path": "data/sales.csv", "text": "region,amount\nnorth,120\nsouth,80\nnorth,30\n"},
        {"tool": "python", "code": "import csv\nrows = list(csv.DictReader(open('/app/data/sales.csv')))\nprint(len(rows), 'rows')"},
    ]
    # The kernel still has `rows` and `csv` from the previous turn.
    yield [
        {
            "tool": "python",
            "code": (
                "totals = {}\n"
                "for row in rows:\n"
                "    totals[row['region']] = totals.get(row['region'], 0) + int(row['amount'])\n"
                "import json\n"
                "open('/app/report.json', 'w').write(json.dumps(totals, sort_keys=True))\n"
                "print(totals)"
            ),
        },
    ]
    yield [{"tool": "read_file", "path": "report.json"}]
    yield [{"tool": "finish", "answer": "north sold 150, south 80"}]


def run_tool(engine: sandlog.Engine, kernel: sandlog.Kernel, sid: str, call: Dict[str, Any]) -> str:
    tool = call["tool"]
    if tool == "python":
        # A platform would forward these chunks to its user as they come.
        streamed: List[bytes] = []

        def on_output(stream: str, chunk: bytes) -> None:
            if stream == "stdout":
                streamed.append(chunk)

        result = kernel.execute(call["code"], timeout=30, on_output=on_output)
        if b"".join(streamed) != result.stdout_bytes:
            raise RuntimeError("the streamed output is not the recorded output")
        if not result.ok:
            return f"error ({result.outcome}): {result.stderr or result.message}"
        return result.stdout
    if tool == "write_file":
        engine.write_file(sid, call["path"], call["text"].encode(), overwrite=True)
        return f"wrote {call['path']}"
    if tool == "read_file":
        return engine.read_file(sid, call["path"]).decode()
    raise ValueError(f"unknown tool {tool!r}")


def main(root: Path) -> int:
    with sandlog.Engine.init(root) as engine:
        sid = engine.create_session({"agent": "example", "task": "sales-report"})
        transcript: List[str] = []
        answer = None
        with engine.kernel(sid) as kernel:
            for turn, calls in enumerate(scripted_model(), start=1):
                for call in calls:
                    if call["tool"] == "finish":
                        answer = call["answer"]
                        break
                    observation = run_tool(engine, kernel, sid, call)
                    transcript.append(observation)
                    print(f"turn {turn}: {call['tool']} -> {observation.strip()}")
                if answer is not None:
                    break
        report = json.loads(transcript[-1])
        if report != {"north": 150, "south": 80}:
            print(f"unexpected report {report}", file=sys.stderr)
            return 1
        executed = [event for event in engine.log(session_id=sid) if event["kind"] == "session.executed"]
        warm = [event["payload"]["warm"] for event in executed]
        print(f"answer: {answer}; {len(executed)} executions, warm: {warm}")
        if warm != [False, True]:
            print("the second step did not reuse the kernel", file=sys.stderr)
            return 1
        # The evidence: every event of the session with its proof, the
        # code, output and files, under a checkpoint signed now.
        key = root / "example.key"
        vkey = sandlog.generate_key(key, name="example.sandlog")
        bundle = engine.export_evidence(sid, key=key)
    checked = sandlog.verify_evidence(bundle, vkey)
    print(f"bundle verified: {checked['events']} events, {checked['blobs']} blobs, origin {checked['origin']}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory() as scratch:
        sys.exit(main(Path(scratch) / "root"))
