"""An agent's tool call, retried with one key until it gets an answer.

    python3 client.py URL KEY ORDER CENTS [TENANT]

It sends the same Idempotency-Key on every attempt and retries on a
connection error and on 409, 429, 502, 503 and 504, backing off, as an agent
loop does; it prints the final status and body as one JSON line.
"""

import json
import sys
import time
import urllib.error
import urllib.request

RETRYABLE = {409, 429, 502, 503, 504}


def call_tool(url, key, payload, tenant=None, attempts=40):
    delay = 0.05
    for _ in range(attempts):
        req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Idempotency-Key": key})
        if tenant:
            req.add_header("X-Tenant", tenant)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read().decode(), resp.headers.get("Idempotent-Replayed")
        except urllib.error.HTTPError as e:
            if e.code not in RETRYABLE:
                return e.code, e.read().decode(), e.headers.get("Idempotent-Replayed")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass  # it may or may not have run: the key makes resending safe
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    raise SystemExit(f"gave up on key {key} after {attempts} attempts")


if __name__ == "__main__":
    url, key, order, cents = sys.argv[1:5]
    tenant = sys.argv[5] if len(sys.argv) > 5 else None
    status, body, replayed = call_tool(url, key, {"order": order, "cents": int(cents)}, tenant)
    print(json.dumps({"status": status, "body": body, "replayed": replayed}))
