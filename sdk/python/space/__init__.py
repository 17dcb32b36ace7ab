"""SPACE's Python SDK: sandboxes, commands, files, checkpoints, branches,
network policy, ports (preview URLs), templates and secrets over SPACE's
HTTP API, with nothing but the standard library.

    import space

    client = space.Client()  # SPACE_URL, SPACE_API_KEY
    with client.sandboxes.create(template="base") as sb:
        print(sb.run("echo hello").stdout)
"""
from .client import DEFAULT_URL, Client, Sandboxes, Secret, Secrets, Template, Templates
from .commands import Command, Event, Result
from .errors import (Aborted, Cancelled, Conflict, DataLoss, DeadlineExceeded, Error, FailedPrecondition, Internal,
                     InvalidArgument, NotFound, PayloadTooLarge, PermissionDenied, ResourceExhausted,
                     Unauthenticated, Unavailable)
from .files import FileInfo, Files
from .ports import Port, Ports, PortURL
from .sandbox import Checkpoint, Sandbox

__version__ = "1.0.0"

__all__ = [
    "Client", "Sandboxes", "Sandbox", "Command", "Event", "Result", "Files", "FileInfo", "Checkpoint",
    "Ports", "Port", "PortURL",
    "Templates", "Template", "Secrets", "Secret", "DEFAULT_URL",
    "Error", "InvalidArgument", "Unauthenticated", "PermissionDenied", "NotFound", "Conflict",
    "FailedPrecondition", "PayloadTooLarge", "ResourceExhausted", "Internal", "Unavailable", "DataLoss",
    "DeadlineExceeded", "Aborted", "Cancelled",
]
