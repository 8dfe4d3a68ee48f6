"""Operations, checked with the tools operators run: `sandlog serve`'s
`/metrics` parsed by Prometheus's own Python parser (the OpenMetrics one
of `prometheus-client`), its values moving as executions run; its traces
received by an OTLP/HTTP receiver built on the official
`opentelemetry-proto` messages; and every line of `sandlog log --format
ocsf` validated against the published OCSF schema (OCSF 1.1.0 as shipped
by the `ocsf-json-schema` package, as JSON Schema, checked by
`jsonschema`). Packages pinned in the Makefile; run by `make mcp-test`,
which sets SANDLOG_BIN to the built binary."""

import http.server
import json
import os
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request

import jsonschema
from ocsf_json_schema import OcsfJsonSchemaEmbedded, get_ocsf_schema
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client.openmetrics.parser import text_string_to_metric_families


def sandlog_bin():
    path = os.environ.get("SANDLOG_BIN", "")
    assert path and os.access(path, os.X_OK), (
        f"SANDLOG_BIN={path!r} must name the built sandlog binary (`make mcp-test` sets it)"
    )
    return path


def sandlog(root, *args, check=True):
    result = subprocess.run(
        [sandlog_bin(), "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, NO_COLOR="1"),
    )
    if check:
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


class Server:
    def __init__(self, root, env=None):
        self.process = subprocess.Popen(
            [sandlog_bin(), "--root", str(root), "serve", "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=dict(os.environ, **(env or {})),
        )
        line = self.process.stdout.readline().strip()
        assert line.startswith("listening on http://"), line
        self.base = line.removeprefix("listening on ")

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    def scrape(self):
        status, headers, body = self.request("GET", "/metrics")
        assert status == 200, body
        assert headers["Content-Type"].startswith("application/openmetrics-text"), headers
        # The strict OpenMetrics parser: a malformed exposition raises.
        return list(text_string_to_metric_families(body.decode()))

    def close(self):
        self.process.terminate()
        self.process.wait(timeout=60)


def sample(families, name, **labels):
    """The value of the sample `name` with exactly these labels (0 if the
    series does not exist yet)."""
    for family in families:
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0.0


def test_metrics_move_as_executions_run():
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        sandlog(root, "init")
        server = Server(root)
        try:
            before = server.scrape()
            head_before = sample(before, "sandlog_log_head_position")
            assert head_before >= 1
            assert sample(before, "sandlog_log_size_bytes") > 0

            status, _, body = server.request("POST", "/v1/sessions", {})
            assert status == 201, body
            session = json.loads(body)["session_id"]
            for code in ["print(1)", "print(2)", "1/0"]:
                status, _, body = server.request(
                    "POST", f"/v1/sessions/{session}/exec", {"code": code}
                )
                assert status == 200, body
            status, _, _ = server.request(
                "GET", "/v1/sessions/00000000-0000-4000-8000-000000000000"
            )
            assert status == 404
            status, _, body = server.request("POST", "/v1/verify")
            assert status == 200, body
            status, _, body = server.request("POST", "/v1/prune", {"older_than": "0s"})
            assert status == 200, body

            after = server.scrape()
            names = {family.name for family in after}
            for name in [
                "sandlog_executions",
                "sandlog_execution_duration_seconds",
                "sandlog_execution_queue_wait_seconds",
                "sandlog_appends",
                "sandlog_append_duration_seconds",
                "sandlog_log_size_bytes",
                "sandlog_log_head_position",
                "sandlog_prune_runs",
                "sandlog_prune_sessions_removed",
                "sandlog_verify_runs",
                "sandlog_errors",
                "sandlog_http_requests",
                "sandlog_kernels_live",
                "sandlog_kernels_started",
            ]:
                assert name in names, (name, sorted(names))
            ok = dict(runtime="python", outcome="ok")
            error = dict(runtime="python", outcome="error")
            assert sample(after, "sandlog_executions_total", **ok) == sample(
                before, "sandlog_executions_total", **ok
            ) + 2
            assert sample(after, "sandlog_executions_total", **error) == 1
            assert sample(after, "sandlog_execution_duration_seconds_count", runtime="python") == 3
            assert sample(after, "sandlog_execution_queue_wait_seconds_count") == 3
            assert sample(after, "sandlog_appends_total") > sample(before, "sandlog_appends_total")
            assert sample(after, "sandlog_append_duration_seconds_count") == sample(
                after, "sandlog_appends_total"
            )
            assert sample(after, "sandlog_log_head_position") > head_before
            assert sample(after, "sandlog_verify_runs_total", result="ok") == 1
            assert sample(after, "sandlog_prune_runs_total", dry_run="false") == 1
            assert sample(after, "sandlog_prune_sessions_removed_total") == 1
            assert (
                sample(after, "sandlog_errors_total", **{"class": "not_found", "kind": "not_found"})
                == 1
            )
            assert (
                sample(
                    after,
                    "sandlog_http_requests_total",
                    route="/v1/sessions/{id}/exec",
                    method="POST",
                    status="200",
                )
                == 3
            )
            assert (
                sample(
                    after,
                    "sandlog_http_requests_total",
                    route="/v1/sessions/{id}",
                    method="GET",
                    status="404",
                )
                == 1
            )
            # Python ran in a warm kernel, which the prune then dropped.
            assert sample(after, "sandlog_kernels_started_total") >= 1
        finally:
            server.close()


class OtlpReceiver:
    """An OTLP/HTTP trace receiver on loopback: decodes each POST to
    /v1/traces as the protocol's ExportTraceServiceRequest and keeps its
    spans with their resource's attributes."""

    def __init__(self):
        self.spans = []
        self.paths = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.paths.append((self.path, self.headers.get("Content-Type")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource_spans in request.resource_spans:
                    resource = attributes(resource_spans.resource.attributes)
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            receiver.spans.append((resource, span))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def attributes(pairs):
    values = {}
    for pair in pairs:
        kind = pair.value.WhichOneof("value")
        values[pair.key] = getattr(pair.value, kind) if kind else None
    return values


def test_traces_reach_an_otlp_receiver_with_their_attributes():
    receiver = OtlpReceiver()
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        sandlog(root, "init")
        server = Server(
            root,
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            },
        )
        try:
            status, _, body = server.request("POST", "/v1/sessions", {})
            assert status == 201, body
            session = json.loads(body)["session_id"]
            status, _, body = server.request(
                "POST", f"/v1/sessions/{session}/exec", {"code": "print(1)"}
            )
            assert status == 200, body
            position = json.loads(body)["position"]
        finally:
            # SIGTERM: the server drains, and the exporter sends what is left.
            server.close()
        receiver.close()
        assert receiver.paths and all(
            path == "/v1/traces" and kind == "application/x-protobuf"
            for path, kind in receiver.paths
        ), receiver.paths
        spans = [(resource, span, attributes(span.attributes)) for resource, span in receiver.spans]
        assert all(resource.get("service.name") == "sandlog" for resource, _, _ in spans)
        executes = [(span, attrs) for _, span, attrs in spans if span.name == "execute"]
        assert len(executes) == 1, [span.name for _, span, _ in spans]
        execute, attrs = executes[0]
        assert attrs["sandlog.session_id"] == session, attrs
        assert attrs["sandlog.outcome"] == "ok", attrs
        assert attrs["sandlog.runtime"] == "python", attrs
        assert attrs["sandlog.position.first"] == position, attrs
        assert attrs["sandlog.position.last"] >= position, attrs
        requests = {span.span_id: (span, attrs) for _, span, attrs in spans if span.name.startswith("POST ")}
        parent, parent_attrs = requests[execute.parent_span_id]
        assert parent.name == "POST /v1/sessions/{id}/exec", parent.name
        assert parent.trace_id == execute.trace_id
        assert parent_attrs["http.route"] == "/v1/sessions/{id}/exec", parent_attrs
        assert parent_attrs["http.response.status_code"] == 200, parent_attrs
        # The span links to the log: its first position is the execution's event.
        event = json.loads(sandlog(root, "--json", "log", "--from", str(position), "--limit", "1").stdout)
        assert event["kind"] == "session.executed" and event["position"] == position


def test_mcp_tool_calls_are_traced():
    """Each MCP tool call is one span (`tools/call <tool>`, with the tool
    and its result), and the execution it runs nests under it, as an HTTP
    request's does."""
    import asyncio

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    receiver = OtlpReceiver()
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        sandlog(root, "init")
        env = dict(os.environ)
        env.update(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        )

        async def drive():
            params = StdioServerParameters(
                command=sandlog_bin(), args=["--root", root, "mcp"], env=env
            )
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    created = await client.call_tool("create_session", {})
                    session = json.loads(created.content[0].text)["session_id"]
                    executed = await client.call_tool(
                        "execute", {"session_id": session, "code": "print(1)"}
                    )
                    assert not executed.is_error, executed.content
                    missing = await client.call_tool(
                        "read_file", {"session_id": session, "path": "nothing.txt"}
                    )
                    assert missing.is_error

        asyncio.run(drive())
    receiver.close()
    spans = [(span, attributes(span.attributes)) for _, span in receiver.spans]
    calls = {span.name: (span, attrs) for span, attrs in spans if span.name.startswith("tools/call ")}
    assert {"tools/call create_session", "tools/call execute", "tools/call read_file"} <= set(
        calls
    ), sorted(span.name for span, _ in spans)
    call, attrs = calls["tools/call execute"]
    assert attrs["mcp.tool"] == "execute" and attrs["mcp.result"] == "ok", attrs
    assert calls["tools/call read_file"][1]["mcp.result"] == "tool_error"
    executes = [span for span, _ in spans if span.name == "execute"]
    assert len(executes) == 1, [span.name for span, _ in spans]
    assert executes[0].trace_id == call.trace_id
    assert executes[0].parent_span_id == call.span_id


OCSF_VERSION = "1.1.0"


def test_every_ocsf_line_is_valid_against_the_schema():
    schema = OcsfJsonSchemaEmbedded(get_ocsf_schema(version=OCSF_VERSION))
    validators = {}

    def validate(record):
        # Against the class's schema with the profiles the record declares
        # (OCSF's own rule), and no others.
        key = (record["class_uid"], tuple(record["metadata"].get("profiles", [])))
        if key not in validators:
            name = schema.lookup_class_name_from_uid(key[0])
            class_schema = schema.get_class_schema(name, list(key[1]))
            validators[key] = jsonschema.Draft202012Validator(class_schema)
        errors = sorted(validators[key].iter_errors(record), key=str)
        assert not errors, (record, [error.message for error in errors])

    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        sandlog(root, "init")
        session = json.loads(sandlog(root, "--json", "session", "create", "--label", "team=ops").stdout)[
            "session_id"
        ]
        sandlog(root, "exec", session, "--code", "open('out.txt','w').write('x')")
        sandlog(root, "exec", session, "--code", "raise SystemExit(3)", check=False)
        source = os.path.join(tmp, "in.txt")
        with open(source, "w") as handle:
            handle.write("hello")
        sandlog(root, "files", "put", session, "in.txt", "--from", source)
        sandlog(root, "files", "rm", session, "in.txt")
        sandlog(root, "session", "hold", session, "--reason", "audit")
        sandlog(root, "session", "release", session)
        other = json.loads(sandlog(root, "--json", "session", "create").stdout)["session_id"]
        sandlog(root, "session", "delete", other)
        sandlog(root, "--correlation-id", "task-7", "prune", "--older-than", "0s")

        lines = sandlog(root, "log", "--format", "ocsf").stdout.splitlines()
        envelopes = [json.loads(line) for line in sandlog(root, "--json", "log").stdout.splitlines()]
        assert len(lines) == len(envelopes) > 10
        classes = set()
        for line, envelope in zip(lines, envelopes):
            record = json.loads(line)
            validate(record)
            classes.add((record["class_uid"], record["activity_id"]))
            assert record["type_uid"] == record["class_uid"] * 100 + record["activity_id"]
            assert record["metadata"]["version"] == OCSF_VERSION
            # Provable against the log: the position and the chain hash.
            assert record["metadata"]["sequence"] == envelope["position"]
            assert record["unmapped"]["sandlog"]["hash"] == envelope["hash"]
            assert record["unmapped"]["sandlog"]["kind"] == envelope["kind"]
        assert (1007, 1) in classes, classes  # executions: Process Activity, Launch
        assert (1001, 3) in classes, classes  # file writes: File System Activity, Update
        assert (1001, 4) in classes, classes  # file deletes
        assert (3004, 1) in classes, classes  # sessions created: Entity Management
        assert (3004, 4) in classes, classes  # sessions deleted and pruned
        assert (0, 99) in classes, classes  # prune runs, intents: Base Event

        executed = [json.loads(line) for line in lines if json.loads(line)["class_uid"] == 1007]
        assert [r["status_id"] for r in executed] == [1, 2], executed
        assert executed[1]["exit_code"] == 3
        assert executed[0]["actor"]["session"]["uid"] == session

        # A consumer resumes where it stopped: everything once, then only
        # what is new, each line valid.
        first = sandlog(root, "log", "--format", "ocsf", "--checkpoint", "siem").stdout.splitlines()
        assert len(first) == len(lines)
        assert sandlog(root, "log", "--format", "ocsf", "--checkpoint", "siem").stdout == ""
        sandlog(root, "session", "create")
        new = sandlog(root, "log", "--format", "ocsf", "--checkpoint", "siem").stdout.splitlines()
        assert len(new) == 1, new
        record = json.loads(new[0])
        validate(record)
        assert record["class_uid"] == 3004 and record["activity_id"] == 1
        assert record["metadata"]["sequence"] == len(lines) + 1

        # Elsewhere the format is refused, naming where it belongs.
        refused = sandlog(root, "--format", "ocsf", "session", "list", check=False)
        assert refused.returncode == 2 and "sandlog log" in refused.stderr, refused
