"""An example resolver for idem proxy, beside the refund server.

When the proxy lost track of a request (the server or the proxy died, the
connection dropped, the answer timed out), it POSTs the key to this URL and
asks whether the refund was made. The server's ledger is the truth: a row
with the key is a refund made, answered "committed" with the answer to
replay; no row is "not_committed", and the next retry makes the refund.

    LEDGER=/tmp/ledger.db python3 resolver.py --port 8001
    idem proxy DIR -upstream http://127.0.0.1:8000 -scope shared -resolver http://127.0.0.1:8001/resolve

"not_committed" is safe only when no request with the key can still reach
the ledger: here the row is written with the refund, and a request the
server was killed with is gone with it. A server that might still be
working on the request answers "unknown" instead (docs/proxy.md).
"""

import argparse
import json
import os
import socket
import sqlite3
from http.server import BaseHTTPRequestHandler, HTTPServer


class Resolver(BaseHTTPRequestHandler):
    def do_POST(self):
        asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        ledger = sqlite3.connect(os.environ.get("LEDGER", "ledger.db"))
        try:
            row = ledger.execute("SELECT answer FROM refunds WHERE idem_key = ? AND answer != '' ORDER BY id LIMIT 1",
                                 (asked["key"],)).fetchone()
        finally:
            ledger.close()
        if row:
            verdict = {"verdict": "committed", "status": 201,
                       "headers": {"Content-Type": ["application/json"]}, "body": row[0]}
        else:
            verdict = {"verdict": "not_committed"}
        body = json.dumps(verdict).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        pass


class FDServer(HTTPServer):
    """An HTTPServer on a listening socket it was handed (--fd)."""

    def __init__(self, fd, handler):
        super().__init__(("127.0.0.1", 0), handler, bind_and_activate=False)
        self.socket = socket.socket(fileno=fd)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--fd", type=int, help="serve on this listening socket instead of --port")
    a = ap.parse_args()
    srv = FDServer(a.fd, Resolver) if a.fd is not None else HTTPServer(("127.0.0.1", a.port), Resolver)
    srv.serve_forever()
