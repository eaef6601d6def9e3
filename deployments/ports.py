"""Free TCP ports for the servers a launch, a benchmark or a test starts on this machine.

A port the kernel hands out (``bind`` to port 0) lies in its ephemeral range, which is also
where every outgoing connection takes its local port: between the pick and the server's own
``bind``, one of Ray's many connections can take it (a CI run failed so: Serve's proxy could
not bind the port picked for it). Ports are picked below that range instead, and above Ray's
worker ports (10002-19999 by default), never twice in one process.
"""

import random
import socket
from pathlib import Path

FIRST_PORT = 20_000
"""Above Ray's default ``max_worker_port`` (19999)."""
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now and no connection will take."""
    below = _ephemeral_start()
    for _ in range(1000):
        port = random.randrange(FIRST_PORT, below)
        if port in _handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port from {FIRST_PORT} to {below}")


def _ephemeral_start() -> int:
    try:
        return max(FIRST_PORT + 1000, int(EPHEMERAL_RANGE.read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default
