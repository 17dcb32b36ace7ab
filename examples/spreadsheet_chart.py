#!/usr/bin/env python3
"""Clean a messy spreadsheet with pandas in a SPACE sandbox and chart it.

Standard library only. Uses the `python` template (python3, numpy, pandas,
matplotlib, openpyxl from Debian), building it from templates/python.json
when the server does not have it yet (a few minutes, once; the recipe has a
setup script, so that first build needs an admin key). Then it uploads a
messy CSV, runs a pandas script in the sandbox that cleans and sums it and
draws a bar chart, downloads the PNG and deletes the sandbox.

    SPACE_URL=http://127.0.0.1:8080 SPACE_API_KEY=$(cat /var/lib/space/admin.key) \\
        python3 examples/spreadsheet_chart.py [OUT.png]
"""

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

URL = os.environ.get("SPACE_URL", "http://127.0.0.1:8080").rstrip("/")
KEY = os.environ["SPACE_API_KEY"]
OUT = sys.argv[1] if len(sys.argv) > 1 else "sales_by_region.png"
RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "templates", "python.json")

# Sales as people type them: stray spaces, mixed case, currency symbols and
# thousands separators, a missing amount, a duplicated row, a note line.
MESSY_CSV = """Date, Region ,Product,Amount
2024-01-03, north ,Widget,"$1,200.50"
2024-01-04,North,Gadget, 310
2024-01-04,North,Gadget, 310
2024-01-05,SOUTH,Widget,"$2,045.00"
2024-01-09,south ,Gizmo,
2024-01-11, East,Widget,980.25
2024-01-12,east,Gizmo,"1,130"
2024-01-15,West,Gadget,$415.75
2024-01-18,west ,Widget,"$3,002.10"
TOTAL (do not import),,,9999
"""

CLEAN_PY = r"""
import pandas as pd
import matplotlib.pyplot as plt

df = pd.read_csv("/root/sales.csv", skipinitialspace=True)
df.columns = [c.strip().lower() for c in df.columns]
df = df[pd.to_datetime(df["date"], errors="coerce").notna()]          # drop note rows
df["region"] = df["region"].str.strip().str.title()
df["amount"] = pd.to_numeric(df["amount"].astype(str).str.replace(r"[$,\s]", "", regex=True), errors="coerce")
df = df.dropna(subset=["amount"]).drop_duplicates()
totals = df.groupby("region")["amount"].sum().sort_values(ascending=False)

print(f"{len(df)} clean rows")
print(totals.map("{:,.2f}".format).to_string())
print(f"total {totals.sum():,.2f}")

ax = totals.plot.bar(color="#4477aa", title="Sales by region")
ax.set_ylabel("amount")
plt.tight_layout()
plt.savefig("/root/chart.png", dpi=100)
"""


def request(method, path, body=None, raw=None, ok=(200, 201, 202, 204)):
    """Send a request; return (status, body bytes). Exits on an unexpected error."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + KEY)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        if e.code in ok:
            return e.code, e.read()
        err = json.loads(e.read() or b"{}").get("error", {})
        sys.exit(f"{method} {path}: HTTP {e.code} {err.get('code')}: {err.get('message')}")


def call(method, path, body=None):
    _, raw = request(method, path, body)
    return json.loads(raw) if raw else None


def wait(op, show_progress=False):
    """Long-poll an operation until it is done, printing progress changes."""
    last = None
    while op["state"] not in ("succeeded", "failed", "cancelled"):
        op = call("GET", f"/v1/operations/{op['id']}?wait=5s")
        p = op.get("progress")
        if show_progress and p and (p["step"], p["percent"]) != last:
            last = (p["step"], p["percent"])
            print(f"  build {p['percent']:3d}% {p['step']}")
    if op["state"] != "succeeded":
        sys.exit(f"operation {op['id']} {op['state']}: {op.get('error')}")
    return op


# 1. The python template: use it, or build it from the recipe once.
status, raw = request("GET", "/v1/templates/python", ok=(200, 404))
tpl = json.loads(raw) if status == 200 else None
if tpl is None or tpl["state"] != "ready":
    with open(RECIPE) as f:
        recipe = json.load(f)
    print("building the python template (a few minutes, once)")
    started = call("POST", "/v1/templates", recipe)
    wait(started["operation"], show_progress=True)
    tpl = call("GET", "/v1/templates/python")
print(f"template python@{tpl['digest'][:19]}… ({tpl['size_bytes'] >> 20} MiB)")

# 2. A sandbox from it (its defaults: 512 MiB, MPLBACKEND=Agg, cwd /root).
created = call("POST", "/v1/sandboxes", {"template": "python"})
sandbox = created["sandbox"]["id"]
wait(created["operation"])
print("sandbox", sandbox, "running")

try:
    # 3. Upload the messy CSV and the script, run it, download the chart.
    q = urllib.parse.quote
    request("PUT", f"/v1/sandboxes/{sandbox}/files?path={q('/root/sales.csv')}", raw=MESSY_CSV.encode())
    request("PUT", f"/v1/sandboxes/{sandbox}/files?path={q('/root/clean.py')}", raw=CLEAN_PY.encode())
    res = call("POST", f"/v1/sandboxes/{sandbox}/exec", {"argv": ["python3", "clean.py"], "timeout_seconds": 300})
    print(res["stdout"], end="")
    if res["exit_code"] != 0:
        sys.exit(f"the script failed (exit {res['exit_code']}):\n{res['stderr']}")
    _, png = request("GET", f"/v1/sandboxes/{sandbox}/files?path={q('/root/chart.png')}")
    if not png.startswith(b"\x89PNG\r\n\x1a\n"):
        sys.exit("the chart is not a PNG")
    with open(OUT, "wb") as f:
        f.write(png)
    print(f"wrote {OUT} ({len(png)} bytes)")
finally:
    # 4. Delete the sandbox.
    wait(call("DELETE", f"/v1/sandboxes/{sandbox}")["operation"])
    print("sandbox", sandbox, "deleted")
