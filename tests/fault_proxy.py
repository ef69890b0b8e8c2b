"""A fault-injecting HTTP proxy on loopback, in front of moto's S3 server.

Requests pass through unchanged unless a rule matches (method and a regex on
the path); a matching rule fires for its first ``times`` requests:

- ``truncate``: the status line and headers promise the whole body, half of it is sent, the connection closes;
- ``reset``: the connection closes before any response;
- ``lose_response``: the request reaches S3 (a PUT lands), then the connection closes with no response.

A rendezvous proves that several clients were reading at the same moment: a request
matching one of its ``parties`` (regexes on the path) waits until a request of every party
is waiting at once; then all go on (before any fault rule applies to them), and so does
every later one. A request that waited ``hold_seconds`` (under boto3's 60 s read timeout)
goes on alone, and its party no longer counts as waiting; ``met`` says whether they met.

boto3 and delta-rs (Rust) both talk to it as their endpoint. It runs in a
process of its own, like moto's server (some delta-rs calls hold the GIL while
they wait for S3, so a server thread in the test process could not answer);
rules are added, and their hits read, over ``/__faults__`` on the proxy.
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te", "trailer"}


@dataclass
class Rule:
    action: str
    method: str
    path: str
    times: int = 1
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return self.hits < self.times and method == self.method and re.search(self.path, path) is not None


@dataclass
class Rendezvous:
    method: str
    parties: list[str]
    hold_seconds: float = 50.0
    met: bool = False

    def party(self, method: str, path: str) -> int | None:
        if method != self.method:
            return None
        return next((i for i, party in enumerate(self.parties) if re.search(party, path)), None)


class _ProxyServer:
    def __init__(self, upstream: str):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self.rules: list[Rule] = []
        self.rendezvous: Rendezvous | None = None
        self.waiting: dict[int, int] = {}  # party -> its requests waiting now
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _control(self, body: bytes) -> None:
                if self.command == "POST":
                    proxy.add(**json.loads(body))
                if self.command == "PUT":
                    with proxy.lock:
                        proxy.rendezvous, proxy.waiting = Rendezvous(**json.loads(body)), {}
                if self.command == "DELETE":  # the fault is over
                    with proxy.lock:
                        proxy.rules.clear()
                        proxy.rendezvous = None
                with proxy.lock:
                    rendezvous = asdict(proxy.rendezvous) if proxy.rendezvous else None
                    data = json.dumps({"rules": [asdict(r) for r in proxy.rules], "rendezvous": rendezvous}).encode()
                self.send_response_only(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.close_connection = True

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path == "/__faults__":
                    return self._control(body)
                proxy._meet(self.command, self.path)
                rule = proxy._fire(self.command, self.path)
                if rule is not None and rule.action == "reset":
                    self.close_connection = True
                    return
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                data = response.read()
                upstream.close()
                if rule is not None and rule.action == "lose_response":
                    self.close_connection = True
                    return
                self.send_response_only(response.status, response.reason)
                for key, value in response.getheaders():
                    if key.lower() not in HOP_HEADERS and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                if rule is not None and rule.action == "truncate":
                    self.wfile.write(data[: len(data) // 2])
                elif self.command != "HEAD":
                    self.wfile.write(data)
                self.wfile.flush()
                self.close_connection = True

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True

    def add(self, action: str, method: str, path: str, times: int = 1) -> None:
        with self.lock:
            self.rules.append(Rule(action, method, path, times))

    def _meet(self, method: str, path: str) -> None:
        with self.arrived:
            rendezvous = self.rendezvous
            party = rendezvous.party(method, path) if rendezvous and not rendezvous.met else None
            if party is None:
                return
            self.waiting[party] = self.waiting.get(party, 0) + 1
            if len(self.waiting) == len(rendezvous.parties):
                rendezvous.met = True
                self.arrived.notify_all()
                return
            if not self.arrived.wait_for(lambda: rendezvous.met, timeout=rendezvous.hold_seconds):
                self.waiting[party] -= 1
                if not self.waiting[party]:
                    del self.waiting[party]

    def _fire(self, method: str, path: str) -> Rule | None:
        with self.lock:
            for rule in self.rules:
                if rule.matches(method, path):
                    rule.hits += 1
                    return rule
        return None


class FaultProxy:
    """The proxy in a child process: ``with FaultProxy(moto_url) as proxy: proxy.url``."""

    def __init__(self, upstream: str):
        self.upstream = upstream

    def __enter__(self) -> FaultProxy:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fault_proxy", self.upstream], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.url = self.process.stdout.readline().decode().strip()
        return self

    def __exit__(self, *exc) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=10)

    def _call(self, body: dict | None = None, method: str | None = None) -> dict:
        host, port = urlsplit(self.url).hostname, urlsplit(self.url).port
        connection = http.client.HTTPConnection(host, port, timeout=10)
        method = method or ("POST" if body else "GET")
        connection.request(method, "/__faults__", body=json.dumps(body).encode() if body else None)
        state = json.loads(connection.getresponse().read())
        connection.close()
        return state

    def add(self, action: str, method: str, path: str, times: int = 1) -> int:
        """Add a rule; returns its index for ``hits``."""
        return len(self._call({"action": action, "method": method, "path": path, "times": times})["rules"]) - 1

    def hits(self, rule: int) -> int:
        return self._call()["rules"][rule]["hits"]

    def rendezvous(self, method: str, parties: list[str], hold_seconds: float = 50.0) -> None:
        """Hold requests of each party until one of every party is waiting (see the module's docstring)."""
        self._call({"method": method, "parties": parties, "hold_seconds": hold_seconds}, method="PUT")

    def met(self) -> bool:
        return bool((self._call()["rendezvous"] or {}).get("met"))

    def clear(self) -> None:
        """Remove every rule and the rendezvous: requests pass from now on."""
        self._call(method="DELETE")


if __name__ == "__main__":
    server = _ProxyServer(sys.argv[1])
    threading.Thread(target=server.server.serve_forever, daemon=True).start()
    host, port = server.server.server_address[:2]
    print(f"http://{host}:{port}", flush=True)
    sys.stdin.read()  # until the test process closes our stdin
    server.server.shutdown()
