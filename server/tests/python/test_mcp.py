"""`sandlog mcp` driven by the official MCP Python client (the `mcp` package
from PyPI, version pinned in the Makefile): list the tools, create a
session, execute code that writes a file, read it back, write and list
files, read the timeline, get a tool error, then find the execution in
`sandlog log`. Run by `make mcp-test` (part of `make test`), which sets
SANDLOG_BIN to the built binary."""

import asyncio
import json
import os
import subprocess

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

TOOLS = {"create_session", "execute", "list_files", "read_file", "write_file", "timeline"}


def sandlog_bin():
    path = os.environ.get("SANDLOG_BIN", "")
    assert path and os.access(path, os.X_OK), (
        f"SANDLOG_BIN={path!r} must name the built sandlog binary (`make mcp-test` sets it)"
    )
    return path


def call_json(result):
    assert not result.is_error, f"tool error: {result.content}"
    return json.loads(result.content[0].text)


async def drive(binary, root):
    params = StdioServerParameters(
        command=binary, args=["--root", str(root), "mcp"], env=dict(os.environ)
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            await client.initialize()
            listed = await client.list_tools()
            names = {tool.name for tool in listed.tools}
            assert TOOLS <= names, f"missing tools: {TOOLS - names}"

            session_id = call_json(await client.call_tool("create_session", {}))["session_id"]
            executed = call_json(
                await client.call_tool(
                    "execute",
                    {
                        "session_id": session_id,
                        "code": "open('out.txt', 'w').write('hello from mcp')\nprint('wrote')",
                    },
                )
            )
            assert executed["outcome"] == "ok", executed
            assert executed["stdout"] == "wrote\n", executed
            assert "out.txt" in executed["files_written"], executed
            assert executed["warm"] is False

            read_back = call_json(
                await client.call_tool("read_file", {"session_id": session_id, "path": "out.txt"})
            )
            assert read_back["content"] == "hello from mcp", read_back

            written = call_json(
                await client.call_tool(
                    "write_file",
                    {"session_id": session_id, "path": "notes/in.txt", "content": "from the client"},
                )
            )
            assert written["size"] == len("from the client")
            files = call_json(await client.call_tool("list_files", {"session_id": session_id}))
            assert sorted(f["path"] for f in files) == ["notes/in.txt", "out.txt"], files

            # The guest sees what the host wrote.
            seen = call_json(
                await client.call_tool(
                    "execute",
                    {"session_id": session_id, "code": "print(open('notes/in.txt').read())"},
                )
            )
            assert seen["stdout"] == "from the client\n", seen

            timeline = call_json(await client.call_tool("timeline", {"session_id": session_id}))
            kinds = [event["kind"] for event in timeline["events"]]
            assert kinds.count("session.executed") == 2, kinds
            assert kinds[0] == "session.created", kinds

            missing = await client.call_tool(
                "read_file", {"session_id": session_id, "path": "nope.txt"}
            )
            assert missing.is_error, missing
            assert "no such file" in missing.content[0].text, missing.content
    return session_id, executed["position"]


def test_mcp_round_trip(tmp_path):
    binary = sandlog_bin()
    root = tmp_path / "root"
    subprocess.run([binary, "--root", str(root), "--json", "init"], check=True, capture_output=True)
    session_id, position = asyncio.run(drive(binary, root))

    log = subprocess.run(
        [binary, "--root", str(root), "--json", "log", "--session", session_id, "--kind", "session.executed"],
        check=True,
        capture_output=True,
        text=True,
    )
    events = [json.loads(line) for line in log.stdout.splitlines()]
    assert len(events) == 2, events
    assert events[0]["position"] == position, (events, position)

    verify = subprocess.run(
        [binary, "--root", str(root), "--json", "verify"], check=True, capture_output=True, text=True
    )
    assert json.loads(verify.stdout)["ok"] is True


def test_mcp_with_only_home_and_path(tmp_path):
    """An MCP client configured with just `sandlog mcp` passes a minimal
    environment: no SANDLOG_* variable, only HOME and PATH. After
    `sandlog runtimes install` (from the runtimes `make` fetched, so the
    test downloads nothing; `cli/tests/cli/runtimes.rs` tests the download)
    the server finds them in the per-user directory and executes code."""
    binary = sandlog_bin()
    runtimes = os.environ.get("SANDLOG_RUNTIMES_DIR", "")
    assert os.path.isfile(os.path.join(runtimes, "python.wasm")), (
        f"SANDLOG_RUNTIMES_DIR={runtimes!r} must hold python.wasm (`make mcp-test` sets it)"
    )
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    # The per-user module cache is the tests' shared one, so python.wasm
    # is not compiled again; still no variable names it.
    cache = os.environ.get("SANDLOG_CACHE_DIR")
    if cache:
        os.symlink(cache, home / ".cache" / "sandlog")
    bare = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    installed = subprocess.run(
        [binary, "runtimes", "install", "--from", runtimes],
        env=bare, cwd=home, capture_output=True, text=True,
    )
    assert installed.returncode == 0, installed.stderr
    assert str(home / ".local" / "share" / "sandlog" / "runtimes") in installed.stdout
    subprocess.run([binary, "init"], env=bare, cwd=home, check=True, capture_output=True)

    async def drive_bare():
        params = StdioServerParameters(command=binary, args=["mcp"], env=bare, cwd=str(home))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                session_id = call_json(await client.call_tool("create_session", {}))["session_id"]
                return call_json(
                    await client.call_tool(
                        "execute", {"session_id": session_id, "code": "print(6 * 7)"}
                    )
                )

    executed = asyncio.run(drive_bare())
    assert executed["outcome"] == "ok", executed
    assert executed["stdout"] == "42\n", executed
    assert (home / "sandlog-data" / "sandlog.db").is_file()
