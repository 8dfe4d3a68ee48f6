"""Live output from `sandlog serve` (`POST /v1/sessions/{id}/exec` with
`Accept: text/event-stream` or JSON Lines) and from `sandlog mcp`
(`notifications/progress`), against the real binary and guest. Run by
`make mcp-test`, which sets SANDLOG_BIN."""

import asyncio
import http.client
import json
import os
import subprocess
import urllib.parse

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

# Prints, then waits until the test has seen the first chunk and says so
# by creating /app/go: the first frame provably arrives while the guest
# runs. Then output on both streams, interleaved.
CODE = """
import os, sys, time
print('ready', flush=True)
while not os.path.exists('/app/go'):
    time.sleep(0.01)
for i in range(3):
    print('out', i, flush=True)
    print('err', i, file=sys.stderr, flush=True)
"""


def sandlog_bin():
    path = os.environ.get("SANDLOG_BIN", "")
    assert path and os.access(path, os.X_OK), (
        f"SANDLOG_BIN={path!r} must name the built sandlog binary (`make mcp-test` sets it)"
    )
    return path


class Server:
    def __init__(self, root):
        self.process = subprocess.Popen(
            [sandlog_bin(), "--root", str(root), "serve", "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        line = self.process.stdout.readline().strip()
        assert line.startswith("listening on http://"), line
        self.address = urllib.parse.urlsplit(line.removeprefix("listening on "))

    def connection(self):
        return http.client.HTTPConnection(self.address.hostname, self.address.port, timeout=120)

    def close(self):
        self.process.terminate()
        self.process.wait(timeout=60)


def create_session(server):
    connection = server.connection()
    connection.request("POST", "/v1/sessions", body=b"{}", headers={"Content-Type": "application/json"})
    reply = connection.getresponse()
    assert reply.status == 201
    return json.loads(reply.read())["session_id"]


def frames(reply, accept):
    """Yields (type, object) frames as they arrive."""
    if accept == "text/event-stream":
        event = None
        while True:
            line = reply.readline()
            if not line:
                return
            line = line.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                value = json.loads(line.removeprefix("data: "))
                assert value["type"] == event, (event, value)
                yield event, value
    else:
        while True:
            line = reply.readline()
            if not line:
                return
            value = json.loads(line)
            yield value["type"], value


def stream_exec(tmp_path, accept):
    root = tmp_path / "root"
    subprocess.run([sandlog_bin(), "--root", str(root), "init"], check=True, capture_output=True)
    server = Server(root)
    try:
        session_id = create_session(server)
        connection = server.connection()
        connection.request(
            "POST",
            f"/v1/sessions/{session_id}/exec",
            body=json.dumps({"code": CODE, "timeout_ms": 60000}).encode(),
            headers={"Content-Type": "application/json", "Accept": accept},
        )
        reply = connection.getresponse()
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith(accept.split(",")[0].strip()), reply.headers
        seen = []
        for kind, value in frames(reply, accept):
            seen.append((kind, value))
            if kind == "output" and value.get("data") == "ready\n":
                (root / "workspaces" / session_id / "go").write_text("")
        return root, session_id, seen
    finally:
        server.close()


def check_stream(root, session_id, seen):
    kinds = [kind for kind, _ in seen]
    assert kinds[-1] == "result", kinds
    assert set(kinds[:-1]) == {"output"}, kinds
    result = seen[-1][1]
    assert result["outcome"] == "ok", result
    outputs = [value for kind, value in seen if kind == "output"]
    stdout = "".join(value["data"] for value in outputs if value["stream"] == "stdout")
    stderr = "".join(value["data"] for value in outputs if value["stream"] == "stderr")
    # Streamed is recorded: the result and the log agree with the stream.
    assert stdout == result["stdout"] == "ready\nout 0\nout 1\nout 2\n", result
    assert stderr == result["stderr"] == "err 0\nerr 1\nerr 2\n", result
    assert [value["stream"] for value in outputs][1:3] == ["stdout", "stderr"]
    log = subprocess.run(
        [sandlog_bin(), "--root", str(root), "--json", "log", "--session", session_id, "--kind", "session.executed"],
        check=True, capture_output=True, text=True,
    )
    events = [json.loads(line) for line in log.stdout.splitlines()]
    assert len(events) == 1 and events[0]["position"] == result["position"], events
    assert events[0]["payload"]["stdout_bytes"] == len(stdout.encode())
    assert events[0]["payload"]["stderr_bytes"] == len(stderr.encode())


def test_exec_streams_server_sent_events(tmp_path):
    check_stream(*stream_exec(tmp_path, "text/event-stream"))


def test_exec_streams_json_lines(tmp_path):
    check_stream(*stream_exec(tmp_path, "application/x-ndjson"))


def test_a_streamed_exec_of_a_missing_session_is_a_plain_404(tmp_path):
    root = tmp_path / "root"
    subprocess.run([sandlog_bin(), "--root", str(root), "init"], check=True, capture_output=True)
    server = Server(root)
    try:
        connection = server.connection()
        connection.request(
            "POST",
            "/v1/sessions/00000000-0000-4000-8000-000000000000/exec",
            body=b'{"code": "print(1)"}',
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        reply = connection.getresponse()
        assert reply.status == 404
        assert json.loads(reply.read())["error"] == "not_found"
    finally:
        server.close()


def test_mcp_execute_sends_output_as_progress(tmp_path):
    binary = sandlog_bin()
    root = tmp_path / "root"
    subprocess.run([binary, "--root", str(root), "init"], check=True, capture_output=True)

    async def drive():
        params = StdioServerParameters(command=binary, args=["--root", str(root), "mcp"], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                created = await client.call_tool("create_session", {})
                session_id = json.loads(created.content[0].text)["session_id"]
                progress = []

                async def on_progress(value, total, message):
                    progress.append((value, json.loads(message)))
                    if progress[-1][1].get("data") == "ready\n":
                        (root / "workspaces" / session_id / "go").write_text("")

                result = await client.call_tool(
                    "execute", {"session_id": session_id, "code": CODE}, progress_callback=on_progress
                )
                assert not result.is_error, result.content
                return session_id, progress, json.loads(result.content[0].text)

    session_id, progress, result = asyncio.run(drive())
    assert [value for value, _ in progress] == list(range(1, len(progress) + 1))
    chunks = [message for _, message in progress]
    assert "".join(c["data"] for c in chunks if c["stream"] == "stdout") == result["stdout"]
    assert "".join(c["data"] for c in chunks if c["stream"] == "stderr") == result["stderr"]
    assert result["stdout"] == "ready\nout 0\nout 1\nout 2\n"


def test_mcp_cancellation_stops_the_guest_and_is_recorded(tmp_path):
    """The client abandons an `execute` (the official client sends
    `notifications/cancelled`); the guest, in an endless loop, stops and the
    execution is recorded as `cancelled`. The session's next execution waits
    for that record (one writer a session), so no polling is needed."""
    binary = sandlog_bin()
    root = tmp_path / "root"
    subprocess.run([binary, "--root", str(root), "init"], check=True, capture_output=True)

    async def drive():
        params = StdioServerParameters(command=binary, args=["--root", str(root), "mcp"], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                created = await client.call_tool("create_session", {})
                session_id = json.loads(created.content[0].text)["session_id"]
                running = asyncio.Event()

                async def on_progress(value, total, message):
                    running.set()

                task = asyncio.create_task(
                    client.call_tool(
                        "execute",
                        {"session_id": session_id, "code": "print('go', flush=True)\nwhile True: pass", "timeout_ms": 30000},
                        progress_callback=on_progress,
                    )
                )
                await asyncio.wait_for(running.wait(), 120)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                after = await client.call_tool("execute", {"session_id": session_id, "code": "print(2)"})
                assert json.loads(after.content[0].text)["stdout"] == "2\n"
                timeline = await client.call_tool("timeline", {"session_id": session_id})
                return json.loads(timeline.content[0].text)["events"]

    events = asyncio.run(drive())
    outcomes = [event["payload"]["outcome"] for event in events if event["kind"] == "session.executed"]
    assert outcomes == ["cancelled", "ok"], outcomes
