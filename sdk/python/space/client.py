"""The client and its collections: sandboxes, templates, secrets."""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Dict, Iterator, List, Optional

from ._http import Transport, quote
from ._ops import wait_operation
from ._time import parse_time
from .sandbox import Sandbox

DEFAULT_URL = "http://127.0.0.1:8080"


class Client:
    """A client of one SPACE server. url and api_key default to SPACE_URL
    (else http://127.0.0.1:8080) and SPACE_API_KEY; timeout (seconds) bounds
    each request (event streams and operation waits bound themselves)."""

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None, timeout: float = 120.0,
                 retries: int = 4) -> None:
        url = url or os.environ.get("SPACE_URL") or DEFAULT_URL
        key = api_key if api_key is not None else os.environ.get("SPACE_API_KEY", "")
        if not key:
            from .errors import Unauthenticated
            raise Unauthenticated("no API key: pass api_key or set SPACE_API_KEY")
        self._t = Transport(url, key, timeout, retries=retries)
        self.sandboxes = Sandboxes(self._t)
        self.templates = Templates(self._t)
        self.secrets = Secrets(self._t)

    def operation(self, operation_id: str) -> Dict[str, Any]:
        op: Dict[str, Any] = self._t.call("GET", "/v1/operations/" + quote(operation_id))
        return op

    def wait_operation(self, operation_id: str, timeout: Optional[float] = None) -> Dict[str, Any]:
        return wait_operation(self._t, self.operation(operation_id), timeout)

    def features(self) -> List[Dict[str, Any]]:
        features: List[Dict[str, Any]] = self._t.call("GET", "/v1/features")["features"]
        return features


def _pages(t: Transport, path: str, key: str, query: Optional[Dict[str, Any]] = None) -> Iterator[Dict[str, Any]]:
    q = dict(query or {})
    while True:
        page = t.call("GET", path, query=q)
        yield from page.get(key) or []
        token = page.get("next_page_token")
        if not token:
            return
        q["page_token"] = token


class Sandboxes:
    """``client.sandboxes``."""

    def __init__(self, t: Transport) -> None:
        self._t = t

    def create(self, template: str = "base", *, vcpus: Optional[int] = None, memory_mib: Optional[int] = None,
               disk_mib: Optional[int] = None, env: Optional[Dict[str, str]] = None,
               metadata: Optional[Dict[str, str]] = None, timeout_seconds: Optional[int] = None,
               idle_timeout_seconds: Optional[int] = None, network: Optional[Dict[str, Any]] = None,
               from_checkpoint: Optional[str] = None, wait: bool = True,
               wait_timeout: Optional[float] = None) -> Sandbox:
        """Creates a sandbox and, with wait (the default), returns it once it
        runs (raising the operation's error if it failed). Use it as a
        context manager to delete it on exit."""
        body: Dict[str, Any] = {"template": template}
        for k, v in (("vcpus", vcpus), ("memory_mib", memory_mib), ("disk_mib", disk_mib), ("env", env),
                     ("metadata", metadata), ("timeout_seconds", timeout_seconds),
                     ("idle_timeout_seconds", idle_timeout_seconds), ("network", network),
                     ("from_checkpoint", from_checkpoint)):
            if v is not None:
                body[k] = v
        if from_checkpoint is not None and template == "base":
            del body["template"]  # a branch has its checkpoint's template
        res = self._t.call("POST", "/v1/sandboxes", body=body)
        sb = Sandbox(self, res["sandbox"])
        if wait:
            try:
                wait_operation(self._t, res["operation"], wait_timeout)
            except BaseException:
                sb.refresh()
                raise
            sb.refresh()
        return sb

    def get(self, sandbox_id: str) -> Sandbox:
        return Sandbox(self, self._t.call("GET", "/v1/sandboxes/" + quote(sandbox_id)))

    def list(self, state: Optional[str] = None, metadata: Optional[Dict[str, str]] = None,
             page_size: Optional[int] = None) -> Iterator[Sandbox]:
        """Iterates over every page of sandboxes; state is one state or several
        separated by commas; metadata keys must all match."""
        q: Dict[str, Any] = {"state": state, "page_size": page_size}
        for k, v in (metadata or {}).items():
            q["metadata." + k] = v
        for d in _pages(self._t, "/v1/sandboxes", "sandboxes", q):
            yield Sandbox(self, d)


@dataclass
class Template:
    id: str
    name: str
    digest: str
    state: str
    size_bytes: int
    defaults: Dict[str, Any]
    scope: str
    created_at: Optional[datetime]

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Template":
        return cls(id=d.get("id", ""), name=d.get("name", ""), digest=d.get("digest", ""), state=d.get("state", ""),
                   size_bytes=int(d.get("size_bytes") or 0), defaults=d.get("defaults") or {},
                   scope=d.get("scope", ""), created_at=parse_time(d.get("created_at")))


class Templates:
    """``client.templates``."""

    def __init__(self, t: Transport) -> None:
        self._t = t

    def build(self, name: str, source: Dict[str, Any], defaults: Optional[Dict[str, Any]] = None,
              on_progress: Optional[Callable[[str], None]] = None, *, no_cache: bool = False,
              wait: bool = True, timeout: Optional[float] = None) -> Template:
        """Builds a template from source, e.g. {"type": "oci", "image": "…"},
        {"type": "debian", "suite": "bookworm", "packages": [...]} or
        {"type": "rootfs", "path": "…"}; on_progress gets each build log line.
        With wait, returns the ready template or raises the build's error."""
        body: Dict[str, Any] = {"name": name, "source": source}
        if defaults:
            body["defaults"] = defaults
        if no_cache:
            body["no_cache"] = True
        res = self._t.call("POST", "/v1/templates", body=body)
        op = res["operation"]
        if not wait:
            return Template.from_json(res["template"])
        if on_progress is not None and op.get("state") not in ("succeeded", "failed", "cancelled"):
            self._follow_log(name, op["id"], on_progress)
        done = wait_operation(self._t, op, timeout)
        tpl = (done.get("result") or {}).get("template")
        if tpl:
            return Template.from_json(tpl)
        return self.get(name)

    def _follow_log(self, name: str, op_id: str, on_progress: Callable[[str], None]) -> None:
        from .errors import Unavailable
        after, failures = 0, 0
        path = f"/v1/templates/{quote(name)}/builds/{quote(op_id)}/log"
        while failures <= 8:
            try:
                for ev in self._t.ndjson(path, query={"after": after}, timeout=60.0):
                    t = ev.get("type")
                    if t == "log":
                        after = max(after, int(ev.get("seq") or 0))
                        failures = 0
                        line = ev.get("data")
                        if line is None and ev.get("data_b64"):
                            import base64
                            line = base64.b64decode(ev["data_b64"]).decode("utf-8", "replace")
                        on_progress((line or "").rstrip("\n"))
                    elif t == "end":
                        return
                    elif t == "error":
                        break
            except Unavailable:
                pass
            failures += 1

    def list(self) -> List[Template]:
        return [Template.from_json(d) for d in _pages(self._t, "/v1/templates", "templates")]

    def get(self, ref: str) -> Template:
        """ref is "name" (its newest ready build) or "name@sha256:…"."""
        return Template.from_json(self._t.call("GET", "/v1/templates/" + quote(ref)))

    def delete(self, ref: str, force: bool = False) -> None:
        self._t.call("DELETE", "/v1/templates/" + quote(ref), query={"force": "true" if force else None})


@dataclass
class Secret:
    name: str
    created_at: Optional[datetime]
    updated_at: Optional[datetime]


class Secrets:
    """``client.secrets``: write-only values, used by network inject rules as ${secret:NAME}."""

    def __init__(self, t: Transport) -> None:
        self._t = t

    def put(self, name: str, value: str) -> Secret:
        d = self._t.call("PUT", "/v1/secrets/" + quote(name), body={"value": value}) or {}
        return Secret(d.get("name", name), parse_time(d.get("created_at")), parse_time(d.get("updated_at")))

    def list(self) -> List[Secret]:
        return [Secret(d["name"], parse_time(d.get("created_at")), parse_time(d.get("updated_at")))
                for d in _pages(self._t, "/v1/secrets", "secrets")]

    def delete(self, name: str) -> None:
        self._t.call("DELETE", "/v1/secrets/" + quote(name))
