"""The HTTP transport: requests, retries, error answers and NDJSON streams.

Standard library only (http.client). Every POST carries an Idempotency-Key,
so it can be repeated after a dropped connection or a 503 without acting
twice; other methods are repeated as they are. A 429 is retried after its
Retry-After.
"""
from __future__ import annotations

import email.utils
import http.client
import json
import socket
import ssl
import time
import urllib.parse
import uuid
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple, Union

from . import errors

Body = Union[None, bytes, Dict[str, Any], list]

# Errors that mean the request may not have reached the server, or its
# answer was lost: safe to repeat an idempotent request.
_DROPPED = (ConnectionError, http.client.RemoteDisconnected, http.client.IncompleteRead,
            http.client.BadStatusLine, socket.timeout, TimeoutError, OSError)


class Transport:
    def __init__(self, url: str, api_key: str, timeout: float, retries: int = 4,
                 max_retry_after: float = 60.0) -> None:
        u = urllib.parse.urlsplit(url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise errors.InvalidArgument(f"server URL {url!r}: must be http(s)://host[:port]")
        self.scheme, self.host, self.port = u.scheme, u.hostname, u.port
        self.base_path = u.path
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.max_retry_after = max_retry_after

    def _conn(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        t = self.timeout if timeout is None else timeout
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=t, context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=t)

    def _target(self, path: str, query: Optional[Mapping[str, Any]]) -> str:
        target = self.base_path + path
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                target += "?" + urllib.parse.urlencode(q)
        return target

    def open(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None, body: Body = None,
             headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
             idempotency_key: Optional[str] = None) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends a request, retrying as the module says, and returns the open
        connection and its 2xx response (the caller reads and closes both)."""
        hdrs = {"Authorization": "Bearer " + self.api_key, "Accept": "application/json"}
        data: Optional[bytes] = None
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        elif body is not None:
            data = bytes(body)
            hdrs["Content-Type"] = "application/octet-stream"
        if method == "POST":
            hdrs["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        if headers:
            hdrs.update(headers)
        target = self._target(path, query)
        attempt = 0
        while True:
            attempt += 1
            conn = self._conn(timeout)
            try:
                conn.request(method, target, body=data, headers=hdrs)
                resp = conn.getresponse()
            except _DROPPED as e:
                conn.close()
                if attempt > self.retries:
                    raise errors.Unavailable(f"{method} {path}: {e or type(e).__name__}") from e
                time.sleep(_backoff(attempt))
                continue
            if 200 <= resp.status < 300:
                return conn, resp
            try:
                raw = resp.read()
            except _DROPPED:
                raw = b""
            finally:
                conn.close()
            err = _decode_error(resp, raw)
            if attempt <= self.retries:
                if resp.status == 503:
                    time.sleep(_retry_after(resp, self.max_retry_after) or _backoff(attempt))
                    continue
                if resp.status == 429:
                    wait = _retry_after(resp, self.max_retry_after)
                    if wait is not None:
                        time.sleep(wait)
                        continue
            raise err

    def call(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None, body: Body = None,
             headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None) -> Any:
        """Sends a request and returns its decoded JSON answer (None when empty)."""
        raw = self.call_raw(method, path, query=query, body=body, headers=headers, timeout=timeout)
        return json.loads(raw) if raw else None

    def call_raw(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None, body: Body = None,
                 headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None) -> bytes:
        """Sends a request and returns the raw body of its answer."""
        attempt = 0
        while True:
            attempt += 1
            conn, resp = self.open(method, path, query=query, body=body, headers=headers, timeout=timeout)
            try:
                return resp.read()
            except _DROPPED as e:
                # The answer broke off: a GET is repeated; for anything else
                # the idempotency key (POST) or the method's nature decides.
                if attempt > self.retries:
                    raise errors.Unavailable(f"{method} {path}: reading the answer: {e}") from e
                time.sleep(_backoff(attempt))
            finally:
                conn.close()

    def ndjson(self, path: str, *, query: Optional[Mapping[str, Any]] = None,
               timeout: Optional[float] = None) -> "LineStream":
        """Opens a newline-delimited JSON stream."""
        conn, resp = self.open("GET", path, query=query, headers={"Accept": "application/x-ndjson"}, timeout=timeout)
        return LineStream(conn, resp)


class LineStream:
    """Decoded lines of an NDJSON answer; iteration ends at the end of the
    stream and raises Unavailable when the connection drops."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn, self._resp = conn, resp

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        try:
            while True:
                try:
                    line = self._resp.readline()
                except _DROPPED as e:
                    raise errors.Unavailable(f"event stream dropped: {e or type(e).__name__}") from e
                if not line:
                    return
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            self.close()

    def close(self) -> None:
        try:
            self._resp.close()
        finally:
            self._conn.close()


def _decode_error(resp: http.client.HTTPResponse, raw: bytes) -> errors.Error:
    rid = resp.getheader("X-Request-Id")
    try:
        e = json.loads(raw)["error"]
        return errors.error_for(e.get("code"), e.get("message") or "", status=resp.status,
                                details=e.get("details"), request_id=rid)
    except (ValueError, KeyError, TypeError, AttributeError):
        return errors.error_for(None, f"HTTP {resp.status} {resp.reason}", status=resp.status, request_id=rid)


def _retry_after(resp: http.client.HTTPResponse, cap: float) -> Optional[float]:
    """Seconds the Retry-After header asks for (seconds or an HTTP date), capped."""
    v = resp.getheader("Retry-After")
    if not v:
        return None
    try:
        secs = float(v)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(v)
        except (TypeError, ValueError):
            return None
        secs = when.timestamp() - time.time()
    return min(max(secs, 0.0), cap)


def _backoff(attempt: int) -> float:
    return min(0.25 * float(2 ** (attempt - 1)), 4.0)


def quote(s: str) -> str:
    return urllib.parse.quote(s, safe="")
