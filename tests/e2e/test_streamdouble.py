"""Phone calls placed by a Twilio side nobody here wrote: ``streamdouble`` (PyPI, Apache-2.0), a
Twilio Media Streams simulator, on ``/v1/twilio/media-stream`` of the suite's app on the real
models. It opens as Twilio does (``connected``, ``start`` with the TwiML's parameters), sends
20 ms μ-law frames paced in real time, plays the agent's audio on a clock of its own and echoes
each ``mark`` when the audio before it has played, and ends a call with ``stop``.

Two calls: a question answered in speech (``streamdouble.api.call``, its plain call, with the
greeting off: ``greeting=""``), and a scripted barge-in (a ``streamdouble`` scenario): the caller
speaks over the call's greeting, and the server sends ``clear``. What the 135M model says varies,
so they assert the protocol's shape: audio came, and it is speech; a ``clear`` came after the
caller spoke, not before, and emptied audio still to play; the call ended with the caller's
``stop``, not the server's close.

A real line carries a frame every 20 ms for the whole call, silence included, and the server's
VAD ends a turn on that trailing silence. A scenario's waits stream silence; a plain call sends
its file and then nothing, so its file ends in ``TRAILING_SILENCE_S`` of silence.

What streamdouble 0.3.0 cannot do, and these work around: its ``wait_for: audio`` and ``mark``
are the call's first audio and first echo (a later answer cannot be waited for), and no step
waits for a mark by name (our ``response.done`` after an answer), so a call ends on its quiet
period. On a ``clear`` it drops the marks still queued, where Twilio echoes them; the server
forgets its marks on a ``clear``, so either is the same to it.
"""

import json
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from realtime_client import normalise
from streamdouble import api, scenario
from streamdouble.session import SessionConfig

from deployments.realtime.transports.wire_audio import PCMU
from handlers.audio import SPEECH_RATE, float_to_pcm16, resample
from handlers.stt import SpeechToText

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

NO_GREETING = {"greeting": ""}
"""The TwiML ``<Parameter>``s of the answered call: no greeting, so the first audio is the answer
(the suite's app has no API key, so a call needs no ``client_secret``)."""
GREETING = (
    "Hello, and thank you for calling the village bakery. We bake bread, cakes and pies every morning, "
    "and we are open from seven in the morning until six in the evening, every day but Sunday. "
    "Please tell me how I can help you today."
)
"""The barge-in call's own greeting (its TwiML parameter ``greeting``): about 12 s, so it is still
playing when the barge-in is heard (1-2.5 s after the caller starts, on 2 busy cores). Not an
answer's audio: a line is synthesised at once, far faster than it plays, while an answer's
sentences came about as fast as they played there, each one's lead down to 0.05-0.4 s before the
next, and a barge-in heard in such a gap has nothing left to clear."""
TRAILING_SILENCE_S = 2.5
"""The silence after the plain call's question: the VAD's end of turn, with room to spare."""
ANSWER_TIMEOUT_S = 60.0
"""For the first audio of an answer, and for the ``clear`` (on 2 shared cores, models warm)."""
HANG_UP_AFTER_S = 10.0
"""The caller hangs up (``stop``) this long after the agent began at the latest: answers in the
suite ramble for up to ~25 s, and no test waits for one to be heard out."""
QUIET_S = 5.0
"""Or sooner, once the answer has played and no more audio came for this long: well past the
server's pauses between the sentences of an answer on 2 busy cores (with 1 s, one call hung up
one second into its answer; with 3 s, one after its first three words)."""


def stream_url(realtime_url: str) -> str:
    return f"{realtime_url}/twilio/media-stream"


def config(parameters: dict[str, str], quiet_s: float = QUIET_S) -> SessionConfig:
    return SessionConfig(
        custom_parameters=parameters,
        response_timeout_s=ANSWER_TIMEOUT_S,
        quiet_period_s=quiet_s,
        max_drain_s=HANG_UP_AFTER_S,
        max_call_s=180.0,
    )


@pytest.fixture
def clip(speak: Callable[..., np.ndarray], tmp_path: Path) -> Callable[..., Path]:
    """Piper speaking ``text`` into an 8 kHz 16-bit WAV (the line's rate: streamdouble
    resamples nothing), with ``trailing_s`` more silence after it."""

    def _clip(text: str, silence_s: float = 0.5, trailing_s: float = 0.0) -> Path:
        speech = np.concatenate([speak(text, silence_s), np.zeros(int(trailing_s * SPEECH_RATE), np.float32)])
        path = tmp_path / f"{normalise(text).replace(' ', '_')[:40]}.wav"
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(PCMU.rate)
            out.writeframes(float_to_pcm16(resample(speech, SPEECH_RATE, PCMU.rate)))
        return path

    return _clip


def assert_ended_by_the_caller(report: api.CallReport) -> None:
    """No protocol violation, no message Twilio does not know, no ``expect`` failed, and the
    call ran to its end: the caller sent ``stop``, the server did not close first."""
    shape = report.to_dict()
    assert report.violations == [] and report.result.unknown_events == [], shape
    assert report.result.failed_expectations == [], shape
    assert report.result.closed_by is None, shape
    assert report.result.events_of("sent_stop"), shape


async def test_a_streamdouble_call_is_answered_in_speech(
    realtime_url: str, clip: Callable[..., Path], stt: SpeechToText
) -> None:
    question = clip("What is the capital of France?", trailing_s=TRAILING_SILENCE_S)
    report = await api.call(stream_url(realtime_url), audio_path=question, config=config(NO_GREETING))
    assert report.spoke, report.to_dict()
    heard = stt.transcribe(resample(PCMU.samples(report.audio_received), PCMU.rate, SPEECH_RATE))
    assert normalise(heard), "the answer is speech (the 135M model's may be one word)"
    assert report.result.marks_echoed, "each answer frame's mark is echoed once it has played"
    assert report.result.clears_received == 0, "nobody spoke over the answer"
    assert_ended_by_the_caller(report)
    timing = {"streamdouble_first_audio_ms": report.time_to_first_audio_ms, "answer_s": report.result.audio_duration_s}
    print(json.dumps({**timing, "heard": heard}))


async def test_a_streamdouble_scenario_barges_in_over_the_greeting_and_the_server_clears(
    realtime_url: str, clip: Callable[..., Path], tmp_path: Path
) -> None:
    """The caller is silent (the scenario streams silence) until the greeting begins, then
    speaks over it; hung up once the greeting has gone quiet, not waiting for the answer."""
    script = {
        "name": "barge-in over the greeting",
        "steps": [
            {"wait_for": {"event": "audio", "timeout": ANSWER_TIMEOUT_S}},
            {"say": str(clip("Stop. What is the capital of Italy?", silence_s=0.2))},
            {"wait_for": {"event": "clear", "timeout": ANSWER_TIMEOUT_S}},
            {"expect": "clear"},
        ],
    }
    report = await api.run_scenario(
        stream_url(realtime_url),
        scenario.parse(script, base_dir=tmp_path),
        config=config({"greeting": GREETING}, quiet_s=1.0),
    )
    shape = report.to_dict()
    assert report.spoke, shape
    [spoke_over] = [e.at for e in report.result.events_of("wait_for_satisfied") if e.detail["event"] == "audio"]
    clears = report.result.events_of("clear_received")
    assert clears, shape
    assert clears[0].at > spoke_over, "no clear before the caller spoke over the greeting"
    assert clears[0].detail["dropped_marks"], "the clear emptied audio still to play"
    assert_ended_by_the_caller(report)
    print(json.dumps({"streamdouble_barge_in_to_clear_ms": round((clears[0].at - spoke_over) * 1000)}))
