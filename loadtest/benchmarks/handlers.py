"""Per-handler speed on this machine with the real CPU models.

Prints readable lines, then one JSON object on the last line:
VAD ms per 512-sample chunk, STT real-time factor, LLM time to first token and tokens/s,
TTS time to first chunk and real-time factor.
"""

import argparse
import json
import statistics
import time

import numpy as np

from handlers.audio import SPEECH_RATE, pcm16_to_float, resample
from handlers.llm import LanguageModel
from handlers.stt import SpeechToText
from handlers.tts import TextToSpeech
from handlers.vad import CHUNK_SAMPLES, TurnDetection, VADState, VoiceActivityDetector

SPEECH = (
    "Good morning. I would like to know what the weather will be like this weekend, "
    "because we are planning a long walk by the sea with the children and the dog."
)
PROMPTS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Why is the sky blue?",
]


def bench_tts(tts: TextToSpeech, repeats: int = 3) -> tuple[dict, np.ndarray]:
    first_chunk, rtf = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        chunks: list[bytes] = []
        for chunk in tts.synthesize(SPEECH):
            if not chunks:
                first_chunk.append((time.perf_counter() - started) * 1000)
            chunks.append(chunk.pcm16)
        elapsed = time.perf_counter() - started
        pcm = b"".join(chunks)
        rtf.append(elapsed / (len(pcm) / 2 / tts.config.output_rate))
    speech = resample(pcm16_to_float(pcm), tts.config.output_rate, SPEECH_RATE)
    return {
        "tts_first_chunk_ms": round(statistics.median(first_chunk), 1),
        "tts_rtf": round(statistics.median(rtf), 4),
    }, speech


def bench_vad(vad: VoiceActivityDetector, speech: np.ndarray) -> dict:
    state = VADState(TurnDetection())
    chunks = len(speech) // CHUNK_SAMPLES
    started = time.perf_counter()
    vad.detect(state, speech[: chunks * CHUNK_SAMPLES])
    return {"vad_ms_per_chunk": round((time.perf_counter() - started) * 1000 / chunks, 3)}


def bench_stt(stt: SpeechToText, speech: np.ndarray, repeats: int = 3) -> dict:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        stt.transcribe(speech)
        times.append(time.perf_counter() - started)
    return {
        "stt_rtf": round(statistics.median(times) / (len(speech) / SPEECH_RATE), 4),
        "stt_audio_s": round(len(speech) / SPEECH_RATE, 2),
    }


async def bench_llm(llm: LanguageModel) -> dict:
    started = time.perf_counter()
    await llm.warm_up()  # what a fresh engine's first requests cost (a replica pays it before ready)
    warm_up_ms = (time.perf_counter() - started) * 1000
    tokenizer = llm.engine.get_tokenizer()
    ttft, rates = [], []
    for prompt in PROMPTS * 2:
        started = time.perf_counter()
        first = None
        reply = ""
        async for delta in llm.stream([{"role": "user", "content": prompt}]):
            first = first or time.perf_counter()
            if isinstance(delta, str):  # no tools, so no calls: text, and maybe the cap's cut
                reply += delta
        assert first is not None, f"no reply to {prompt!r}"
        elapsed = time.perf_counter() - first
        ttft.append((first - started) * 1000)
        tokens = len(tokenizer.encode(reply, add_special_tokens=False))
        if tokens > 1 and elapsed > 0:
            rates.append((tokens - 1) / elapsed)
    return {
        "llm_warm_up_ms": round(warm_up_ms, 1),
        "llm_ttft_ms": round(statistics.median(ttft), 1),
        "llm_tokens_per_s": round(statistics.median(rates), 1),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """None: each handler is timed at the sizes its figures were always given at."""


async def main(args: argparse.Namespace) -> None:
    tts_result, speech = bench_tts(TextToSpeech())
    print(f"TTS: {tts_result}", flush=True)
    vad_result = bench_vad(VoiceActivityDetector(), speech)
    print(f"VAD: {vad_result}", flush=True)
    stt_result = bench_stt(SpeechToText(), speech)
    print(f"STT: {stt_result}", flush=True)
    llm = LanguageModel.create()
    try:
        llm_result = await bench_llm(llm)
    finally:
        llm.shutdown()
    print(f"LLM: {llm_result}", flush=True)
    print(json.dumps({**vad_result, **stt_result, **llm_result, **tts_result}))
