"""Voiced tone questions (``--voiced-tones``): the real silero VAD hears them, which it does
not hear a bare tone, and the synthetic STT still reads each one's number."""

import numpy as np
import pytest

from deployments.realtime.spoken_words import holds_a_real_word
from handlers.audio import REALTIME_RATE, SPEECH_RATE, pcm16_to_float, resample
from handlers.synthetic import ToneTranscriber
from handlers.vad import SpeechStopped, TurnDetection, VADState, VoiceActivityDetector
from loadtest.client.prompts import tone_prompts

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""


def heard(detector: VoiceActivityDetector, pcm16: bytes) -> tuple[list[SpeechStopped], np.ndarray]:
    audio = resample(pcm16_to_float(pcm16), REALTIME_RATE, SPEECH_RATE)
    silence = np.zeros(SPEECH_RATE, dtype=np.float32)
    events = detector.detect(VADState(TurnDetection()), np.concatenate([silence, audio, silence]))
    return [e for e in events if isinstance(e, SpeechStopped)], audio


@pytest.mark.parametrize("number", [0, 42, 99])
def test_silero_hears_a_voiced_tone_and_the_stt_reads_its_number(number: int) -> None:
    detector = VoiceActivityDetector()
    stops, audio = heard(detector, tone_prompts(voiced=True).prompts[number].pcm16)
    assert len(stops) == 1 and not stops[0].too_short
    assert ToneTranscriber().transcribe(audio) == f"Question {number}."
    bare_stops, _ = heard(detector, tone_prompts().prompts[number].pcm16)
    assert bare_stops == []  # why the voice is needed: silero hears no speech in a tone


@pytest.mark.parametrize("voiced", [False, True])
def test_the_backchannel_hum_is_heard_as_one_from_its_first_300_ms(voiced: bool) -> None:
    backchannel = tone_prompts(voiced).backchannel
    assert backchannel is not None
    audio = resample(pcm16_to_float(backchannel.pcm16), REALTIME_RATE, SPEECH_RATE)
    for heard_so_far in (audio[: int(0.3 * SPEECH_RATE)], audio):  # the gate's first look, and all of it
        transcript = ToneTranscriber().transcribe(heard_so_far)
        assert transcript == "Mm-hmm." and not holds_a_real_word(transcript)
    if voiced:
        stops, _ = heard(VoiceActivityDetector(), backchannel.pcm16)
        assert len(stops) == 1 and not stops[0].too_short


@pytest.mark.parametrize("gap_s", [0.0, 0.2])
@pytest.mark.parametrize("voiced", [False, True])
def test_a_hum_and_then_a_question_in_one_utterance_are_both_heard(voiced: bool, gap_s: float) -> None:
    """As a real STT hears the words after a "mm-hmm": the interruption gate then takes the
    utterance for a real interruption, not a backchannel (hearing only the first tone, it
    dismissed the question with the hum, and the question went unanswered)."""
    prompts = tone_prompts(voiced)
    assert prompts.backchannel is not None
    gap = bytes(2 * int(gap_s * REALTIME_RATE))
    pcm16 = prompts.backchannel.pcm16 + gap + prompts.prompts[84].pcm16
    transcript = ToneTranscriber().transcribe(resample(pcm16_to_float(pcm16), REALTIME_RATE, SPEECH_RATE))
    assert transcript == "Mm-hmm. Question 84." and holds_a_real_word(transcript)


def test_a_question_paused_mid_tone_is_heard_once() -> None:
    for prompt in tone_prompts().paused:
        audio = resample(pcm16_to_float(prompt.pcm16), REALTIME_RATE, SPEECH_RATE)
        assert ToneTranscriber().transcribe(audio) == prompt.text
