"""STUN/TURN for WebRTC calls (``ingress.webrtc.ice_servers``): credentials come from the
environment, the page is given only what it may have, and the server really gathers a relay
candidate through a TURN server (Debian's coturn, on loopback)."""

import contextlib
import os
import shutil
import socket
import struct
import subprocess
from collections.abc import Iterator

import pytest
from aiortc import RTCPeerConnection

from deployments.realtime.transports.config import IceServer
from deployments.realtime.transports.webrtc import IceServers, WebRTCTransport
from loadtest.client.webrtc_call import Microphone

USER, PASSWORD = "s2s", "secret-for-the-test"


def test_credentials_come_from_the_environment_and_the_page_gets_only_its_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TURN_FOR_TEST", PASSWORD)
    servers = IceServers.from_config(
        [
            IceServer(urls=["stun:stun.example.com:3478"]),
            IceServer(urls=["turn:turn.example.com:3478"], username=USER, credential_env="TURN_FOR_TEST"),
            IceServer(
                urls=["turn:internal:3478"], username="server", credential_env="TURN_FOR_TEST", offer_to_page=False
            ),
        ]
    )
    assert [s.credential for s in servers.for_server] == [None, PASSWORD, PASSWORD]
    assert servers.for_page == [
        {"urls": ["stun:stun.example.com:3478"]},
        {"urls": ["turn:turn.example.com:3478"], "username": USER, "credential": PASSWORD},
    ]
    with pytest.raises(RuntimeError, match="'TURN_UNSET'"):
        IceServers.from_config([IceServer(urls=["turn:x:3478"], username=USER, credential_env="TURN_UNSET")])


def wait_until_it_answers_stun(port: int, attempts: int = 150) -> None:
    """Send STUN binding requests until one is answered: the server is up (30 s at most: a
    loaded machine once took over 10 s to start coturn)."""
    request = struct.pack("!HHI12s", 0x0001, 0, 0x2112A442, os.urandom(12))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.settimeout(0.2)
        for _ in range(attempts):
            probe.sendto(request, ("127.0.0.1", port))
            with contextlib.suppress(TimeoutError):
                probe.recv(1024)
                return
    raise AssertionError(f"coturn never answered on port {port}")


@pytest.fixture
def turn_server() -> Iterator[int]:
    """coturn on a free loopback port, with one long-term user."""
    binary = shutil.which("turnserver")
    assert binary, "Debian's coturn is missing: make install-dev installs it"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["--listening-ip", "127.0.0.1", "--relay-ip", "127.0.0.1", "--listening-port", str(port)]
    args += ["--lt-cred-mech", "--user", f"{USER}:{PASSWORD}", "--realm", "s2s", "--no-tls", "--no-dtls"]
    # UDP only, as the test's ICE server URL: the probe found the port free for UDP, and a TCP
    # listener on it kept retrying its bind while another process held that TCP port (CI).
    args += ["--no-tcp", "--no-cli", "--allow-loopback-peers", "--log-file", "stdout"]
    server = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_it_answers_stun(port)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.parametrize("password", [PASSWORD, "a-wrong-password"])
async def test_the_server_gathers_a_relay_candidate_through_turn(
    turn_server: int, password: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURN_FOR_TEST", password)
    servers = IceServers.from_config(
        [IceServer(urls=[f"turn:127.0.0.1:{turn_server}?transport=udp"], username=USER, credential_env="TURN_FOR_TEST")]
    )
    caller = RTCPeerConnection()
    caller.addTrack(Microphone())
    caller.createDataChannel("oai-events")
    await caller.setLocalDescription(await caller.createOffer())
    transport, answer = await WebRTCTransport.answer_offer(caller.localDescription.sdp, servers.for_server)
    try:
        relayed = [line for line in answer.splitlines() if "typ relay" in line]
        if password == PASSWORD:
            assert relayed, f"no relay candidate in the answer:\n{answer}"
        else:  # the control: a refused credential gets no relay
            assert not relayed
    finally:
        await transport.close(1000, "test over")
        await caller.close()
