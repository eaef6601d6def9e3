"""One spoken turn through the four real models in one process, without Ray.

Piper speaks a question, silero-vad finds the utterance, faster-whisper transcribes it,
vLLM answers and Piper speaks the answer into a WAV file. Useful to check a machine can
run every model before starting the server.
"""

import argparse
import asyncio
import time
import wave

from handlers.audio import SPEECH_RATE, pcm16_to_float, resample
from handlers.instructions import VOICE_INSTRUCTIONS
from handlers.llm import LanguageModel
from handlers.stt import SpeechToText
from handlers.text import SpeechChunker
from handlers.tts import TextToSpeech
from handlers.utterance import VADSession
from handlers.vad import VoiceActivityDetector


async def run_turn(question: str, out_path: str) -> None:
    tts, stt, vad = TextToSpeech(), SpeechToText(), VoiceActivityDetector()
    llm = LanguageModel.create()
    try:
        spoken = b"".join(chunk.pcm16 for chunk in tts.synthesize(question))
        session = VADSession(vad)
        events = session.feed(resample(pcm16_to_float(spoken), tts.config.output_rate, SPEECH_RATE))
        events += session.flush()
        utterances = [audio for _event, audio in events if audio is not None]
        if not utterances:
            raise SystemExit("no speech detected in the spoken question")
        started = time.perf_counter()
        transcript = stt.transcribe(utterances[0])
        print(f"user said:  {transcript!r}")
        chunker, reply, cut_short = SpeechChunker(), "", False
        audio: list[bytes] = []
        asked = [{"role": "system", "content": VOICE_INSTRUCTIONS}, {"role": "user", "content": transcript}]
        async for delta in llm.stream(asked):
            if not isinstance(delta, str):  # no tools, so no calls: only the cap's cut
                cut_short = True
                continue
            reply += delta
            for piece in chunker.feed(delta):
                audio.extend(chunk.pcm16 for chunk in tts.synthesize(piece))
        audio.extend(chunk.pcm16 for piece in chunker.flush(cut_short) for chunk in tts.synthesize(piece))
        print(f"agent said: {reply!r} ({time.perf_counter() - started:.2f} s from end of speech)")
        with wave.open(out_path, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(tts.config.output_rate)
            wav.writeframes(b"".join(audio))
        print(f"reply audio: {out_path}")
    finally:
        llm.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("question", nargs="?", default="What is the capital of France?")
    parser.add_argument("--out", default="reply.wav")
    args = parser.parse_args()
    asyncio.run(run_turn(args.question, args.out))


if __name__ == "__main__":
    main()
