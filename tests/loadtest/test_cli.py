"""The load test's command line: bad arguments get a clear message, no server a clear error."""

import socket

import pytest

from loadtest.cli import main

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""

URL = "ws://127.0.0.1:1/v1/realtime"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sessions", "2", "--out", "r.json"], "--url"),
        (["--url", URL, "--sessions", "0", "--out", "r.json"], "must be above 0"),
        (["--url", URL, "--sessions", "2", "--interrupt-rate", "1.5", "--out", "r.json"], "probability"),
        (
            ["--url", URL, "--sessions", "2", "--interrupt-rate", "0.7", "--cancel-rate", "0.5", "--out", "r.json"],
            "add up to more than 1",
        ),
        (["--url", "http://x/v1/realtime", "--sessions", "2", "--out", "r.json"], "ws:// or wss://"),
        (["--url", URL, "--sessions", "two", "--out", "r.json"], "invalid"),
    ],
)
def test_bad_arguments_get_a_clear_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["load", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_no_server_is_a_clear_error(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    assert main(["load", "--url", url, "--sessions", "1", "--out", str(tmp_path / "r.json")]) == 2
    assert f"no Realtime server answers at {url}" in capsys.readouterr().err
