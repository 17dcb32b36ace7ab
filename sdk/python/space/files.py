"""Files of a sandbox: read, write, list, delete, and directories as tar."""
from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from ._http import quote
from ._time import parse_time

if TYPE_CHECKING:
    from .sandbox import Sandbox


@dataclass
class FileInfo:
    name: str
    type: str  # file|dir|symlink|other
    size: int
    mode: str  # octal permission bits, e.g. "0644"
    mtime: Optional[datetime]

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "FileInfo":
        return cls(name=d.get("name", ""), type=d.get("type", ""), size=int(d.get("size") or 0),
                   mode=d.get("mode", ""), mtime=parse_time(d.get("mtime")))


class Files:
    """``sandbox.files``: paths are absolute paths inside the sandbox."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{quote(self._sb.id)}/files"

    def read(self, path: str) -> bytes:
        return self._sb._t.call_raw("GET", self._path, query={"path": path})

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Union[bytes, str], mode: Optional[int] = None) -> FileInfo:
        """Writes a file (parents are created); mode is e.g. 0o755 (default 0644)."""
        if isinstance(data, str):
            data = data.encode()
        q: Dict[str, Any] = {"path": path}
        if mode is not None:
            q["mode"] = "0" + format(mode, "o")
        return FileInfo.from_json(self._sb._t.call("PUT", self._path, query=q, body=data) or {})

    def list(self, path: str) -> List[FileInfo]:
        return [FileInfo.from_json(d) for d in self._sb._t.call("GET", self._path + "/list", query={"path": path}) or []]

    def delete(self, path: str, recursive: bool = False) -> None:
        self._sb._t.call("DELETE", self._path, query={"path": path, "recursive": "true" if recursive else None})

    def exists(self, path: str) -> bool:
        from .errors import NotFound
        parent, _, name = path.rstrip("/").rpartition("/")
        try:
            return any(f.name == name for f in self.list(parent or "/"))
        except NotFound:
            return False

    def upload_dir(self, local_dir: Union[str, "os.PathLike[str]"], remote_dir: str) -> None:
        """Copies a local directory's contents into remote_dir (created), as one tar stream."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            root = os.fspath(local_dir)
            for name in sorted(os.listdir(root)):
                tar.add(os.path.join(root, name), arcname=name)
        self._sb._t.call("PUT", self._path, query={"path": remote_dir, "format": "tar"}, body=buf.getvalue(),
                         headers={"Content-Type": "application/x-tar"})

    def download_dir(self, remote_dir: str, local_dir: Union[str, "os.PathLike[str]"]) -> None:
        """Copies remote_dir's contents into local_dir (created). Entries that
        would land outside local_dir, and device files, are refused."""
        data = self._sb._t.call_raw("GET", self._path, query={"path": remote_dir, "format": "tar"})
        dest = os.path.realpath(os.fspath(local_dir))
        os.makedirs(dest, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            members = []
            for m in tar.getmembers():
                target = os.path.realpath(os.path.join(dest, m.name))
                if target != dest and not target.startswith(dest + os.sep):
                    raise ValueError(f"tar entry {m.name!r} is outside {dest}")
                if m.isdev() or (m.issym() or m.islnk()) and os.path.isabs(m.linkname):
                    continue
                members.append(m)
            # The "data" filter where this Python has it (3.12, and
            # backports); the checks above hold either way.
            kwargs: Dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(dest, members=members, **kwargs)
