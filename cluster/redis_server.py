"""A local ``redis-server`` (Debian's, which ``make install-dev`` installs) for the tests and
the cluster-swap scenario: what the ``redis`` session store points at on a cluster, here
started and stopped by whoever needs it. Nothing is written to disk."""

import shutil
import subprocess
import time
from types import TracebackType

import redis

from deployments.ports import free_port

READY_TIMEOUT_S = 10.0


class RedisServer:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        """Starts the server and returns once it answers."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: `make install-dev` installs it (apt, as root)")
        command = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)
        client.close()
        return self

    def stop(self) -> None:
        """Stops the server; everything it held is gone."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=10)
        self._process = None

    def restart(self) -> None:
        """Stops the server and starts an empty one on the same port (a lost Redis pod)."""
        self.stop()
        self.start()

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.stop()
