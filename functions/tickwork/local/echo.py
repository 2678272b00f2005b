"""A built-in local HTTP target for demos and tests: answers 200 on /echo, 500 on /fail, and can be slow
(`?sleep=0.5`). It keeps the last calls so the status of a demo is visible."""

from __future__ import annotations

import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class EchoServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.calls: deque[dict[str, Any]] = deque(maxlen=1000)
        calls = self.calls

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length", "0") or 0)
                body = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                sleep = float(parse_qs(url.query).get("sleep", ["0"])[0])
                if 0 < sleep <= 60:
                    time.sleep(sleep)
                calls.append(
                    {
                        "at": time.time(),
                        "path": url.path,
                        "run_id": self.headers.get("Idempotency-Key"),
                        "attempt": self.headers.get("X-Tickwork-Attempt"),
                        "bytes": len(body),
                    }
                )
                status = 500 if url.path.startswith("/fail") else 200
                payload = b'{"ok": true}' if status == 200 else b'{"ok": false}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

            def log_message(self, format: str, *args: Any) -> None:
                return  # the status line reports runs; per-request logs would drown it

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="tickwork-echo", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> EchoServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
