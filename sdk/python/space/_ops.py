"""Waiting for operations (asynchronous lifecycle work)."""
from __future__ import annotations

import time
from typing import Any, Dict, Optional

from . import errors
from ._http import Transport, quote

DONE = ("succeeded", "failed", "cancelled")


def wait_operation(t: Transport, op: Dict[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
    """Long-polls an operation until it is done and returns it; raises the
    error of its code when it failed or was cancelled, DeadlineExceeded when
    timeout (seconds, None: no limit) passes first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while op.get("state") not in DONE:
        wait = 30.0
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise errors.DeadlineExceeded(f"operation {op['id']} ({op.get('type')}) still {op.get('state')}",
                                              details={"operation": op})
            wait = max(1.0, min(wait, left))
        op = t.call("GET", "/v1/operations/" + quote(op["id"]), query={"wait": f"{int(wait)}s"},
                    timeout=wait + t.timeout)
    if op["state"] != "succeeded":
        e = op.get("error") or {}
        code = e.get("code") or ("cancelled" if op["state"] == "cancelled" else "internal")
        raise errors.error_for(code, f"operation {op['id']} ({op.get('type')}) {op['state']}: "
                               f"{e.get('message') or op['state']}", details={"operation": op})
    return op
