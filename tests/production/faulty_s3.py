"""A loopback HTTP proxy in front of moto's S3 server that fails a share of requests.

    python -m tests.production.faulty_s3 UPSTREAM_URL RATE SEED

prints its own URL, then serves until stdin closes, and prints its counts as JSON.
Of the requests it picks (``RATE``, seeded), it answers a third with 500, a third
with 503 (SlowDown), and resets the connection on the last third *after* forwarding
the request: the upstream applied it, the client never hears so (the hard case for
a commit, whose retry then finds its own write).
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade", "expect"}
ERROR_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
    b"<Message>injected by tracelake's fault proxy</Message></Error>"
)


class Faults:
    def __init__(self, rate: float, seed: int):
        self.rate = rate
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.counts = {"requests": 0, "500": 0, "503": 0, "reset_after_forward": 0}

    def pick(self) -> str | None:
        with self.lock:
            self.counts["requests"] += 1
            if self.random.random() >= self.rate:
                return None
            fault = self.random.choice(["500", "503", "reset_after_forward"])
            self.counts[fault] += 1
            return fault


def handler(upstream: str, faults: Faults) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(upstream)

    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _body(self) -> bytes:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _reply_error(self, status: int, code: bytes) -> None:
            body = ERROR_BODY.replace(b"{code}", code)
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _reset(self) -> None:
            # SO_LINGER 0: close() sends RST instead of FIN
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

        def _forward(self) -> None:
            body = self._body()
            fault = faults.pick()
            if fault == "500":
                return self._reply_error(500, b"InternalError")
            if fault == "503":
                return self._reply_error(503, b"SlowDown")
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            if body or self.command in {"PUT", "POST"}:
                headers["Content-Length"] = str(len(body))
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
            try:
                conn.request(self.command, self.path, body=body or None, headers=headers)
                response = conn.getresponse()
                data = response.read()
            finally:
                conn.close()
            if fault == "reset_after_forward":
                return self._reset()
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                    self.send_header(key, value)
            length = response.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
            self.send_header("Content-Length", length or "0")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    return Proxy


def main() -> None:
    upstream, rate, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    faults = Faults(rate, seed)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(upstream, faults))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    server.shutdown()
    print(json.dumps(faults.counts), flush=True)


if __name__ == "__main__":
    main()
