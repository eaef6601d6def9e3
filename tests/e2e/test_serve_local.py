"""``make run``'s launcher: ready only when every model answers; Ctrl-C (or SIGTERM) closes
the open sessions with 1001 and ends every process of the app within 15 s (synthetic engines,
whose LLM takes seconds to load, on a Ray cluster of the launcher's own), on its default data
path, Ray's HAProxy, whose processes Ray can leave running, port held, once their manager
actor is gone (docs/haproxy.md); even a launcher killed outright leaves none of them."""

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from websockets.asyncio.client import connect

from deployments.ports import free_port

pytestmark = pytest.mark.cluster
"""Ray clusters (or launchers) of its own, synthetic engines: only ``make test`` runs these."""

STOP_LIMIT_S = 15.0


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.load(reply)


def start_launcher(tmp_path: Path, port: int, data_path: str) -> subprocess.Popen[str]:
    tiny = {"num_cpus": 0.01}
    args = {
        "synthetic": {"llm_load_s": 5},
        "ingress": {"max_sessions": 2, "deployment": {**tiny, "max_ongoing_requests": 4}, "shutdown_poll_s": 1.0},
        **{stage: {"deployment": tiny} for stage in ("vad", "stt", "llm", "tts")},
    }
    app = {"name": "voice", "route_prefix": "/", "import_path": "deployments.app:build_app", "args": args}
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"proxy_location": "HeadOnly", "applications": [app]}))
    # The launcher's own HAProxy settings (its file paths, free ports), not any of this shell's.
    environ = {name: value for name, value in os.environ.items() if not name.startswith("RAY_SERVE_")}
    return subprocess.Popen(
        [sys.executable, "-m", "deployments.serve_local", str(config), "--port", str(port), "--data-path", data_path],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives `make run`
        env={**environ, "RAY_ADDRESS": ""},
    )


@pytest.mark.parametrize(
    ("data_path", "how"),
    # Ctrl-C on `make run` (HAProxy, every process of the group signalled) and a supervisor's
    # SIGTERM (the launcher alone, which must then end HAProxy itself). Serve's Python proxy
    # stops through the same launcher code, less HAProxy; its sessions' 1001 close is
    # test_ingress_edges.py's shutdown test.
    [("haproxy", "ctrl-c"), ("haproxy", "sigterm")],
    ids=["haproxy", "haproxy-sigterm"],
)
async def test_ctrl_c_closes_sessions_then_ends_every_process_within_15_s(
    tmp_path: Path, data_path: str, how: str
) -> None:
    port = free_port()
    launcher = start_launcher(tmp_path, port, data_path)
    app_processes: list[psutil.Process] = []
    haproxy_dirs: set[Path] = set()
    try:
        assert launcher.stdout is not None
        lines = await asyncio.to_thread(read_until, launcher.stdout, "Voice agent ready", 240)
        async with connect(f"ws://127.0.0.1:{port}/v1/realtime") as client:
            assert json.loads(await client.recv())["type"] == "session.created"
            app_processes = psutil.Process(launcher.pid).children(recursive=True)
            assert len(app_processes) > 5  # Ray's head processes, replicas, scope hosts
            haproxy_dirs = check_data_path(app_processes, port, data_path)
            # Behind HAProxy, Ray's high-throughput mode: calls to the models over gRPC.
            stats = await asyncio.to_thread(get_json, f"http://127.0.0.1:{port}/stats")
            assert stats["calls_over"] == ("grpc" if data_path == "haproxy" else "ray")
            # Read from the controller's details as they come (no pydantic rebuild per call).
            assert {name: count for name, count in stats["replicas"].items() if name != "TTS"} == {
                "RealtimeIngress": 1,
                "STT": 1,
                "LLM": 1,
            }
            assert stats["replicas"]["TTS"] >= 1
            started = time.monotonic()
            if how == "ctrl-c":
                os.killpg(launcher.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
            else:
                launcher.terminate()  # what `kill PID` or a supervisor does
            await asyncio.wait_for(client.wait_closed(), STOP_LIMIT_S)
        assert client.close_code == 1001
        await asyncio.to_thread(launcher.wait, STOP_LIMIT_S)
        gone, alive = psutil.wait_procs(app_processes, timeout=max(0.0, started + STOP_LIMIT_S - time.monotonic()))
        elapsed = time.monotonic() - started
        assert alive == [], f"still running {elapsed:.1f} s after Ctrl-C: {[p.pid for p in alive]}"
        assert elapsed <= STOP_LIMIT_S
        # Also those started after the snapshot (HAProxy starts a process on every reload,
        # deleting the app is one) and orphaned out of the launcher's tree by now.
        assert [p.cmdline() for p in processes_under(haproxy_dirs)] == []
        assert not any(d.exists() for d in haproxy_dirs)
        assert port_is_free(port)
        timing = {"data_path": data_path, "stop": how, "to_all_processes_gone_s": round(elapsed, 2)}
        print(json.dumps({**timing, "processes": len(gone)}))
        assert launcher.returncode == 0
        output = lines + launcher.stdout.read().splitlines()
        assert any("stopped in" in line for line in output)
        # A clean log is part of a clean stop: nothing at ERROR, no traceback.
        assert [line for line in output if "Traceback" in line or " ERROR " in line] == []
    finally:  # whatever the outcome, nothing of it outlives the test
        kill_all(launcher, app_processes + processes_under(haproxy_dirs), haproxy_dirs)


async def test_a_launcher_killed_outright_with_its_raylet_leaves_no_haproxy(tmp_path: Path) -> None:
    """The raylet kills a dead worker's process group, HAProxy included; killed first (the
    OOM killer, say), it leaves HAProxy running, port held, and a SIGKILLed launcher runs no
    handler. Its reaper, a process of its own that Ray never sees, kills them once the
    launcher's end closes its pipe."""
    port = free_port()
    launcher = start_launcher(tmp_path, port, "haproxy")
    app_processes: list[psutil.Process] = []
    haproxy_dirs: set[Path] = set()
    try:
        assert launcher.stdout is not None
        await asyncio.to_thread(read_until, launcher.stdout, "Voice agent ready", 240)
        app_processes = psutil.Process(launcher.pid).children(recursive=True)
        haproxy_dirs = check_data_path(app_processes, port, "haproxy")
        (raylet,) = [p for p in app_processes if p.name() == "raylet"]
        raylet.kill()  # it can clean up no process group now
        launcher.kill()
        deadline = time.monotonic() + STOP_LIMIT_S
        while processes_under(haproxy_dirs) or any(d.exists() for d in haproxy_dirs):
            assert time.monotonic() < deadline, [p.cmdline() for p in processes_under(haproxy_dirs)]
            await asyncio.sleep(0.2)  # polling the process table: there is no event for another's end
        assert port_is_free(port)
    finally:
        kill_all(launcher, app_processes + processes_under(haproxy_dirs), haproxy_dirs)


def check_data_path(app_processes: list[psutil.Process], port: int, data_path: str) -> set[Path]:
    """That ``port`` is HAProxy's, started by Ray in the launcher's tree, or that there is no
    HAProxy; the launch directories of the HAProxy processes."""
    haproxies = [p for p in app_processes if p.name() == "haproxy"]
    if data_path == "proxy":
        assert haproxies == []
        return set()
    assert any(listens_on(p, port) for p in haproxies), [p.cmdline() for p in haproxies]
    return {launch_directory(p) for p in haproxies}


def read_until(stream, marker: str, timeout_s: float) -> list[str]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    lines = []
    for line in stream:
        lines.append(line)
        if marker in line:
            return lines
        assert time.monotonic() < deadline, "".join(lines[-30:])
    raise AssertionError("the launcher exited before it was ready:\n" + "".join(lines[-30:]))


def listens_on(process: psutil.Process, port: int) -> bool:
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in process.net_connections("tcp"))


def launch_directory(haproxy: psutil.Process) -> Path:
    """``haproxy -db -f <launch directory>/<node id>/haproxy.cfg …``: the launcher's own."""
    cmdline = haproxy.cmdline()
    return Path(cmdline[cmdline.index("-f") + 1]).parent.parent


def processes_under(directories: set[Path]) -> list[psutil.Process]:
    """Every process on the machine whose command line names a file in one of ``directories``."""
    prefixes = tuple(f"{d}{os.sep}" for d in directories)
    if not prefixes:
        return []
    return [p for p in psutil.process_iter(["cmdline"]) if any(a.startswith(prefixes) for a in p.info["cmdline"] or ())]


def port_is_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now (as servers do: with SO_REUSEADDR)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
            probe.listen()
        except OSError:
            return False
    return True


def kill_all(launcher: subprocess.Popen[str], processes: list[psutil.Process], directories: set[Path]) -> None:
    if launcher.poll() is None:
        os.killpg(launcher.pid, signal.SIGKILL)
    for process in processes:  # the launcher's reaper among them, if a test failed early
        with contextlib.suppress(psutil.Error):
            process.kill()
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)
