"""A sandbox and its checkpoints."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from ._http import Transport, quote
from ._ops import wait_operation
from ._time import parse_time
from .commands import Cmd, Command, OutputCallback, Result, command_body
from .files import Files
from .ports import Ports

if TYPE_CHECKING:
    from .client import Sandboxes


@dataclass
class Checkpoint:
    """A kept state (disk, memory, processes) of a sandbox."""
    id: str
    sandbox: str
    name: str
    parent: Optional[str]
    size_bytes: int
    state: Optional[str]
    created_at: Optional[datetime]

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Checkpoint":
        return cls(id=d["id"], sandbox=d.get("sandbox", ""), name=d.get("name", ""), parent=d.get("parent"),
                   size_bytes=int(d.get("size_bytes") or 0), state=d.get("state"),
                   created_at=parse_time(d.get("created_at")))


CheckpointRef = Union[str, Checkpoint]


def _ckpt_id(c: CheckpointRef) -> str:
    return c.id if isinstance(c, Checkpoint) else c


class Sandbox:
    """One microVM with its own root filesystem. Used as a context manager
    it is deleted on exit. Lifecycle calls wait for their operation unless
    wait=False; a failed operation raises the error of its code."""

    def __init__(self, sandboxes: "Sandboxes", data: Dict[str, Any]) -> None:
        self._sandboxes = sandboxes
        self._t: Transport = sandboxes._t
        self.files = Files(self)
        self.ports = Ports(self)
        self._set(data)

    def _set(self, data: Dict[str, Any]) -> None:
        self.data = data
        self.id: str = data["id"]
        self.state: str = data.get("state", "")
        self.template: str = data.get("template", "")
        self.metadata: Dict[str, str] = data.get("metadata") or {}
        self.expires_at = parse_time(data.get("expires_at"))

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, state={self.state!r})"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.state != "deleted":
            self.delete()

    @property
    def _path(self) -> str:
        return "/v1/sandboxes/" + quote(self.id)

    def refresh(self) -> "Sandbox":
        self._set(self._t.call("GET", self._path))
        return self

    # Commands

    def start(self, cmd: Cmd, *, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
              timeout: Optional[float] = None, stdin: bool = False, user: Optional[str] = None,
              pty: Optional[Dict[str, int]] = None) -> Command:
        """Starts cmd (an argv list, or a string run by /bin/sh -c) and returns
        its handle; stdin=True keeps its stdin open for send_stdin."""
        body = command_body(cmd, cwd=cwd, env=env, timeout=timeout, stdin=stdin, user=user, pty=pty)
        c = Command(self, self._t.call("POST", self._path + "/commands", body=body)["command"])
        c.attach()  # a command starts on the first attach to its events
        return c

    def run(self, cmd: Cmd, *, cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
            timeout: Optional[float] = None, stdin: Union[None, bytes, str] = None,
            on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None) -> Result:
        """Runs cmd to its end and returns its Result; stdin is written to
        the command's stdin, which is then closed. Output callbacks get the
        bytes as they come."""
        c = self.start(cmd, cwd=cwd, env=env, timeout=timeout, stdin=stdin is not None)
        if stdin is not None:
            c.send_stdin(stdin, eof=True)
        return c.wait(on_stdout=on_stdout, on_stderr=on_stderr)

    def command(self, command_id: str) -> Command:
        """A handle of an existing command (e.g. to reattach after a restart)."""
        return Command(self, self._t.call("GET", f"{self._path}/commands/{quote(command_id)}")["command"])

    # Lifecycle

    def _lifecycle(self, verb: str, body: Optional[Dict[str, Any]], wait: bool,
                   timeout: Optional[float]) -> Dict[str, Any]:
        op: Dict[str, Any] = self._t.call("POST", f"{self._path}/{verb}", body=body)["operation"]
        if wait:
            op = wait_operation(self._t, op, timeout)
        self.refresh()
        return op

    def pause(self, *, wait: bool = True, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Stops the vCPUs; memory stays resident. Returns the operation."""
        return self._lifecycle("pause", None, wait, timeout)

    def suspend(self, *, wait: bool = True, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Saves memory, processes and files durably and releases the VM."""
        return self._lifecycle("suspend", None, wait, timeout)

    def wake(self, *, wait: bool = True, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Resumes a paused sandbox or restores a suspended one."""
        return self._lifecycle("wake", None, wait, timeout)

    def keep(self, timeout_seconds: int) -> "Sandbox":
        """Sets the time to live to timeout_seconds from now."""
        self._set(self._t.call("POST", self._path + "/keep", body={"timeout_seconds": int(timeout_seconds)}))
        return self

    def checkpoint(self, name: Optional[str] = None, *, wait: bool = True,
                   timeout: Optional[float] = None) -> Checkpoint:
        """Checkpoints the sandbox (it keeps running) and returns the checkpoint."""
        res = self._t.call("POST", self._path + "/checkpoints", body={"name": name} if name else {})
        ck = res["checkpoint"]
        if wait:
            wait_operation(self._t, res["operation"], timeout)
            ck = self._t.call("GET", "/v1/checkpoints/" + quote(ck["id"]))
        return Checkpoint.from_json(ck)

    def checkpoints(self) -> List[Checkpoint]:
        """This sandbox's checkpoints, oldest first."""
        out: List[Checkpoint] = []
        token = None
        while True:
            page = self._t.call("GET", self._path + "/checkpoints", query={"page_token": token})
            out.extend(Checkpoint.from_json(d) for d in page.get("checkpoints") or [])
            token = page.get("next_page_token")
            if not token:
                return out

    def restore(self, checkpoint: CheckpointRef, *, wait: bool = True,
                timeout: Optional[float] = None) -> Dict[str, Any]:
        """Rolls this sandbox back in place to one of its checkpoints."""
        return self._lifecycle("restore", {"checkpoint": _ckpt_id(checkpoint)}, wait, timeout)

    def branch(self, checkpoint: CheckpointRef, **kwargs: Any) -> "Sandbox":
        """A new sandbox started from checkpoint; kwargs as in sandboxes.create."""
        return self._sandboxes.create(from_checkpoint=_ckpt_id(checkpoint), **kwargs)

    def set_network(self, policy: Dict[str, Any]) -> "Sandbox":
        """Replaces the network policy, e.g. {"egress": {"default": "deny", "allow": ["pypi.org"]}}."""
        self._set(self._t.call("PUT", self._path + "/network", body=policy))
        return self

    def delete(self, *, wait: bool = True, timeout: Optional[float] = None) -> None:
        """Deletes the sandbox and everything in it (its checkpoints stay)."""
        op = self._t.call("DELETE", self._path)["operation"]
        if wait:
            wait_operation(self._t, op, timeout)
            self.state = "deleted"
