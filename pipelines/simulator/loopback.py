"""A threading HTTP server on loopback, started and stopped around a block."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class LoopbackServer:
    """``with Server() as s: s.url``; subclasses say which handler serves requests."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    _server: ThreadingHTTPServer | None = None

    def handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError(f"{type(self).__name__} is not running: use `with {type(self).__name__}() as s:`")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        self._server = ThreadingHTTPServer((self.host, self.port), self.handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name=type(self).__name__, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
