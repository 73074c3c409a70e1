"""A small HTTP server on 127.0.0.1 for the tests: a function answers each GET.

    server = serve(lambda path, headers: (200, "text/plain", b"hi"))
    server.server_address[1]      # its port
    server.shutdown(); server.server_close()

A body may also be an iterable of byte strings: each is sent and flushed as it comes, with no
Content-Length (the answer ends when the connection closes), so a test can play a server that
dribbles or sends without end. A fourth item, a dict, adds headers (`Content-Encoding`).
"""
from __future__ import annotations

import http.server
import ssl
import threading
from email.message import Message
from typing import Callable, Iterable, Optional, Union

Body = Union[bytes, Iterable[bytes]]
# path, headers -> status, type, body (and, optionally, extra headers)
Answer = Callable[[str, Message], "tuple[int, str, Body] | tuple[int, str, Body, dict[str, str]]"]


def serve(answer: Answer, port: int = 0, address: str = "127.0.0.1",
          tls: Optional[ssl.SSLContext] = None) -> http.server.ThreadingHTTPServer:
    """Start serving on `address`:`port` (0: any free port) in a thread; OSError if taken.
    With `tls` (a server context holding a certificate), HTTPS."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            status, kind, body, *extra = answer(self.path, self.headers)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            for name, value in (extra[0] if extra else {}).items():
                self.send_header(name, value)
            if isinstance(body, bytes):
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.close_connection = True
            self.end_headers()
            try:
                for chunk in body:
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:
                pass          # the client went away: the test is what it wanted to see

        def log_message(self, *args):  # keep pytest's output clean
            pass

    server = http.server.ThreadingHTTPServer((address, port), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
