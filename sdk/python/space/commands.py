"""Command sessions: start, stream events (reattaching after a drop), stdin,
signals, and the collected result."""
from __future__ import annotations

import base64
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

from . import errors
from ._http import LineStream, quote

if TYPE_CHECKING:
    from .sandbox import Sandbox

OutputCallback = Callable[[bytes], None]
Cmd = Union[str, Sequence[str]]


@dataclass
class Event:
    """One event of a command's stream: ``started`` (pid), ``stdout`` and
    ``stderr`` (data, bytes), ``gap`` (lost_bytes) or ``exit`` (exit_code,
    signal, reason)."""
    seq: int
    type: str
    data: bytes = b""
    pid: Optional[int] = None
    lost_bytes: int = 0
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    reason: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Event":
        data = b""
        if d.get("data") is not None:
            data = d["data"].encode()
        elif d.get("data_b64") is not None:
            data = base64.b64decode(d["data_b64"])
        return cls(seq=int(d.get("seq") or 0), type=d["type"], data=data, pid=d.get("pid"),
                   lost_bytes=int(d.get("lost_bytes") or 0), exit_code=d.get("exit_code"),
                   signal=d.get("signal"), reason=d.get("reason"), raw=d)


@dataclass
class Result:
    """How a command ended and what it wrote. ``exit_code`` is None when a
    signal ended it (``signal`` says which); ``reason`` is exited, signaled,
    timeout, killed, oom, sandbox_deleted or lost."""
    exit_code: Optional[int]
    stdout: bytes
    stderr: bytes
    reason: str
    signal: Optional[str] = None
    lost_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def text(self) -> str:
        """stdout decoded as UTF-8 (bad bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")


def command_body(cmd: Cmd, *, cwd: Optional[str], env: Optional[Dict[str, str]], timeout: Optional[float],
                 stdin: bool, user: Optional[str] = None, pty: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if isinstance(cmd, str):
        body["shell"] = cmd
    else:
        argv = list(cmd)
        if not argv:
            raise errors.InvalidArgument("cmd: an empty argv")
        body["argv"] = argv
    if cwd is not None:
        body["cwd"] = cwd
    if env:
        body["env"] = dict(env)
    if timeout is not None:
        body["timeout_seconds"] = max(1, math.ceil(timeout))
    if stdin:
        body["stdin"] = True
    if user is not None:
        body["user"] = user
    if pty is not None:
        body["pty"] = pty
    return body


class Command:
    """A running command. Iterate over it for its events (the stream is
    reattached with ``after`` when the connection drops, so nothing is lost
    while the server's buffer holds it), or call ``wait()``."""

    #: consecutive reattaches without a new event before giving up
    max_reattach = 8
    #: seconds without a byte (heartbeats come every 15 s) before the stream is presumed dead
    stream_timeout = 60.0

    def __init__(self, sandbox: "Sandbox", data: Dict[str, Any]) -> None:
        self.sandbox = sandbox
        self.id: str = data["id"]
        self.data = data
        self.last_seq = 0
        self.exit: Optional[Event] = None
        self._stream: Optional[LineStream] = None

    def __repr__(self) -> str:
        return f"Command({self.id!r}, sandbox={self.sandbox.id!r})"

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{quote(self.sandbox.id)}/commands/{quote(self.id)}"

    def attach(self) -> None:
        """Opens the event stream after the last event seen; the first attach
        starts the command."""
        if self._stream is None:
            self._stream = self.sandbox._t.ndjson(self._path + "/events", query={"after": self.last_seq},
                                                  timeout=self.stream_timeout)

    def events(self) -> Iterator[Event]:
        """Yields events up to and including ``exit``."""
        failures = 0
        while self.exit is None:
            try:
                self.attach()
                assert self._stream is not None
                for d in self._stream:
                    t = d.get("type")
                    if t == "heartbeat":
                        continue
                    if t == "error":
                        # The stream broke on the server's side: reattach.
                        err = errors.error_for(d.get("code"), d.get("message") or "stream error")
                        if not isinstance(err, (errors.Unavailable, errors.Internal, errors.DeadlineExceeded)):
                            raise err
                        break
                    ev = Event.from_json(d)
                    failures = 0
                    if ev.seq > self.last_seq:
                        self.last_seq = ev.seq
                    if ev.type == "exit":
                        self.exit = ev
                    yield ev
                    if self.exit is not None:
                        return
            except errors.Unavailable:
                pass
            finally:
                if self._stream is not None:
                    self._stream.close()
                    self._stream = None
            # A closed stream alone never says the command ended.
            failures += 1
            if failures > self.max_reattach:
                raise errors.Unavailable(f"command {self.id}: event stream keeps ending without an exit event")
            time.sleep(min(0.2 * failures, 2.0))

    __iter__ = events

    def wait(self, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None) -> Result:
        """Reads the events to the exit and returns the result."""
        out: List[bytes] = []
        err: List[bytes] = []
        lost = 0
        for ev in self.events():
            if ev.type == "stdout":
                out.append(ev.data)
                if on_stdout:
                    on_stdout(ev.data)
            elif ev.type == "stderr":
                err.append(ev.data)
                if on_stderr:
                    on_stderr(ev.data)
            elif ev.type == "gap":
                lost += ev.lost_bytes
        assert self.exit is not None
        return Result(exit_code=self.exit.exit_code, stdout=b"".join(out), stderr=b"".join(err),
                      reason=self.exit.reason or "", signal=self.exit.signal, lost_bytes=lost)

    def send_stdin(self, data: Union[bytes, str], eof: bool = False) -> None:
        """Writes to the command's stdin (it must have been started with stdin=True)."""
        if isinstance(data, str):
            data = data.encode()
        self.sandbox._t.call("POST", self._path + "/stdin", query={"eof": "true"} if eof else None, body=data)

    def close_stdin(self) -> None:
        self.send_stdin(b"", eof=True)

    def signal(self, signal: str = "SIGTERM") -> None:
        """Signals the command's process group, e.g. "SIGTERM"."""
        self.sandbox._t.call("POST", self._path + "/signal", body={"signal": signal})

    def kill(self) -> None:
        self.signal("SIGKILL")

    def refresh(self) -> Dict[str, Any]:
        """Reads the command session (state, pid, exit) from the server."""
        self.data = self.sandbox._t.call("GET", self._path)["command"]
        return self.data
