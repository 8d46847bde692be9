"""A refund tool server with no idempotency of its own, for idem proxy.

It keeps a ledger of refunds in SQLite: one row per refund made, with the
Idempotency-Key the request carried (the proxy forwards it). The ledger does
not deduplicate on purpose: put `idem proxy` in front of it and every key
makes at most one row, however often agents retry (docs/proxy.md).

    LEDGER=/tmp/ledger.db python3 -m uvicorn server:app --port 8000

For fault tests it can SIGKILL itself once, on the request whose key is
$KILL_KEY, at $KILL_AT: "before" (before acting), "acted" (the row is
committed, nothing answered) or "answered" (just after the answer went out).
$KILL_MARK names a file that marks the kill as done, so the restarted
server runs normally.
"""

import json
import os
import signal
import sqlite3
import threading
import time

from fastapi import BackgroundTasks, FastAPI, Header, Request
from fastapi.responses import JSONResponse

app = FastAPI()
ledger = sqlite3.connect(os.environ.get("LEDGER", "ledger.db"), check_same_thread=False, isolation_level=None)
ledger.execute("PRAGMA journal_mode=WAL")
ledger.execute("""CREATE TABLE IF NOT EXISTS refunds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    idem_key TEXT,
    order_id TEXT NOT NULL,
    cents INTEGER NOT NULL,
    answer TEXT NOT NULL,
    made_at REAL NOT NULL)""")
lock = threading.Lock()


def kill_here(point: str, key: str | None) -> None:
    """SIGKILLs this process once, if the fault asked for is this one."""
    mark = os.environ.get("KILL_MARK")
    if os.environ.get("KILL_AT") != point or os.environ.get("KILL_KEY") != key or not mark:
        return
    try:
        fd = os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


@app.post("/refunds")
async def refund(request: Request, background: BackgroundTasks,
                 idempotency_key: str | None = Header(default=None)):
    args = json.loads(await request.body())
    kill_here("before", idempotency_key)
    with lock:
        cur = ledger.execute("INSERT INTO refunds (idem_key, order_id, cents, answer, made_at) VALUES (?, ?, ?, '', ?)",
                             (idempotency_key, args["order"], args["cents"], time.time()))
        answer = {"refund_id": f"re_{cur.lastrowid}", "order": args["order"], "cents": args["cents"]}
        ledger.execute("UPDATE refunds SET answer = ? WHERE id = ?", (json.dumps(answer), cur.lastrowid))
    kill_here("acted", idempotency_key)
    background.add_task(kill_here, "answered", idempotency_key)
    return JSONResponse(answer, status_code=201, background=background)


@app.get("/ledger")
def read_ledger():
    rows = ledger.execute("SELECT idem_key, order_id, cents, answer FROM refunds ORDER BY id").fetchall()
    return [{"key": k, "order": o, "cents": c, "answer": json.loads(a) if a else None} for k, o, c, a in rows]
