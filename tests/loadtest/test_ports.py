"""Ports for the servers a launch or a test starts (``deployments.ports``): free, outside
the kernel's ephemeral range (where outgoing connections take theirs), never twice."""

import socket

import pytest

from deployments.ports import EPHEMERAL_RANGE, FIRST_PORT, free_port

pytestmark = pytest.mark.fast


def test_ports_are_free_outside_the_ephemeral_range_and_never_twice() -> None:
    ephemeral_start = int(EPHEMERAL_RANGE.read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(FIRST_PORT <= port < ephemeral_start for port in ports)
    with socket.socket() as server:
        server.bind(("127.0.0.1", ports[0]))  # free indeed
        server.listen()
