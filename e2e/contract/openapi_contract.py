#!/usr/bin/env python3
"""Contract test: Sources/BeaconServer/openapi.json against a real `beacon` binary.

    python3 e2e/contract/openapi_contract.py --beacon .build/debug/beacon

1. The document is a valid OpenAPI 3.1 document (openapi_spec_validator).
2. `beacon routes` (one `METHOD /path` line per route) and the document's operations are the same set.
3. `beacon serve --demo` on a free 127.0.0.1 port with a throwaway data directory: a scenario sends a real request
   for every documented operation (the WebSocket upgrade up to its 101) plus error cases, and validates every answer:
   its status must be one the operation documents, its content type the documented one, its body valid against that
   status's schema (jsonschema, Draft 2020-12) and every property in it documented. Requests the scenario expects to
   succeed are validated against the documented request body too. The push-result webhook points at a local
   receiver: its callbacks must arrive, signed, and match `webhooks.pushResult`.
4. Every documented operation must have been exercised.

Prints one line per check and `N passed, M failed` at the end; exits 1 when anything failed.
Needs Python 3.11 with jsonschema, referencing and openapi_spec_validator; `cryptography` (else `openssl`) for a P-256 key.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import TLSSigAPIv2  # Tencent's own UserSig generator (PyPI tls-sig-api-v2)
from openapi_spec_validator import validate as validate_openapi
from referencing import Registry
from referencing.jsonschema import DRAFT202012

ROOT = Path(__file__).resolve().parents[2]
DOC_PATH = ROOT / "Sources" / "BeaconServer" / "openapi.json"
DOC_URI = "urn:beacon:openapi"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")

ORG, APP = "contract", "test"


# ---------------------------------------------------------------------------------------------------------------------
# Reporting


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failures: list[str] = []

    def ok(self, label: str) -> None:
        self.passed += 1
        print(f"PASS  {label}", flush=True)

    def fail(self, label: str, reason: str) -> None:
        self.failures.append(f"{label}: {reason}")
        print(f"FAIL  {label}: {reason}", flush=True)

    def check(self, condition: bool, label: str, reason: str = "") -> bool:
        if condition:
            self.ok(label)
        else:
            self.fail(label, reason or "check failed")
        return condition


# ---------------------------------------------------------------------------------------------------------------------
# The document


def escape_pointer(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def pointer(*segments: str) -> str:
    return "".join("/" + escape_pointer(str(s)) for s in segments)


@dataclass
class Operation:
    op_id: str
    method: str  # upper case
    path: str  # the document's template, e.g. /{org}/{app}/users/{username}
    obj: dict
    pointer: str  # JSON pointer of the operation object
    parameters: list[dict] = field(default_factory=list)


def strict_copy(doc: dict) -> dict:
    """The document with `unevaluatedProperties: false` on every object schema that lists `properties` (and says nothing
    about others): answers validated against it fail on a property the document does not list. Inline members of an
    `allOf` (refinements) and the `Envelope` (always extended by `allOf`) are left open; an `allOf` that extends the
    `Envelope` is closed instead."""
    copy = json.loads(json.dumps(doc))
    envelope = "#/components/schemas/Envelope"

    def visit(node: Any, refinement: bool = False, envelope_itself: bool = False) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item)
            return
        if not isinstance(node, dict):
            return
        members = node.get("allOf")
        if isinstance(members, list):
            if any(isinstance(m, dict) and m.get("$ref") == envelope for m in members):
                node.setdefault("unevaluatedProperties", False)
            for member in members:
                visit(member, refinement=True)
        if (
            isinstance(node.get("properties"), dict)
            and not refinement
            and not envelope_itself
            and "additionalProperties" not in node
            and "unevaluatedProperties" not in node
        ):
            node["unevaluatedProperties"] = False
        for key, value in node.items():
            if key == "allOf":
                continue
            if key == "properties" and isinstance(value, dict):
                for sub in value.values():
                    visit(sub)
            else:
                visit(value)

    schemas = copy.get("components", {}).get("schemas", {})
    for name, schema in schemas.items():
        visit(schema, envelope_itself=(name == "Envelope"))
    for key, value in copy.items():
        if key != "components":
            visit(value)
    for key, value in copy.get("components", {}).items():
        if key != "schemas":
            visit(value)
    return copy


class Document:
    def __init__(self, doc: dict) -> None:
        self.doc = doc
        self.registry = Registry().with_resource(DOC_URI, DRAFT202012.create_resource(doc))
        self.strict_registry = Registry().with_resource(DOC_URI, DRAFT202012.create_resource(strict_copy(doc)))
        self.operations: dict[str, Operation] = {}
        self.duplicate_ids: list[str] = []
        for path, item in doc.get("paths", {}).items():
            shared = item.get("parameters", [])
            for method in METHODS:
                if method not in item:
                    continue
                obj = item[method]
                op = Operation(
                    op_id=obj.get("operationId", f"{method.upper()} {path}"),
                    method=method.upper(),
                    path=path,
                    obj=obj,
                    pointer=pointer("paths", path, method),
                )
                params = {}
                for p in list(shared) + list(obj.get("parameters", [])):
                    p = self.follow(p)
                    params[(p["name"], p["in"])] = p
                op.parameters = list(params.values())
                if op.op_id in self.operations:
                    self.duplicate_ids.append(op.op_id)
                self.operations[op.op_id] = op
        self._validators: dict[str, jsonschema.Draft202012Validator] = {}

    def follow(self, obj: dict) -> dict:
        """Follows a local `$ref` (parameters, responses, request bodies) to its object."""
        seen = 0
        while isinstance(obj, dict) and "$ref" in obj and seen < 10:
            obj = self.at(obj["$ref"])
            seen += 1
        return obj

    def follow_pointer(self, obj: dict, where: str) -> tuple[dict, str]:
        """As `follow`, also answering the JSON pointer of the object reached."""
        while isinstance(obj, dict) and "$ref" in obj:
            where = obj["$ref"][1:]
            obj = self.at(obj["$ref"])
        return obj, where

    def at(self, ref: str) -> Any:
        if not ref.startswith("#/"):
            raise ValueError(f"only local references are supported: {ref}")
        node: Any = self.doc
        for raw in ref[2:].split("/"):
            key = raw.replace("~1", "/").replace("~0", "~")
            node = node[int(key)] if isinstance(node, list) else node[key]
        return node

    def validator(self, schema_pointer: str, strict: bool = False) -> jsonschema.Draft202012Validator:
        key = (schema_pointer, strict)
        if key not in self._validators:
            schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": f"{DOC_URI}#{schema_pointer}"}
            self._validators[key] = jsonschema.Draft202012Validator(
                schema,
                registry=self.strict_registry if strict else self.registry,
                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
            )
        return self._validators[key]

    def errors(self, schema_pointer: str, instance: Any, strict: bool = False) -> list[str]:
        """Where `instance` breaks the schema; with `strict`, also every property the schema does not list."""
        found = sorted(self.validator(schema_pointer).iter_errors(instance), key=lambda e: list(e.absolute_path))
        if not found and strict:
            found = sorted(self.validator(schema_pointer, strict=True).iter_errors(instance), key=lambda e: list(e.absolute_path))
            return [f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: undocumented property: {e.message[:300]}" for e in found[:5]]
        out = []
        for e in found[:5]:
            where = "/".join(str(p) for p in e.absolute_path) or "(root)"
            out.append(f"{where}: {e.message[:300]}")
        return out

    def response_for(self, op: Operation, status: int) -> tuple[dict, str] | None:
        """The documented response for `status` (exact, then `NXX`, then `default`) and its pointer."""
        responses = op.obj.get("responses", {})
        for key in (str(status), f"{str(status)[0]}XX", "default"):
            if key in responses:
                return self.follow_pointer(responses[key], op.pointer + pointer("responses", key))
        return None

    def request_schema(self, op: Operation, media_type: str) -> str | None:
        body = op.obj.get("requestBody")
        if body is None:
            return None
        body, where = self.follow_pointer(body, op.pointer + "/requestBody")
        if media_type not in body.get("content", {}):
            return None
        return where + pointer("content", media_type, "schema")


# ---------------------------------------------------------------------------------------------------------------------
# HTTP


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    raw: bytes
    json: Any = None

    @property
    def media_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()


def http_request(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None, timeout: float = 30) -> Answer:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        hdrs = {"Connection": "close"}
        hdrs.update(headers or {})
        connection.request(method, path, body=body, headers=hdrs)
        response = connection.getresponse()
        raw = response.read()
        answer = Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, raw)
        if answer.media_type == "application/json" and raw:
            try:
                answer.json = json.loads(raw)
            except ValueError:
                answer.json = None
        return answer
    finally:
        connection.close()


NOTSET = object()


class Client:
    """Sends requests named by operationId and validates each answer against the document."""

    def __init__(self, document: Document, report: Report, port: int) -> None:
        self.document = document
        self.report = report
        self.port = port
        self.exercised: set[str] = set()

    def url(self, op: Operation, params: dict, query: dict | None) -> str:
        values = {"org": ORG, "app": APP}
        values.update(params)

        def substitute(match: re.Match) -> str:
            name = match.group(1)
            if name not in values:
                raise KeyError(f"{op.op_id}: no value for path parameter {name}")
            return urllib.parse.quote(str(values[name]), safe="")

        path = re.sub(r"\{([^}]+)\}", substitute, op.path)
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return path

    def call(
        self,
        op_id: str,
        params: dict | None = None,
        *,
        token: str | None = None,
        body: Any = NOTSET,
        raw: bytes | None = None,
        content_type: str | None = None,
        query: dict | None = None,
        headers: dict | None = None,
        expect: int = 200,
        error: str | None = None,
        label: str = "",
        quiet: bool = False,
    ) -> Answer | None:
        op = self.document.operations.get(op_id)
        name = f"{op_id}{' ' + label if label else ''}"
        if op is None:
            self.report.fail(name, "the document has no such operation")
            return None
        self.exercised.add(op_id)
        path = self.url(op, params or {}, query)
        hdrs = dict(headers or {})
        if token:
            hdrs["Authorization"] = f"Bearer {token}"
        data = None
        if body is not NOTSET:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif raw is not None:
            data = raw
            if content_type:
                hdrs["Content-Type"] = content_type
        title = f"{name}: {op.method} {path[:120]} -> {expect}{' ' + error if error else ''}"
        problems: list[str] = []
        documented_query = {p["name"] for p in op.parameters if p.get("in") == "query"}
        problems += [f"query parameter {q!r} is not documented" for q in (query or {}) if q not in documented_query]
        # The request as the document describes it (only for requests expected to succeed: error cases are bad on purpose).
        if 200 <= expect < 300 and body is not NOTSET:
            where = self.document.request_schema(op, "application/json")
            if where is None:
                problems.append("the document has no application/json request body for this operation")
            else:
                problems += [f"request {p}" for p in self.document.errors(where, body)]
        try:
            answer = http_request(self.port, op.method, path, data, hdrs)
        except Exception as exc:  # noqa: BLE001 - any transport failure is a failed check
            self.report.fail(title, f"request failed: {exc!r}")
            return None
        problems += self.validate(op, answer)
        if answer.status != expect:
            problems.insert(0, f"status {answer.status}, expected {expect}; body {answer.raw[:300]!r}")
        elif error is not None and (not isinstance(answer.json, dict) or answer.json.get("error") != error):
            problems.insert(0, f"error code {answer.json.get('error') if isinstance(answer.json, dict) else None!r}, expected {error}")
        if problems:
            self.report.fail(title, "; ".join(problems))
        elif not quiet:
            self.report.ok(title)
        return answer

    def validate(self, op: Operation, answer: Answer) -> list[str]:
        found = self.document.response_for(op, answer.status)
        if found is None:
            return [f"status {answer.status} is not documented for {op.op_id} (documented: {', '.join(op.obj.get('responses', {}))})"]
        response, where = found
        content = response.get("content")
        if not content:
            return [] if not answer.raw else [f"status {answer.status} is documented without a body, got {len(answer.raw)} bytes"]
        if answer.media_type not in content:
            return [f"content type {answer.headers.get('content-type')!r} is not documented for {answer.status} ({', '.join(content)})"]
        schema_where = where + pointer("content", answer.media_type, "schema")
        if "schema" not in content[answer.media_type]:
            return []
        if answer.media_type == "application/json":
            if answer.json is None:
                return [f"body is not JSON: {answer.raw[:200]!r}"]
            instance = answer.json
        else:
            instance = answer.raw.decode("utf-8", "replace")
        return [f"answer {p}" for p in self.document.errors(schema_where, instance, strict=True)]

    def raw_error(self, method: str, path: str, expect: int, error: str, token: str | None = None, allow: str | None = None, body: bytes | None = None) -> Answer | None:
        """A request no operation documents (unknown path, unrouted method): the answer must be the shared `Error`."""
        title = f"undocumented request: {method} {path} -> {expect} {error}"
        hdrs = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            answer = http_request(self.port, method, path, body, hdrs)
        except Exception as exc:  # noqa: BLE001
            self.report.fail(title, f"request failed: {exc!r}")
            return None
        problems = []
        if answer.status != expect:
            problems.append(f"status {answer.status}; body {answer.raw[:200]!r}")
        if answer.media_type != "application/json" or answer.json is None:
            problems.append(f"not a JSON body ({answer.headers.get('content-type')})")
        else:
            problems += self.document.errors("/components/schemas/Error", answer.json, strict=True)
            if answer.json.get("error") != error:
                problems.append(f"error code {answer.json.get('error')!r}")
        if allow is not None and answer.headers.get("allow") != allow:
            problems.append(f"Allow {answer.headers.get('allow')!r}, expected {allow!r}")
        if problems:
            self.report.fail(title, "; ".join(problems))
        else:
            self.report.ok(title)
        return answer


# ---------------------------------------------------------------------------------------------------------------------
# Webhook receiver


class Receiver:
    """A loopback HTTP server that records webhook callbacks and answers 200."""

    def __init__(self) -> None:
        self.received: list[tuple[dict, bytes]] = []
        lock = threading.Lock()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                with lock:
                    received.append(({k.lower(): v for k, v in self.headers.items()}, raw))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------------------------------------------------------------
# Helpers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_environment() -> dict:
    """The environment without any BEACON_* setting of the caller's, plus a fresh secret key (32 bytes, base64)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BEACON_")}
    env["BEACON_SECRET_KEY"] = base64.b64encode(secrets.token_bytes(32)).decode()
    return env


def p256_pem() -> str:
    """A P-256 private key in PEM (PKCS#8)."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP256R1())
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
    except ImportError:
        out = subprocess.run(
            ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
            check=True, capture_output=True, text=True,
        )
        return out.stdout


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = "beacon-contract-" + uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + value.encode() + b"\r\n")
    for name, (filename, data) in files.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n"
        )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def normalize_route(path: str) -> str:
    """`/:org/:app/users/:username` and `/{org}/{app}/users/{username}` → `/{org}/{app}/users/{username}`."""
    segments = []
    for segment in path.strip().split("/"):
        if segment.startswith(":"):
            segment = "{" + segment[1:] + "}"
        segments.append(segment)
    return "/".join(segments).rstrip("/") or "/"


def shape(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


def data_of(answer: Answer | None) -> Any:
    return answer.json.get("data") if answer is not None and isinstance(answer.json, dict) else None


def entities_of(answer: Answer | None) -> list:
    if answer is not None and isinstance(answer.json, dict) and isinstance(answer.json.get("entities"), list):
        return answer.json["entities"]
    return []


# ---------------------------------------------------------------------------------------------------------------------
# Checks


def check_document(report: Report) -> Document | None:
    try:
        doc = json.loads(DOC_PATH.read_text())
    except (OSError, ValueError) as exc:
        report.fail(f"read {DOC_PATH.relative_to(ROOT)}", repr(exc))
        return None
    report.ok(f"read {DOC_PATH.relative_to(ROOT)}")
    report.check(doc.get("openapi") == "3.1.0", "openapi is 3.1.0", f"openapi is {doc.get('openapi')!r}")
    try:
        validate_openapi(doc)
        report.ok("openapi_spec_validator: valid OpenAPI 3.1 document")
    except Exception as exc:  # noqa: BLE001
        report.fail("openapi_spec_validator: valid OpenAPI 3.1 document", str(exc)[:2000])
    document = Document(doc)
    report.check(not document.duplicate_ids, "operationIds are unique", f"duplicates: {document.duplicate_ids}")
    missing = [op.op_id for op in document.operations.values() if "security" not in op.obj or "summary" not in op.obj or "operationId" not in op.obj]
    report.check(not missing, "every operation has operationId, summary and security", f"missing in: {missing}")
    return document


def check_routes(report: Report, document: Document, beacon: str) -> None:
    label = "`beacon routes` lists the routes"
    try:
        out = subprocess.run([beacon, "routes"], capture_output=True, text=True, timeout=120, env=child_environment(), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        report.fail(label, repr(exc))
        return
    if out.returncode != 0:
        report.fail(label, f"exit {out.returncode}: {(out.stderr or out.stdout).strip()[:500]}")
        return
    routes: set[tuple[str, str]] = set()
    bad_lines = []
    for line in out.stdout.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = re.fullmatch(r"\s*([A-Z]+)\s+(/\S*)\s*", line)
        if not match:
            bad_lines.append(line)
            continue
        routes.add((match.group(1), normalize_route(match.group(2))))
    if bad_lines:
        report.fail(label, f"lines that are not `METHOD /path`: {bad_lines[:5]}")
        return
    if not routes:
        report.fail(label, "no routes printed")
        return
    report.ok(f"{label} ({len(routes)} routes)")

    documented = {(op.method, normalize_route(op.path)): op for op in document.operations.values()}
    by_shape_doc = {(m, shape(p)): p for (m, p) in documented}
    by_shape_routes = {(m, shape(p)): p for (m, p) in routes}
    undocumented, unrouted, renamed = [], [], []
    for method, path in sorted(routes):
        if (method, path) in documented:
            continue
        other = by_shape_doc.get((method, shape(path)))
        if other:
            renamed.append(f"{method} {path} (document: {other})")
        else:
            undocumented.append(f"{method} {path}")
    for (method, path), op in sorted(documented.items()):
        if (method, path) not in routes and (method, shape(path)) not in by_shape_routes:
            unrouted.append(f"{method} {path} ({op.op_id})")
    report.check(not undocumented, "every route is documented", "routes the document lacks: " + ", ".join(undocumented))
    report.check(not unrouted, "every documented operation is routed", "operations the server does not route: " + ", ".join(unrouted))
    report.check(not renamed, "path parameter names match the routes", "; ".join(renamed))


class Server:
    def __init__(self, beacon: str, workdir: Path) -> None:
        self.beacon = beacon
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.log_path = workdir / "beacon.log"
        self.port = free_port()
        self.env = child_environment()
        self.process: subprocess.Popen | None = None
        self.log_file = None

    def create_app(self) -> dict:
        out = subprocess.run(
            [self.beacon, "app", "create", f"{ORG}/{APP}", "--json", "--data-dir", str(self.data_dir)],
            capture_output=True, text=True, timeout=120, env=self.env, stdin=subprocess.DEVNULL,
        )
        if out.returncode != 0:
            raise RuntimeError(f"beacon app create failed ({out.returncode}): {out.stderr.strip()[:500]}")
        line = [l for l in out.stdout.splitlines() if l.strip().startswith("{")][-1]
        return json.loads(line)

    def start(self) -> None:
        self.log_file = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            # The webhook receiver listens on loopback, a target refused unless allowed (issue 22).
            [self.beacon, "serve", "--demo", "--webhook-private-targets", "--port", str(self.port), "--data-dir", str(self.data_dir)],
            stdout=self.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
        )

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"beacon serve exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            try:
                if http_request(self.port, "GET", "/health", timeout=2).status == 200 and "Demo ready" in self.log():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"beacon serve was not ready (GET /health and the demo's instructions) within {timeout:.0f} s:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=25)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.log_file is not None:
            self.log_file.close()


def scenario(c: Client, server: Server, credentials: dict, receiver: Receiver) -> None:
    report, document = c.report, c.document
    log = server.log()

    # --- operations --------------------------------------------------------------------------------------------------
    c.call("getHealth")
    ready = c.call("getReadiness")
    if ready is not None and isinstance(ready.json, dict):
        report.check(ready.json.get("push_worker") == "running", "/ready: the push worker runs (push is on)", repr(ready.json))
    metrics = c.call("getMetrics")
    if metrics is not None:
        report.check(b"beacon_http_requests_total" in metrics.raw, "/metrics: Prometheus text with beacon_http_requests_total")
    served = c.call("getOpenAPIDocument")
    if served is not None and served.status == 200:
        report.check(served.json == document.doc, "GET /openapi.json serves this document", "the served document differs from Sources/BeaconServer/openapi.json")

    # --- tokens ------------------------------------------------------------------------------------------------------
    answer = c.call("getToken", body={"grant_type": "client_credentials", "client_id": credentials["client_id"], "client_secret": credentials["client_secret"]}, label="(client_credentials)")
    app_token = (answer.json or {}).get("access_token") if answer else None
    if not app_token:
        raise RuntimeError("no app token: cannot go on")
    report.check((answer.json or {}).get("application") == f"{ORG}#{APP}", "app token names its app (application = org#app)", repr(answer.json))
    c.call("getToken", body={"grant_type": "client_credentials", "client_id": credentials["client_id"], "client_secret": "wrong"}, expect=400, error="invalid_grant", label="(wrong secret)")
    c.call("getToken", body={"grant_type": "authorization_code"}, expect=400, error="illegal_argument", label="(unknown grant_type)")

    # --- the console: its page, and sessions that act as the app with a CSRF token --------------------------------------
    for op_id in ("getConsolePage", "getConsoleScript", "getConsoleStyleSheet"):
        c.call(op_id)
    c.call("getConsoleSession", expect=401, error="unauthorized", label="(no cookie)")
    sign_in = {"org": ORG, "app": APP, "client_id": credentials["client_id"], "client_secret": credentials["client_secret"]}
    c.call("signInToConsole", body={**sign_in, "client_secret": "wrong"}, expect=400, error="invalid_grant", label="(wrong secret)")
    c.call("signInToConsole", body={**sign_in, "app": "nope"}, expect=400, error="invalid_grant", label="(unknown app: same answer)")
    answer = c.call("signInToConsole", body=sign_in)
    set_cookie = answer.headers.get("set-cookie", "") if answer else ""
    attributes = [part.strip().lower() for part in set_cookie.split(";")]
    report.check(
        set_cookie.startswith("beacon_console=") and "httponly" in attributes and "samesite=strict" in attributes and "path=/" in attributes,
        "the console session cookie is HttpOnly, SameSite=Strict, Path=/", repr(set_cookie))
    cookie = {"Cookie": set_cookie.split(";")[0]}
    csrf = ((answer.json or {}) if answer else {}).get("csrf_token", "")
    answer = c.call("getConsoleSession", headers=cookie)
    report.check(((answer.json or {}) if answer else {}).get("csrf_token") == csrf, "the session answers its CSRF token again")
    c.call("listPushCertificates", headers={**cookie, "X-CSRF-Token": csrf}, label="(console session)")
    c.call("disconnectUser", {"username": "nobody"}, headers=cookie, expect=403, error="forbidden_op", label="(console session, a GET without CSRF token)")
    c.call("deletePushCertificate", {"name": "none"}, headers=cookie, expect=403, error="forbidden_op", label="(console session without CSRF token)")
    c.call("deletePushCertificate", {"name": "none"}, headers={**cookie, "X-CSRF-Token": "0" * 64}, expect=403, error="forbidden_op", label="(wrong CSRF token)")
    c.call("deletePushCertificate", {"name": "none"}, headers={**cookie, "X-CSRF-Token": csrf}, expect=404, error="service_resource_not_found", label="(console session with CSRF token)")
    c.call("signOutOfConsole", headers=cookie, expect=403, error="forbidden_op", label="(no CSRF token)")
    c.call("signOutOfConsole", headers={**cookie, "X-CSRF-Token": csrf}, expect=204)
    c.call("getConsoleSession", headers=cookie, expect=401, error="unauthorized", label="(signed out)")
    c.call("listPushCertificates", headers={**cookie, "X-CSRF-Token": csrf}, expect=401, error="auth_bad_access_token", label="(ended console session)")

    # --- users -------------------------------------------------------------------------------------------------------
    password = "pw-" + secrets.token_hex(4)
    answer = c.call("createUsers", token=app_token, body=[{"username": u, "password": password} for u in ("carol", "dave", "erin")], label="(array)")
    report.check(sorted(e.get("username") for e in entities_of(answer)) == ["carol", "dave", "erin"], "createUsers answers the three users")
    c.call("createUsers", token=app_token, body={"username": "frank", "password": password, "nickname": "Frank"}, label="(one object)")
    c.call("createUsers", token=app_token, body={"username": "carol", "password": password}, expect=400, error="duplicate_unique_property_exists", label="(existing user)")
    answer = c.call("listUsers", token=app_token, query={"limit": "2"}, label="(first page)")
    first = [e.get("username") for e in entities_of(answer)]
    cursor = (answer.json or {}).get("cursor") if answer else None
    report.check(first == ["carol", "dave"] and bool(cursor), "listUsers pages in username order with a cursor", repr((first, cursor)))
    answer = c.call("listUsers", token=app_token, query={"limit": "2", "cursor": cursor or ""}, label="(next page)")
    report.check([e.get("username") for e in entities_of(answer)] == ["erin", "frank"], "the cursor gives the next page", repr(entities_of(answer)))
    answer = c.call("listUsers", token=app_token, query={"prefix": "er"}, label="(prefix)")
    report.check([e.get("username") for e in entities_of(answer)] == ["erin"] and "cursor" not in (answer.json or {}), "listUsers finds by prefix; no cursor on the last page")
    c.call("listUsers", token=app_token, query={"cursor": "%%%"}, expect=400, error="illegal_argument", label="(foreign cursor)")
    c.call("createUsers", token=app_token, raw=b'{"username":"big","password":"' + b"x" * (300 * 1024) + b'"}', content_type="application/json", expect=413, error="request_entity_too_large", label="(body over 256 KB)")

    tokens = {}
    for user in ("carol", "dave", "erin"):
        answer = c.call("getToken", body={"grant_type": "password", "username": user, "password": password}, label=f"(password, {user})")
        tokens[user] = (answer.json or {}).get("access_token") if answer else None
        if answer is not None and answer.status == 200:
            report.check(((answer.json or {}).get("user") or {}).get("username") == user, f"user token for {user} carries its user")
    if not all(tokens.values()):
        raise RuntimeError("no user tokens: cannot go on")

    c.call("getUser", {"username": "carol"}, token=tokens["carol"])
    answer = c.call("updateUser", {"username": "carol"}, token=tokens["carol"], body={"nickname": "Carol", "timezone": "Asia/Tokyo", "notification_display_style": 1})
    if answer is not None and entities_of(answer):
        e = entities_of(answer)[0]
        report.check((e.get("nickname"), e.get("timezone"), e.get("notification_display_style")) == ("Carol", "Asia/Tokyo", 1), "updateUser answers the changed user", repr(e))
    # Error cases.
    c.call("getUser", {"username": "ghost"}, token=app_token, expect=404, error="user_not_found", label="(unknown user)")
    c.call("getUser", {"username": "carol"}, expect=401, error="unauthorized", label="(no token)")
    c.call("getUser", {"username": "carol"}, token="not-a-token", expect=401, error="auth_bad_access_token", label="(bad token)")
    c.call("getUser", {"username": "dave"}, token=tokens["carol"], expect=403, error="forbidden_op", label="(another user's token)")
    c.call("getUser", {"org": "nope", "app": "nope", "username": "carol"}, token=app_token, expect=404, error="organization_application_not_found", label="(unknown app)")
    c.call("updateUser", {"username": "carol"}, token=tokens["carol"], raw=b"{not json", content_type="application/json", expect=400, error="json_parse", label="(bad JSON)")
    c.call("updateUser", {"username": "carol"}, token=tokens["carol"], body={"timezone": "Mars/Olympus"}, expect=400, error="illegal_argument", label="(unknown time zone)")
    c.raw_error("PATCH", f"/{ORG}/{APP}/users/carol", 405, "method_not_allowed", token=app_token, allow="DELETE, GET, PUT")
    c.raw_error("GET", f"/{ORG}/{APP}/no/such/path", 404, "service_resource_not_found", token=app_token)

    # --- groups ------------------------------------------------------------------------------------------------------
    c.call("createGroup", token=tokens["carol"], body={"groupname": "x", "owner": "carol", "members": ["dave"]}, expect=403, error="forbidden_op", label="(a user token naming other members)")
    c.call("createGroup", token=tokens["carol"], body={"groupname": "x", "owner": "carol", "maxusers": 201}, expect=400, error="illegal_argument", label="(a user token over userGroupMaxUsers)")
    answer = c.call("createGroup", token=tokens["carol"], body={"groupname": "contract", "desc": "a group", "owner": "carol", "maxusers": 10}, label="(a user's group of one)")
    mine = (data_of(answer) or {}).get("groupid") if isinstance(data_of(answer), dict) else None
    c.call("addGroupMember", {"group": mine or "0", "username": "dave"}, token=tokens["carol"], expect=403, error="forbidden_op", label="(the owner's user token)")
    answer = c.call("createGroup", token=app_token, body={"groupname": "contract", "desc": "a group", "owner": "carol", "members": ["dave"], "maxusers": 10}, label="(the app's)")
    group = (data_of(answer) or {}).get("groupid") if isinstance(data_of(answer), dict) else None
    if not group:
        raise RuntimeError("no group: cannot go on")
    c.call("createGroup", token=tokens["carol"], body={"groupname": "x", "owner": "dave"}, expect=403, error="forbidden_op", label="(owner is another user)")
    answer = c.call("getGroup", {"group": group}, token=tokens["dave"])
    details = data_of(answer)
    if isinstance(details, list) and details:
        report.check(details[0].get("owner") == "carol" and details[0].get("affiliations_count") == 2, "getGroup: owner carol, 2 members", repr(details[0]))
    c.call("getGroup", {"group": "999999999"}, token=app_token, expect=404, error="group_not_found", label="(unknown group)")
    c.call("getGroup", {"group": group}, token=tokens["erin"], expect=403, error="forbidden_op", label="(not a member)")
    c.call("getGroupMembers", {"group": group}, token=app_token)
    c.call("addGroupMember", {"group": group, "username": "erin"}, token=app_token)
    c.call("removeGroupMember", {"group": group, "username": "erin"}, token=tokens["erin"], label="(a member leaves)")
    c.call("removeGroupMember", {"group": group, "username": "carol"}, token=app_token, expect=403, error="forbidden_op", label="(the owner)")

    # --- push configurations and bindings --------------------------------------------------------------------------
    pem = p256_pem()
    c.call("uploadPushCertificate", token=app_token, body={"name": "contract-apns", "kind": "p8", "file": pem, "key_id": "CONTRACT01", "team_id": "CONTRACTTM", "environment": "development", "bundle_id": "com.example.contract"}, label="(JSON)")
    form = {"name": "contract-apns-2", "kind": "p8", "key_id": "CONTRACT02", "team_id": "CONTRACTTM", "environment": "development", "bundle_id": "com.example.contract", "voip": "true"}
    raw, ctype = multipart(form, {"file": ("AuthKey_CONTRACT02.p8", p256_pem().encode())})
    where = document.request_schema(document.operations["uploadPushCertificate"], "multipart/form-data")
    if where is None:
        report.fail("uploadPushCertificate (multipart) request", "the document has no multipart/form-data request body")
    else:
        problems = document.errors(where, {**form, "file": "(bytes)"})
        report.check(not problems, "uploadPushCertificate (multipart): the form matches the documented request", "; ".join(problems))
    answer = c.call("uploadPushCertificate", token=app_token, raw=raw, content_type=ctype, label="(multipart/form-data)")
    if entities_of(answer):
        report.check(entities_of(answer)[0].get("voip") is True, "multipart upload: voip=true is kept", repr(entities_of(answer)[0]))
    raw, ctype = multipart({k: v for k, v in form.items() if k != "voip"}, {"file": ("huge.p8", b"0" * (300 * 1024))})
    c.call("uploadPushCertificate", token=app_token, raw=raw, content_type=ctype, expect=413, error="request_entity_too_large", label="(multipart over 256 KB)")
    c.call("uploadPushCertificate", token=app_token, raw=b"--nothing--", content_type="multipart/form-data; boundary=zzz", expect=400, error="json_parse", label="(malformed multipart)")
    c.call("uploadPushCertificate", token=app_token, body={"name": "broken", "kind": "p8", "file": "not a key", "key_id": "K", "team_id": "T", "environment": "development", "bundle_id": "com.example.contract"}, expect=400, error="invalid_p8_key", label="(not a key)")
    answer = c.call("listPushCertificates", token=app_token)
    report.check({"contract-apns", "contract-apns-2"} <= {e.get("name") for e in entities_of(answer)}, "listPushCertificates lists both uploads")
    c.call("listPushCertificates", token=tokens["carol"], expect=403, error="forbidden_op", label="(user token)")

    phone_token = secrets.token_hex(32)
    old_token = secrets.token_hex(32)
    c.call("bindDevice", {"username": "dave"}, token=tokens["dave"], body={"device_id": "dave-phone", "device_token": phone_token, "notifier_name": "contract-apns"})
    c.call("bindDevice", {"username": "dave"}, token=app_token, body={"device_id": "dave-old", "device_token": old_token, "notifier_name": "contract-apns"}, label="(second device)")
    c.call("bindDevice", {"username": "dave"}, token=tokens["dave"], body={"device_id": "dave-phone", "device_token": phone_token, "notifier_name": "nobody"}, expect=400, error="notifier_not_found", label="(unknown notifier)")
    answer = c.call("listBindings", {"username": "dave"}, token=tokens["dave"])
    report.check({"dave-phone", "dave-old"} <= {e.get("device_id") for e in entities_of(answer)}, "listBindings lists dave's devices")
    answer = c.call("sendTestPush", token=app_token, body={"username": "dave", "device_id": "dave-phone", "title": "Test"})
    test_id = (data_of(answer) or {}).get("message_id") if isinstance(data_of(answer), dict) else None
    report.check((data_of(answer) or {}).get("queued") == 1 if test_id else False, "sendTestPush queues one push for dave-phone", repr(data_of(answer)))
    records: list = []
    deadline = time.monotonic() + 20
    while test_id and time.monotonic() < deadline:
        records = entities_of(c.call("listDeliveries", token=app_token, query={"message_id": test_id}, label="(test push)", quiet=True))
        if records and records[0].get("status") != "pending":
            break
        time.sleep(0.25)
    report.check(
        [(r.get("device_id"), r.get("status"), r.get("http_status")) for r in records] == [("dave-phone", "sent", 200)],
        "the test push reaches APNs and its answer is in the delivery record", repr(records))
    c.call("sendTestPush", token=app_token, body={"username": "carol"}, expect=404, error="service_resource_not_found", label="(no bound device)")
    answer = c.call("sendTestPush", token=app_token, body={"device_token": phone_token.upper()}, label="(by device token)")
    report.check(
        isinstance(data_of(answer), dict) and data_of(answer).get("username") == "dave" and data_of(answer).get("queued") == 1,
        "sendTestPush finds the device by its token and names its holder", repr(data_of(answer)))
    c.call("sendTestPush", token=app_token, body={"device_token": secrets.token_hex(32)}, expect=404, error="service_resource_not_found", label="(token bound to nobody)")
    c.call("sendTestPush", token=app_token, body={"device_token": "not hex"}, expect=400, error="illegal_argument", label="(token not hex)")
    c.call("sendTestPush", token=app_token, body={"username": "dave", "device_token": phone_token}, expect=400, error="illegal_argument", label="(both username and token)")
    answer = c.call("getStats", token=app_token)
    stats = data_of(answer) if isinstance(data_of(answer), dict) else {}
    sent_today = sum(p.get("count", 0) for p in (stats.get("last_day") or {}).get("pushes", []) if p.get("status") == "sent")
    report.check(stats.get("users", 0) >= 4 and sent_today >= 1, "getStats counts the users and the test push sent today", repr(stats))
    c.call("getStats", token=tokens["dave"], expect=403, error="forbidden_op", label="(user token)")
    c.call("sendTestPush", token=app_token, body={"username": "nobody"}, expect=404, error="user_not_found", label="(unknown user)")
    c.call("sendTestPush", token=tokens["dave"], body={"username": "dave"}, expect=403, error="forbidden_op", label="(user token)")
    # The simulator answers 410 Unregistered for the old token: its binding is removed (a `binding_removed` event).
    control = re.search(r"control API http://127\.0\.0\.1:(\d+)", log)
    unregistered = False
    if report.check(bool(control), "the APNs simulator's control API is in the output", "no `control API http://127.0.0.1:PORT` line"):
        try:
            answer = http_request(int(control.group(1)), "POST", "/unregistered", json.dumps({"device_token": old_token}).encode(), {"Content-Type": "application/json"})
            unregistered = report.check(200 <= answer.status < 300, "APNs simulator: dave-old's token answers 410 Unregistered from now on", f"status {answer.status}")
        except OSError as exc:
            report.fail("APNs simulator: mark a token unregistered", repr(exc))

    # --- webhook -----------------------------------------------------------------------------------------------------
    hook_secret = secrets.token_hex(16)
    hook_url = f"http://127.0.0.1:{receiver.port}/beacon-hook"
    answer = c.call("putWebhook", token=app_token, body={"url": hook_url, "secret": hook_secret, "enabled": True})
    if isinstance(data_of(answer), dict):
        report.check(data_of(answer).get("url") == hook_url and data_of(answer).get("enabled") is True, "putWebhook answers the webhook", repr(data_of(answer)))
        report.check("secret" not in json.dumps(data_of(answer)) and hook_secret not in answer.raw.decode(), "putWebhook never returns the secret")
    c.call("getWebhook", token=app_token)
    c.call("putWebhook", token=app_token, body={"url": "ftp://example.com/hook", "secret": hook_secret}, expect=400, error="illegal_argument", label="(not http)")
    c.call("putWebhook", token=app_token, body={"url": hook_url, "secret": "short"}, expect=400, error="illegal_argument", label="(secret under 16 bytes)")
    c.call("putWebhook", token=app_token, raw=b"[", content_type="application/json", expect=400, error="json_parse", label="(bad JSON)")
    c.call("getWebhook", token=tokens["carol"], expect=403, error="forbidden_op", label="(user token)")

    # --- messages ----------------------------------------------------------------------------------------------------
    key = "contract-" + uuid.uuid4().hex
    first = c.call("sendUserMessages", token=app_token, headers={"Idempotency-Key": key}, body={"from": "carol", "to": ["dave"], "type": "txt", "body": {"msg": "hello dave"}, "ext": {"em_push_title": "x"}})
    again = c.call("sendUserMessages", token=app_token, headers={"Idempotency-Key": key}, body={"from": "carol", "to": ["dave"], "type": "txt", "body": {"msg": "hello dave"}, "ext": {"em_push_title": "x"}}, label="(retry, same Idempotency-Key)")
    message = (data_of(first) or {}).get("dave") if isinstance(data_of(first), dict) else None
    report.check(message is not None and data_of(first) == data_of(again), "a retried send answers the first send's ids", f"{data_of(first)!r} vs {data_of(again)!r}")
    c.call("sendUserMessages", token=tokens["carol"], body={"from": "dave", "to": ["carol"], "type": "txt", "body": {"msg": "x"}}, expect=403, error="forbidden_op", label="(as someone else)")
    c.call("sendUserMessages", token=app_token, body={"to": ["ghost"], "type": "txt", "body": {"msg": "x"}}, expect=404, error="user_not_found", label="(unknown target)")
    c.call("sendUserMessages", token=app_token, body={"to": ["dave"], "type": "loc", "body": {"msg": "x"}}, expect=400, error="illegal_argument", label="(body not of its type)")
    c.call("sendUserMessages", token=app_token, body={"to": ["dave"], "type": "txt", "body": {"msg": "x" * 6000}}, expect=413, error="request_entity_too_large", label="(body over 5 KB)")
    answer = c.call("sendGroupMessages", token=tokens["carol"], body={"to": [group], "type": "txt", "body": {"msg": "hello group"}, "msg_id": "g-" + uuid.uuid4().hex})
    group_message = (data_of(answer) or {}).get(group) if isinstance(data_of(answer), dict) else None
    c.call("sendGroupMessages", token=tokens["erin"], body={"to": [group], "type": "txt", "body": {"msg": "x"}}, expect=403, error="forbidden_op", label="(not a member)")
    c.call("sendMessagesLegacy", token=app_token, body={"target_type": "users", "target": ["dave"], "msg": {"type": "txt", "msg": "legacy hello"}, "from": "carol", "offline_push_info": {"title": "t", "apns_info": {"sub_title": "s"}}})
    c.call("sendMessagesLegacy", token=app_token, body={"target_type": "rooms", "target": ["dave"], "msg": {"type": "txt", "msg": "x"}}, expect=400, error="illegal_argument", label="(unknown target_type)")

    # Recall: a message of carol's to dave, by carol (user token, within the limit) and by the app.
    answer = c.call("sendUserMessages", token=app_token, body={"from": "carol", "to": ["dave"], "type": "txt", "body": {"msg": "oops"}}, label="(to recall)")
    oops = (data_of(answer) or {}).get("dave") if isinstance(data_of(answer), dict) else None
    answer = c.call("sendUserMessages", token=app_token, body={"from": "carol", "to": ["dave"], "type": "txt", "body": {"msg": "oops again"}}, label="(to recall by the app)")
    oops_again = (data_of(answer) or {}).get("dave") if isinstance(data_of(answer), dict) else None
    report.check(bool(oops and oops_again), "the messages to recall are sent", f"{oops!r} {oops_again!r}")
    if oops and oops_again:
        c.call("recallMessage", token=tokens["erin"], body={"msg_id": oops, "to": "dave", "chat_type": "chat"}, expect=404, error="message_not_found", label="(not the sender)")
        c.call("recallMessage", token=tokens["erin"], body={"msg_id": oops, "to": "dave", "chat_type": "chat", "from": "carol"}, expect=403, error="forbidden_op", label="(as someone else)")
        answer = c.call("recallMessage", token=tokens["carol"], body={"msg_id": oops, "to": "dave", "chat_type": "chat"}, label="(the sender)")
        report.check(data_of(answer) == {"recalled": "yes", "chattype": "chat", "from": "carol", "to": "dave", "msg_id": oops}, "msg_recall answers as Easemob", repr(data_of(answer)))
        c.call("recallMessage", token=tokens["carol"], body={"msg_id": oops, "to": "dave", "chat_type": "chat"}, expect=404, error="message_not_found", label="(recalled already)")
        c.call("recallMessage", token=app_token, body={"msg_id": oops_again, "to": "dave", "chat_type": "chat", "sync_device": True}, label="(the app)")
    c.call("recallMessage", token=app_token, body={"msg_id": "x", "to": "dave", "chat_type": "chat"}, expect=400, error="illegal_argument", label="(not decimal)")
    c.call("recallMessage", token=app_token, body={"msg_id": "1", "to": "dave", "chat_type": "chatroom"}, expect=400, error="illegal_argument", label="(chatroom)")
    c.call("recallMessage", token=app_token, body={"msg_id": "1", "to": "dave"}, expect=400, error="json_parse", label="(no chat_type)")

    answer = c.call("getOfflineMessageCount", {"username": "dave"}, token=tokens["dave"])
    if isinstance(data_of(answer), dict):
        report.check(int(data_of(answer).get("dave", "0")) >= 3, "dave has at least 3 undelivered messages", repr(data_of(answer)))
    if message:
        answer = c.call("getOfflineMessageStatus", {"username": "dave", "msgid": message}, token=tokens["dave"])
        report.check(data_of(answer) == {message: "undelivered"}, "offline_msg_status: undelivered", repr(data_of(answer)))
    c.call("getOfflineMessageStatus", {"username": "dave", "msgid": "not-a-number"}, token=tokens["dave"], expect=400, error="illegal_argument", label="(not decimal)")
    c.call("getOfflineMessageStatus", {"username": "dave", "msgid": "1"}, token=tokens["dave"], expect=404, error="message_not_found", label="(unknown message)")

    # --- receiver settings, policy -----------------------------------------------------------------------------------
    c.call("putNotificationSettings", {"username": "dave", "chattype": "user", "key": "dave"}, token=tokens["dave"], body={"type": "ALL", "ignoreInterval": "23:00-06:30"}, label="(app level)")
    answer = c.call("getNotificationSettings", {"username": "dave", "chattype": "user", "key": "dave"}, token=tokens["dave"], label="(app level)")
    if isinstance(data_of(answer), dict):
        report.check(data_of(answer).get("type") == "ALL" and "ignoreInterval" in data_of(answer), "app-level settings kept", repr(data_of(answer)))
    c.call("putNotificationSettings", {"username": "dave", "chattype": "chatgroup", "key": group}, token=app_token, body={"type": "NONE", "ignoreDuration": 3600000}, label="(group)")
    c.call("getNotificationSettings", {"username": "dave", "chattype": "user", "key": "carol"}, token=tokens["dave"], label="(1:1, inherits)")
    c.call("getNotificationSettings", {"username": "dave", "chattype": "chatgroup", "key": "999999999"}, token=tokens["dave"], expect=404, error="group_not_found", label="(unknown group)")
    c.call("putNotificationSettings", {"username": "dave", "chattype": "room", "key": "x"}, token=tokens["dave"], body={"type": "ALL"}, expect=400, error="illegal_argument", label="(unknown chattype)")
    answer = c.call("queryNotificationSettings", {"username": "dave"}, token=tokens["dave"], body={"conversations": [{"chattype": "chatgroup", "key": group}, {"chattype": "user", "key": "carol"}]})
    if isinstance(data_of(answer), list):
        report.check([(d.get("chattype"), d.get("key"), d.get("type")) for d in data_of(answer)] == [("chatgroup", group, "NONE")], "notification/query leaves out inheriting conversations", repr(data_of(answer)))
    c.call("putPushPolicy", token=app_token, body={"multi_device": "any_offline", "timezone": "UTC", "display_strings": {"image": "[Picture]"}, "badge_counts_muted": False, "recall_limit_seconds": 300})
    c.call("putPushPolicy", token=app_token, body={"recall_limit_seconds": 604801}, expect=400, error="illegal_argument", label="(recall limit over 7 days)")
    answer = c.call("getPushPolicy", token=app_token)
    if isinstance(data_of(answer), dict):
        report.check(data_of(answer).get("display_strings", {}).get("image") == "[Picture]" and data_of(answer).get("recall_limit_seconds") == 300, "push policy kept", repr(data_of(answer)))
    c.call("putPushPolicy", token=app_token, body={"multi_device": "sometimes"}, expect=400, error="illegal_argument", label="(unknown multi_device)")

    # --- templates, language, nicknames ------------------------------------------------------------------------------
    c.call("createTemplate", token=app_token, body={"name": "welcome", "title_pattern": "{0}", "content_pattern": "{$fromNickname}: {$msg}"})
    c.call("createTemplate", token=app_token, body={"name": "welcome", "title_pattern": "{0}", "content_pattern": "x"}, expect=400, error="duplicate_unique_property_exists", label="(existing name)")
    c.call("createTemplate", token=app_token, body={"name": "bad", "title_pattern": "{nope}", "content_pattern": "x"}, expect=400, error="invalid_template", label="(unknown placeholder)")
    answer = c.call("listTemplates", token=app_token)
    report.check("welcome" in [e.get("name") for e in entities_of(answer)], "listTemplates lists the template", repr(entities_of(answer)))
    answer = c.call("previewTemplate", token=app_token, body={"title_pattern": "Hi {0}", "content_pattern": "{$fromNickname}: {$msg}", "title_args": ["Ann"], "from_nickname": "Bo", "text": "yo"})
    preview = data_of(answer) if isinstance(data_of(answer), dict) else {}
    report.check(
        (preview.get("title"), preview.get("content"), preview.get("limit")) == ("Hi Ann", "Bo: yo", 4096) and preview.get("bytes", 0) == len(json.dumps(preview.get("payload"), separators=(",", ":"), ensure_ascii=False).encode()),
        "previewTemplate renders title and body and measures the payload", repr(preview))
    c.call("previewTemplate", token=app_token, body={"title_pattern": "{nope}", "content_pattern": "x"}, expect=400, error="invalid_template", label="(unknown placeholder)")
    # A template may be named `preview`: the preview route lives elsewhere, so it is read and deleted like any other.
    c.call("createTemplate", token=app_token, body={"name": "preview", "title_pattern": "p", "content_pattern": "p"}, label="(named preview)")
    answer = c.call("getTemplate", {"name": "preview"}, token=app_token, label="(named preview)")
    report.check((data_of(answer) or {}).get("name") == "preview" if isinstance(data_of(answer), dict) else False, "a template named preview is readable")
    c.call("deleteTemplate", {"name": "preview"}, token=app_token, label="(named preview)")
    c.call("getTemplate", {"name": "welcome"}, token=app_token)
    c.call("updateTemplate", {"name": "welcome"}, token=app_token, body={"title_pattern": "{0} says", "content_pattern": "{$msg}"})
    c.call("chooseTemplate", {"username": "dave"}, token=tokens["dave"], body={"templateName": "welcome"})
    c.call("chooseTemplate", {"username": "dave"}, token=tokens["dave"], body={"templateName": "nothing"}, expect=404, error="service_resource_not_found", label="(unknown template)")
    answer = c.call("getChosenTemplate", {"username": "dave"}, token=tokens["dave"])
    report.check(data_of(answer) == {"templateName": "welcome"}, "the chosen template is kept", repr(data_of(answer)))
    c.call("setLanguage", {"username": "dave"}, token=tokens["dave"], body={"translationLanguage": "ja"})
    answer = c.call("getLanguage", {"username": "dave"}, token=tokens["dave"])
    report.check(data_of(answer) == {"translationLanguage": "ja"}, "the language is kept", repr(data_of(answer)))
    c.call("putPushNicknames", token=app_token, body=[{"username": "carol", "push_nickname": "Carol C."}, {"username": "dave", "push_nickname": "Dave"}])
    c.call("putPushNicknames", token=app_token, body=[{"username": "ghost", "push_nickname": "Boo"}], expect=404, error="user_not_found", label="(unknown user)")

    # --- read state and badge -------------------------------------------------------------------------------------
    answer = c.call("listConversations", {"username": "dave"}, token=tokens["dave"], query={"limit": 10})
    report.check({(e.get("chat_type"), e.get("conversation")) for e in entities_of(answer)} >= {("chat", "carol"), ("groupchat", group)}, "dave's conversations: carol and the group", repr(entities_of(answer))[:300])
    if message:
        answer = c.call("markConversationRead", {"username": "dave", "chattype": "chat", "key": "carol"}, token=tokens["dave"], body={"up_to": message}, label="(up_to)")
        if isinstance(data_of(answer), dict):
            report.check(len(data_of(answer).get("read", [])) == 1, "a read moves one marker", repr(data_of(answer)))
    answer = c.call("markConversationRead", {"username": "dave", "chattype": "groupchat", "key": group}, token=tokens["dave"], raw=b"", label="(no body)")
    c.call("markConversationRead", {"username": "dave", "chattype": "channel", "key": group}, token=tokens["dave"], raw=b"", expect=400, error="illegal_argument", label="(unknown chat type)")
    c.call("markAllConversationsRead", {"username": "dave"}, token=tokens["dave"])
    c.call("reportBadge", {"username": "dave"}, token=tokens["dave"], body={"badge": 2})
    c.call("reportBadge", {"username": "dave"}, token=tokens["dave"], body={"badge": -1}, expect=400, error="illegal_argument", label="(negative)")
    answer = c.call("getBadge", {"username": "dave"}, token=tokens["dave"])
    report.check(data_of(answer) == {"badge": 2}, "the reported badge is answered", repr(data_of(answer)))

    # --- delivery records --------------------------------------------------------------------------------------------
    deadline = time.monotonic() + 20
    records: list = []
    while time.monotonic() < deadline:
        answer = c.call("listDeliveries", token=app_token, query={"username": "dave"}, quiet=True)
        records = entities_of(answer)
        if answer is None or answer.status != 200 or any(r.get("status") != "pending" for r in records):
            break
        time.sleep(0.5)
    c.call("listDeliveries", token=app_token, query={"username": "dave"}, label="(app token)")
    report.check(bool(records), "dave's pushes are recorded", "no delivery record within 20 s")
    if message:
        c.call("listDeliveries", token=tokens["dave"], query={"username": "dave", "message_id": message, "limit": 5}, label="(user token, one message)")
    c.call("listDeliveries", token=tokens["dave"], expect=403, error="forbidden_op", label="(user token without username)")
    c.call("listDeliveries", token=app_token, query={"message_id": "abc"}, expect=400, error="illegal_argument", label="(message_id not decimal)")
    finished = [r for r in records if r.get("status") != "pending"]
    if finished:
        first = finished[0]
        query = {"username": "dave", "status": first["status"], "since": str(first["updated"])}
        if first.get("reason"):
            query["reason"] = first["reason"]
        answer = c.call("listDeliveries", token=app_token, query=query, label="(status, reason, since)")
        found = entities_of(answer)
        report.check(
            bool(found) and all(r.get("status") == first["status"] and r.get("updated", 0) >= first["updated"]
                                and (not first.get("reason") or r.get("reason") == first["reason"]) for r in found),
            "deliveries are filtered by status, reason and time on the server", repr(found))
        later = c.call("listDeliveries", token=app_token, query={"username": "dave", "since": str(int(time.time() * 1000) + 3_600_000)}, label="(since the future)")
        report.check(entities_of(later) == [], "no record was updated after a future time", repr(entities_of(later)))
    c.call("listDeliveries", token=app_token, query={"status": "delivered"}, expect=400, error="illegal_argument", label="(unknown status)")
    c.call("listDeliveries", token=app_token, query={"since": "yesterday"}, expect=400, error="illegal_argument", label="(since not a number)")

    # --- webhook callbacks (sent by the server) ------------------------------------------------------------------------
    # Wanted: a `push` event for dave-phone (sent) and, the simulator having refused dave-old's token, a `binding_removed`.
    wanted = {("push", "dave-phone")} | ({("binding_removed", "dave-old")} if unregistered else set())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not wanted <= received_kinds(receiver):
        time.sleep(0.25)
    check_callbacks(report, document, receiver, hook_secret, wanted)

    # --- logout everywhere -------------------------------------------------------------------------------------------
    c.call("disconnectUser", {"username": "erin"}, token=app_token)
    c.call("getUser", {"username": "erin"}, token=tokens["erin"], expect=401, error="auth_bad_access_token", label="(token revoked by disconnect)")
    answer = c.call("getToken", body={"grant_type": "password", "username": "erin", "password": password}, label="(password, erin again)")
    erin = (answer.json or {}).get("access_token") if answer else None
    c.call("disconnectUserPost", {"username": "erin"}, token=erin or app_token)

    # --- clean-up ----------------------------------------------------------------------------------------------------
    c.call("deletePushCertificate", {"name": "contract-apns-2"}, token=app_token)
    c.call("deletePushCertificate", {"name": "contract-apns-2"}, token=app_token, expect=404, error="service_resource_not_found", label="(already deleted)")
    c.call("deleteTemplate", {"name": "welcome"}, token=app_token)
    c.call("getTemplate", {"name": "welcome"}, token=app_token, expect=404, error="service_resource_not_found", label="(deleted)")
    answer = c.call("deleteWebhook", token=app_token)
    if isinstance(data_of(answer), dict):
        report.check(data_of(answer).get("url") == hook_url, "deleteWebhook answers the webhook as it was", repr(data_of(answer)))
    c.call("getWebhook", token=app_token, expect=404, error="webhook_not_found", label="(deleted)")
    c.call("deleteWebhook", token=app_token, expect=404, error="webhook_not_found", label="(already deleted)")

    # --- a device connection (WebSocket upgrade): refused, then accepted ---------------------------------------------
    def upgrade(key: str) -> dict:
        return {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": key}

    answer = c.call("listUserResources", {"username": "carol"}, token=tokens["carol"], label="(no device connected)")
    report.check(entities_of(answer) == [] and (answer is not None and answer.json.get("count") == 0), "listUserResources: nothing connected, nothing listed", repr(answer and answer.json))
    c.call("listUserResources", {"username": "dave"}, token=tokens["carol"], expect=403, error="forbidden_op", label="(another user's token)")
    c.call("listUserResources", {"username": "nobody"}, token=app_token, expect=404, error="user_not_found", label="(unknown user)")
    key = base64.b64encode(secrets.token_bytes(16)).decode()
    c.call("connectWebSocket", query={"device_id": "carol-ws"}, headers=upgrade(key), expect=401, error="unauthorized", label="(no token)")
    c.call("connectWebSocket", query={"device_id": "carol-ws"}, token=app_token, headers=upgrade(key), expect=401, error="auth_bad_access_token", label="(app token)")
    c.call("connectWebSocket", token=tokens["carol"], headers=upgrade(key), expect=400, error="illegal_argument", label="(no device_id)")
    answer = c.call("connectWebSocket", query={"device_id": "carol-ws"}, token=tokens["carol"], headers=upgrade(key), expect=101, label="(user token)")
    if answer is not None and answer.status == 101:
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        report.check(answer.headers.get("sec-websocket-accept") == accept, "the upgrade answers the right Sec-WebSocket-Accept", repr(answer.headers))
    # The device that connected is listed (its first sighting is written within 100 ms), then disconnected.
    devices: list = []
    for _ in range(40):
        answer = c.call("listUserDevices", {"username": "carol"}, token=tokens["carol"], quiet=True)
        devices = entities_of(answer) or []
        if any(d.get("device_id") == "carol-ws" and d.get("last_seen") for d in devices):
            break
        time.sleep(0.1)
    report.check(any(d.get("device_id") == "carol-ws" and isinstance(d.get("last_seen"), int) for d in devices),
                 "listUserDevices: the device that connected, with when it was seen", repr(devices))
    c.call("listUserDevices", {"username": "dave"}, token=tokens["carol"], expect=403, error="forbidden_op", label="(another user's token)")
    answer = c.call("disconnectUserDevice", {"username": "carol", "device_id": "carol-ws"}, token=app_token)
    report.check(isinstance((data_of(answer) or {}).get("result"), bool), "disconnectUserDevice answers whether it was connected", repr(answer and answer.json))
    answer = c.call("disconnectUserDevice", {"username": "carol", "device_id": "never-connected"}, token=tokens["carol"], label="(a device never connected)")
    report.check((data_of(answer) or {}).get("result") is False, "disconnectUserDevice: a device not connected answers false", repr(answer and answer.json))
    c.call("disconnectUserDevice", {"username": "nobody", "device_id": "d"}, token=app_token, expect=404, error="user_not_found", label="(unknown user)")

    # --- the demo app, as `--demo` printed it --------------------------------------------------------------------------
    check_demo(report, c, server.log())

    # --- deleting users last -----------------------------------------------------------------------------------------
    c.call("deleteUser", {"username": "frank"}, token=tokens["carol"], expect=403, error="forbidden_op", label="(user token)")
    answer = c.call("deleteUser", {"username": "frank"}, token=app_token)
    report.check([e.get("username") for e in entities_of(answer)] == ["frank"], "deleteUser answers the user as it was")
    c.call("getUser", {"username": "frank"}, token=app_token, expect=404, error="user_not_found", label="(deleted)")
    c.call("deleteUser", {"username": "frank"}, token=app_token, expect=404, error="user_not_found", label="(already deleted)")

    # --- the app's identifiers and Tencent's door (docs/tencent.md; e2e/tencent drives it with a Tencent server SDK) ----------
    # `beacon app tencent` beside the running server gives the app a Tencent identity of known key.
    out = subprocess.run([server.beacon, "app", "tencent", f"{ORG}/{APP}", "--json", "--data-dir", str(server.data_dir)],
                         capture_output=True, text=True, timeout=120, env=server.env, stdin=subprocess.DEVNULL)
    tencent = json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1]) if out.returncode == 0 else {}
    report.check(out.returncode == 0 and bool(tencent.get("sdk_secret_key")), "beacon app tencent gives the app its Tencent identity beside the server", out.stderr[-500:])
    answer = c.call("getAppIdentity", token=app_token)
    identity = data_of(answer) if isinstance(data_of(answer), dict) else {}
    report.check(identity.get("client_id") == credentials["client_id"] and identity.get("sdkappid") == tencent.get("sdkappid")
                 and identity.get("tencent_admin") == "administrator", "getAppIdentity names the client id and the SDKAppID `app tencent` printed", repr(identity))
    c.call("getAppIdentity", token=tokens["carol"], expect=403, error="forbidden_op", label="(user token)")
    sdkappid, sdk_key = tencent.get("sdkappid"), tencent.get("sdk_secret_key", "")
    signer = TLSSigAPIv2.TLSSigAPIv2(sdkappid, sdk_key)
    door = {"service": "im_open_login_svc", "command": "account_check"}
    admin_query = {"sdkappid": str(sdkappid), "identifier": "administrator", "usersig": signer.gen_sig("administrator"), "random": "7", "contenttype": "json"}
    answer = c.call("tencentCommand", door, query=admin_query, body={"CheckItem": [{"UserID": "carol"}, {"UserID": "nobody"}]})
    items = (answer.json or {}).get("ResultItem", []) if answer and isinstance(answer.json, dict) else []
    report.check([i.get("AccountStatus") for i in items] == ["Imported", "NotImported"], "tencentCommand account_check answers each account", repr(answer and answer.json))
    answer = c.call("tencentCommandGet", door, query=admin_query, label="(no body: Tencent's JSON error)")
    report.check(isinstance(answer and answer.json, dict) and answer.json.get("ActionStatus") == "FAIL", "a command without its fields fails in Tencent's envelope", repr(answer and answer.json))
    answer = c.call("tencentCommand", door, query={**admin_query, "usersig": "not-a-usersig"}, body={}, label="(bad UserSig)")
    report.check(isinstance(answer and answer.json, dict) and answer.json.get("ErrorCode") == 70003, "a bad UserSig is Tencent's 70003, HTTP 200", repr(answer and answer.json))
    answer = c.call("getToken", body={"grant_type": "usersig", "username": "carol", "usersig": signer.gen_sig("carol")}, label="(usersig)")
    report.check(bool(answer and isinstance(answer.json, dict) and answer.json.get("access_token")), "a UserSig gives carol a user token", repr(answer and answer.json))
    c.call("getToken", body={"grant_type": "usersig", "username": "carol", "usersig": signer.gen_sig("dave")}, expect=400, error="invalid_grant", label="(another user's UserSig)")

    # --- rotating the client secret, last: what the old secret opened ends ----------------------------------------------
    answer = c.call("signInToConsole", body=sign_in, label="(before a rotation)")
    cookie = {"Cookie": (answer.headers.get("set-cookie", "") if answer else "").split(";")[0]}
    csrf = ((answer.json or {}) if answer else {}).get("csrf_token", "")
    c.call("rotateClientSecret", token=tokens["carol"], expect=403, error="forbidden_op", label="(user token)")
    c.call("rotateClientSecret", headers=cookie, expect=403, error="forbidden_op", label="(console session without CSRF token)")
    c.call("rotateClientSecret", headers={**cookie, "X-CSRF-Token": csrf}, expect=400, error="invalid_grant", label="(console session without the current secret)")
    c.call("rotateClientSecret", headers={**cookie, "X-CSRF-Token": csrf}, body={"client_secret": "wrong"}, expect=400, error="invalid_grant", label="(wrong current secret)")
    answer = c.call("rotateClientSecret", headers={**cookie, "X-CSRF-Token": csrf}, body={"client_secret": credentials["client_secret"]}, label="(console session)")
    rotated = data_of(answer) or {}
    new_secret = rotated.get("client_secret")
    report.check(
        bool(new_secret) and new_secret != credentials["client_secret"] and rotated.get("client_id") == credentials["client_id"],
        "rotateClientSecret answers a new secret for the same client id", repr(answer and answer.json))
    report.check(
        "max-age=0" in (answer.headers.get("set-cookie", "") if answer else "").lower() and (answer.headers.get("cache-control") if answer else None) == "no-store",
        "rotateClientSecret clears the console cookie and is not cached", repr(answer and answer.headers))
    c.call("getConsoleSession", headers=cookie, expect=401, error="unauthorized", label="(the client secret was rotated)")
    c.call("listPushCertificates", token=app_token, expect=401, error="auth_bad_access_token", label="(app token of a rotated secret)")
    c.call("getToken", body={"grant_type": "client_credentials", "client_id": credentials["client_id"], "client_secret": credentials["client_secret"]}, expect=400, error="invalid_grant", label="(rotated secret)")
    answer = c.call("getToken", body={"grant_type": "client_credentials", "client_id": credentials["client_id"], "client_secret": new_secret or "", "ttl": 90 * 24 * 3600}, label="(new secret, ttl over 7 days)")
    report.check(((answer.json or {}) if answer else {}).get("expires_in") == 7 * 24 * 3600, "an app token lives 7 days at most", repr(answer and answer.json))
    new_token = ((answer.json or {}) if answer else {}).get("access_token")
    c.call("listPushCertificates", token=new_token, label="(app token of the new secret)")
    c.call("rotateClientSecret", token=new_token, body={"client_secret": new_secret or ""}, label="(app token)")
    c.call("listPushCertificates", token=new_token, expect=401, error="auth_bad_access_token", label="(app token of the secret rotated with it)")


def check_demo(report: Report, c: Client, log: str) -> None:
    app = re.search(r"Demo ready: app ([^/\s]+)/([^,\s]+), users (\S+) and (\S+) \(password (\S+)\)", log)
    token = re.search(r"Authorization: Bearer ([A-Za-z0-9._~+/=-]+)'", log)
    if not report.check(bool(app and token), "--demo prints its app, users, password and an app token", "not found in the output"):
        return
    org, name, sender, receiver, password = app.groups()
    where = {"org": org, "app": name}
    c.call("getToken", where, body={"grant_type": "password", "username": sender, "password": password}, label=f"(demo {sender})")
    answer = c.call("listPushCertificates", where, token=token.group(1), label="(demo app, printed token)")
    report.check(bool(entities_of(answer)), "the demo app has a push configuration")
    answer = c.call("listBindings", {**where, "username": receiver}, token=token.group(1), label=f"(demo {receiver})")
    report.check(bool(entities_of(answer)), f"the demo's {receiver} has a bound device")


def received_kinds(receiver: Receiver) -> set[tuple[str, str]]:
    kinds = set()
    for _, raw in list(receiver.received):
        try:
            for event in json.loads(raw).get("events", []):
                kinds.add((event.get("type"), event.get("device_id")))
        except (ValueError, AttributeError):
            pass
    return kinds


def check_callbacks(report: Report, document: Document, receiver: Receiver, secret: str, wanted: set[tuple[str, str]]) -> None:
    missing = wanted - received_kinds(receiver)
    report.check(
        not missing, f"webhook callbacks arrived ({len(receiver.received)} POSTs)",
        f"within 30 s, no event of type/device {sorted(missing)} (received {sorted(received_kinds(receiver))})",
    )
    ids: list[int] = []
    for index, (headers, raw) in enumerate(list(receiver.received)):
        label = f"webhook callback #{index + 1} ({len(raw)} bytes)"
        problems = []
        timestamp = headers.get("x-beacon-timestamp", "")
        signature = headers.get("x-beacon-signature", "")
        if not re.fullmatch(r"[0-9]+", timestamp):
            problems.append(f"X-Beacon-Timestamp {timestamp!r}")
        elif abs(int(timestamp) - time.time()) > 300:
            problems.append(f"X-Beacon-Timestamp {timestamp} is not now (unix seconds)")
        expected = "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(signature, expected):
            problems.append(f"X-Beacon-Signature {signature!r} is not the HMAC of \"<timestamp>.<body>\"")
        if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            problems.append(f"Content-Type {headers.get('content-type')!r}")
        try:
            delivery = json.loads(raw)
        except ValueError:
            problems.append("body is not JSON")
        else:
            problems += document.errors("/webhooks/pushResult/post/requestBody/content/application~1json/schema", delivery, strict=True)
            if isinstance(delivery, dict) and (delivery.get("org"), delivery.get("app")) != (ORG, APP):
                problems.append(f"org/app {delivery.get('org')!r}/{delivery.get('app')!r}")
            if isinstance(delivery, dict) and isinstance(delivery.get("events"), list):
                ids += [e.get("id") for e in delivery["events"] if isinstance(e, dict) and isinstance(e.get("id"), int)]
        report.check(not problems, label, "; ".join(problems))
    if ids:
        # At least once: a batch may come again (receivers deduplicate by id); first sightings are in increasing order.
        first = list(dict.fromkeys(ids))
        report.check(first == sorted(first), "webhook event ids increase", repr(ids))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beacon", required=True, help="the beacon executable (e.g. .build/debug/beacon)")
    parser.add_argument("--keep", action="store_true", help="keep the data directory and server log")
    args = parser.parse_args()
    beacon = str(Path(args.beacon).resolve())
    report = Report()

    document = check_document(report)
    if document is None:
        return finish(report)
    if not (os.path.isfile(beacon) and os.access(beacon, os.X_OK)):
        report.fail("beacon executable", f"{beacon} is not an executable file")
        return finish(report)
    check_routes(report, document, beacon)

    workdir = Path(tempfile.mkdtemp(prefix="beacon-contract-"))
    server = Server(beacon, workdir)
    receiver = Receiver()
    client: Client | None = None
    try:
        try:
            credentials = server.create_app()
            report.ok(f"beacon app create {ORG}/{APP} --json")
            server.start()
            server.wait_ready()
            report.ok(f"beacon serve --demo on 127.0.0.1:{server.port} is ready")
        except Exception as exc:  # noqa: BLE001
            report.fail("start beacon", str(exc))
            return finish(report)
        client = Client(document, report, server.port)
        try:
            scenario(client, server, credentials, receiver)
        except RuntimeError as exc:
            report.fail("scenario", str(exc))
        except Exception:  # noqa: BLE001 - a bug here, or an answer too odd to go on with
            report.fail("scenario", "stopped by an exception:\n" + traceback.format_exc())
    finally:
        receiver.close()
        server.stop()
        if report.failures:
            tail = server.log()[-4000:]
            if tail:
                print("---- last lines of the server's output ----\n" + tail + "\n----", flush=True)
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    if client is not None:
        documented = set(document.operations)
        missing = sorted(documented - client.exercised)
        report.check(not missing, f"every documented operation was exercised ({len(documented & client.exercised)}/{len(documented)})", "never exercised: " + ", ".join(missing))
    else:
        report.fail("coverage", "the scenario did not run")
    return finish(report)


def finish(report: Report) -> int:
    if report.failures:
        print(f"\n{len(report.failures)} failure(s):")
        for failure in report.failures:
            print(f"  - {failure}")
    print(f"{report.passed} passed, {len(report.failures)} failed")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
