"""``make run``'s launcher: ready only when every model answers; Ctrl-C closes the open
sessions with 1001 and ends every process of the app within 15 s (synthetic engines, whose
LLM takes seconds to load, on a Ray cluster of the launcher's own)."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml
from websockets.asyncio.client import connect

STOP_LIMIT_S = 15.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_ctrl_c_closes_sessions_then_ends_every_process_within_15_s(tmp_path: Path) -> None:
    tiny = {"num_cpus": 0.01}
    args = {
        "synthetic": {"llm_load_s": 5},
        "ingress": {"max_sessions": 2, "deployment": {**tiny, "max_ongoing_requests": 4}, "shutdown_poll_s": 1.0},
        **{stage: {"deployment": tiny} for stage in ("vad", "stt", "llm", "tts")},
    }
    app = {"name": "voice", "route_prefix": "/", "import_path": "deployments.app:build_app", "args": args}
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"proxy_location": "HeadOnly", "applications": [app]}))
    port = free_port()
    launcher = subprocess.Popen(
        [sys.executable, "-m", "deployments.serve_local", str(config), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives `make run`
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    app_processes: list[psutil.Process] = []
    try:
        assert launcher.stdout is not None
        lines = await asyncio.to_thread(read_until, launcher.stdout, "Voice agent ready", 240)
        async with connect(f"ws://127.0.0.1:{port}/v1/realtime") as client:
            assert json.loads(await client.recv())["type"] == "session.created"
            app_processes = psutil.Process(launcher.pid).children(recursive=True)
            assert len(app_processes) > 5  # Ray's head processes, replicas, scope hosts
            started = time.monotonic()
            os.killpg(launcher.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
            await asyncio.wait_for(client.wait_closed(), STOP_LIMIT_S)
        assert client.close_code == 1001
        await asyncio.to_thread(launcher.wait, STOP_LIMIT_S)
        gone, alive = psutil.wait_procs(app_processes, timeout=max(0.0, started + STOP_LIMIT_S - time.monotonic()))
        elapsed = time.monotonic() - started
        assert alive == [], f"still running {elapsed:.1f} s after Ctrl-C: {[p.pid for p in alive]}"
        assert elapsed <= STOP_LIMIT_S
        print(json.dumps({"ctrl_c_to_all_processes_gone_s": round(elapsed, 2), "processes": len(gone)}))
        assert "stopped in" in launcher.stdout.read()
        assert not any("Traceback" in line for line in lines)
    finally:  # whatever the outcome, nothing of it outlives the test
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        for process in app_processes:
            try:
                process.kill()
            except psutil.Error:
                pass


def read_until(stream, marker: str, timeout_s: float) -> list[str]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    lines = []
    for line in stream:
        lines.append(line)
        if marker in line:
            return lines
        assert time.monotonic() < deadline, "".join(lines[-30:])
    raise AssertionError("the launcher exited before it was ready:\n" + "".join(lines[-30:]))
