"""The μ-law round trip on Piper's voice: what a phone caller hears of the answers.

Piper speaks each sentence (24 kHz PCM16, as the TTS stage gives it); the answer's encoder
(``deployments.realtime.transports.wire_audio``, the one the Twilio route and ``audio/pcmu`` use) makes
8 kHz μ-law of it, frame by frame; faster-whisper reads it back. The same sentences are read
back from the 24 kHz audio too, so the cost of the phone's band shows apart from tiny.en's own
mishearings. Prints one JSON object: the corpus's word error both ways.

    s2s-bench mulaw
"""

import argparse
import json

import jiwer
import numpy as np

from deployments.realtime.transports.wire_audio import PCMU, AnswerEncoder
from handlers.audio import REALTIME_RATE, SPEECH_RATE, pcm16_to_float, resample
from handlers.stt import SpeechToText
from handlers.tts import TextToSpeech
from loadtest import options

SENTENCES = [
    "The capital of France is Paris.",
    "I can help you with your booking today.",
    "Your appointment is on Tuesday at three in the afternoon.",
    "Please hold on while I check that for you.",
    "The weather will be sunny with a light breeze.",
    "Thank you for calling, have a wonderful day.",
    "Could you tell me your account number, please?",
    "Water boils at one hundred degrees Celsius at sea level.",
    "The train to London leaves from platform four.",
    "I have sent a confirmation to your email address.",
]
FRAME_BYTES = 4800
"""100 ms at 24 kHz PCM16: the server's default ``audio_delta_ms``."""


def normalise(text: str) -> str:
    return str(jiwer.RemovePunctuation()(text.lower())).strip()


def over_the_phone(pcm16: bytes) -> np.ndarray:
    """24 kHz PCM16 through the answer's μ-law encoder and back, at the STT's rate."""
    encoder = AnswerEncoder()
    frames = [pcm16[offset : offset + FRAME_BYTES] for offset in range(0, len(pcm16), FRAME_BYTES)] + [b""]
    mulaw = b"".join(encoder.encode("answer", PCMU, frame) for frame in frames)
    return resample(PCMU.samples(mulaw), PCMU.rate, SPEECH_RATE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sentences", type=options.positive_int, default=len(SENTENCES), help="how many of the test sentences"
    )


def main(args: argparse.Namespace) -> None:
    tts, stt = TextToSpeech(), SpeechToText()
    said, wideband, phone = [], [], []
    for sentence in SENTENCES[: args.sentences]:
        pcm16 = b"".join(chunk.pcm16 for chunk in tts.synthesize(sentence))
        said.append(normalise(sentence))
        wideband.append(normalise(stt.transcribe(resample(pcm16_to_float(pcm16), REALTIME_RATE, SPEECH_RATE))))
        phone.append(normalise(stt.transcribe(over_the_phone(pcm16))))
    report = {
        "sentences": len(said),
        "wer_24khz": round(jiwer.wer(said, wideband), 3),
        "wer_mulaw_8khz": round(jiwer.wer(said, phone), 3),
        "misheard_over_the_phone": [(s, p) for s, p in zip(said, phone, strict=True) if s != p],
    }
    print(json.dumps(report))
