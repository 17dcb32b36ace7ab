"""Ports of a sandbox: what listens inside it, and preview URLs that reach it."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Dict, List, Optional
from urllib.parse import quote as quote_query

from ._http import quote
from ._time import parse_time
from .errors import InvalidArgument

if TYPE_CHECKING:
    from .sandbox import Sandbox

# The header a private preview URL's token travels in (or ?space_token=
# once, which sets a cookie for the URL's host).
TOKEN_HEADER = "X-Space-Port-Token"


@dataclass
class Port:
    """A TCP port something listens on inside the sandbox."""
    port: int
    address: str  # the listening address as the guest reports it: "0.0.0.0", "::", "127.0.0.1"
    protocol: str  # "tcp"

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Port":
        return cls(port=int(d["port"]), address=d.get("address", ""), protocol=d.get("protocol", "tcp"))


@dataclass
class PortURL:
    """A preview URL of one port. A private URL needs its token: send
    ``headers`` with each request, or open ``browser_url`` once."""
    url: str
    token: Optional[str]  # None for a public URL
    expires_at: Optional[datetime]

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "PortURL":
        return cls(url=d["url"], token=d.get("token") or None, expires_at=parse_time(d.get("expires_at")))

    @property
    def public(self) -> bool:
        return self.token is None

    @property
    def headers(self) -> Dict[str, str]:
        """The request headers that carry the token (none for a public URL)."""
        return {TOKEN_HEADER: self.token} if self.token else {}

    @property
    def browser_url(self) -> str:
        """The URL with ?space_token=: the server trades it for an HttpOnly
        cookie and redirects to the plain URL."""
        if not self.token:
            return self.url
        sep = "&" if "?" in self.url else "?"
        return f"{self.url}{sep}space_token={quote_query(self.token, safe='')}"


class Ports:
    """``sandbox.ports``: servers inside the sandbox, reached over its agent
    link (not its network, so a deny-by-default sandbox can be previewed)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{quote(self._sb.id)}/ports"

    def list(self) -> List[Port]:
        """The TCP ports listening in the guest, sorted by port (one entry
        per port and address)."""
        res = self._sb._t.call("GET", self._path) or {}
        return [Port.from_json(d) for d in res.get("ports") or []]

    def url(self, port: int, public: bool = False, ttl_seconds: Optional[int] = None) -> PortURL:
        """A preview URL of port (1-65535): private (it needs the returned
        token, or the owner's API key) unless public=True; it expires after
        ttl_seconds (the server's default when None)."""
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise InvalidArgument(f"port must be an integer from 1 to 65535, not {port!r}")
        body: Dict[str, Any] = {"public": bool(public)}
        if ttl_seconds is not None:
            body["ttl_seconds"] = int(ttl_seconds)
        return PortURL.from_json(self._sb._t.call("POST", f"{self._path}/{port}/urls", body=body))
