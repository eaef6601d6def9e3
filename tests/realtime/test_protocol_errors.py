"""Refusals say what is wrong in the protocol's terms, never the SDK's class paths."""

import json
from typing import Any

import pytest

from deployments.realtime.protocol import GA_HINT, ProtocolError, parse_client_event


def refused(event: dict[str, Any]) -> ProtocolError:
    with pytest.raises(ProtocolError) as error:
        parse_client_event(json.dumps(event))
    return error.value


def test_a_bad_value_is_named_by_its_protocol_path() -> None:
    error = refused(
        {
            "type": "session.update",
            "session": {"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
        }
    )
    assert error.param == "session.audio.input.format.rate"
    assert error.message == "Input should be 24000 at 'session.audio.input.format.rate'"


def test_a_union_names_what_each_kind_would_take() -> None:
    error = refused({"type": "conversation.item.create", "item": {"type": "message", "role": "usr", "content": []}})
    assert error.param == "item.role"
    assert "'system' or 'user' or 'assistant'" in error.message
    assert "Realtime" not in error.message


def test_a_beta_protocol_client_is_told_the_server_speaks_ga() -> None:
    beta = refused({"type": "session.update", "session": {"modalities": ["audio"], "input_audio_format": "pcm16"}})
    assert beta.param == "session.type" and GA_HINT in beta.message
    assert GA_HINT in refused({"type": "transcription_session.update", "session": {}}).message
    ga = refused({"type": "session.update", "session": {"type": "realtime", "output_modalities": "audio"}})
    assert GA_HINT not in ga.message
