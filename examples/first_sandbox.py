#!/usr/bin/env python3
"""Your first SPACE sandbox, with nothing but the Python standard library.

Creates a sandbox from the "base" template, waits for it, runs `echo hello`
in it, reads the command's NDJSON event stream line by line, checks the exit
code and deletes the sandbox.

    SPACE_URL=http://127.0.0.1:8080 SPACE_API_KEY=$(cat /var/lib/space/admin.key) \
        python3 examples/first_sandbox.py
"""
import json
import os
import sys
import urllib.error
import urllib.request

URL = os.environ.get("SPACE_URL", "http://127.0.0.1:8080").rstrip("/")
KEY = os.environ["SPACE_API_KEY"]


def call(method, path, body=None):
    """Send a JSON request and return the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + KEY)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            raw = resp.read()
            return json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        err = json.loads(e.read() or b"{}").get("error", {})
        sys.exit(f"{method} {path}: HTTP {e.code} {err.get('code')}: {err.get('message')}")


def wait(op):
    """Long-poll an operation until it is done."""
    while op["state"] not in ("succeeded", "failed", "cancelled"):
        op = call("GET", f"/v1/operations/{op['id']}?wait=30s")
    if op["state"] != "succeeded":
        sys.exit(f"operation {op['id']} {op['state']}: {op.get('error')}")
    return op


# 1. Create a sandbox and wait until it runs.
created = call("POST", "/v1/sandboxes", {"template": "base"})
sandbox = created["sandbox"]["id"]
print("sandbox", sandbox, "creating")
wait(created["operation"])
print("sandbox", sandbox, "running")

try:
    # 2. Create a command; it starts when we attach to its events.
    cmd = call("POST", f"/v1/sandboxes/{sandbox}/commands", {"argv": ["echo", "hello"]})["command"]

    # 3. Read the NDJSON event stream line by line until the exit event.
    req = urllib.request.Request(f"{URL}/v1/sandboxes/{sandbox}/commands/{cmd['id']}/events")
    req.add_header("Authorization", "Bearer " + KEY)
    exit_event = None
    with urllib.request.urlopen(req, timeout=120) as stream:
        for line in stream:
            event = json.loads(line)
            if event["type"] == "stdout":
                print("stdout:", event["data"], end="")
            elif event["type"] == "exit":
                exit_event = event
                break

    # 4. Only the exit event says how the command ended.
    if exit_event is None:
        sys.exit("stream ended without an exit event")
    print("exit code", exit_event["exit_code"], "reason", exit_event["reason"])
    assert exit_event["exit_code"] == 0, exit_event
finally:
    # 5. Delete the sandbox and wait until it is gone.
    wait(call("DELETE", f"/v1/sandboxes/{sandbox}")["operation"])
    print("sandbox", sandbox, "deleted")
