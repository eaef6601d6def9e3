"""Turn-taking as a person meets it: ``s2s-bench turns`` (JSON on the last line).

Piper-spoken audio at microphone pace into Realtime sessions of the app served from
``cluster/local.yaml`` (or ``--url``), under each turn-taking setting in ``MODES``:

- ``before``: ``server_vad`` as this server had it before interruptions were confirmed (and
  as OpenAI has it): every onset during an answer interrupts it (``min_duration_ms`` 0, no
  word check). ``semantic_vad`` was then this same 500 ms timer;
- ``server_vad``: the server's defaults now (interruptions confirmed: 150 ms and words);
- ``semantic_vad``: Smart Turn and the words (the LLM's ``message_ends``) at each 200 ms
  pause, with the same interruption rules.

Per mode:

- ``paused``: whole sentences cut at a word boundary with a ``loadtest.client.prompts.PAUSE_S`` pause put in
  (Smart Turn hears prosody: a fragment said alone would end like a statement);
  ``cut_off`` counts the sentences that became more than one turn;
- ``backchannels``: during a long answer, one of ``BACKCHANNELS`` or a cough (a noise burst),
  each ``--repeat`` times; ``answers_lost`` counts the answers cancelled, ``new_turns`` the
  turns it started, ``false_barge_ins`` (backchannels and coughs apart) those that barged in
  (``speech_started``, where a playing client stops, or the answer cancelled);
- ``interruptions``: during a long answer, a real one; ``missed`` counts those that did not
  cancel it; ``onset_to_done_ms``: from the first voiced frame sent to the cancelled
  ``response.done``; ``onset_to_last_heard_ms``: to the last sound of the answer for a
  client that plays the audio as it comes and stops at ``speech_started`` (a paced answer's
  send pauses at the candidate, so the client runs out of audio within the lead);
- ``voice_to_voice_ms``: end of a question's speech to the first audio delta of its answer,
  with the server's timeline of each step (``GET /stats/turns``, medians);
- ``webrtc``: the real interruptions (each ``--repeat`` times) and one backchannel, each over
  its own WebRTC call, where the server plays (and pauses) the answer: from the speech's first
  frame sent to the answer's sound stopping, what became of the answer, and when a new one
  began playing;
- ``phone``: the same scenarios over the Twilio media-stream route in 8 kHz μ-law, one call
  each (``full_duplex.bench_phone``): the real interruptions and the backchannels and cough
  (each ``--repeat`` times; a ``clear`` or a cancelled answer on a backchannel or cough is a
  false barge-in, neither on an interruption a missed one; onset → ``clear``, where Twilio
  stops playing, → the cancelled answer's ``response.done`` mark, and → the caller's last
  sound of it), and the paused sentences (cut off: more than one response).
  A Twilio call cannot send ``session.update``: each call's TwiML carries a client secret
  that opens its session with the mode's turn detection (``full_duplex.phone_parameters``,
  as an operator's backend would make it), and ``greeting`` "" (no greeting).
  ``fdb.phone_vs_24khz`` sets its counts beside the WebSocket's.

Each mode also gets an ``fdb`` object: Full-Duplex-Bench's four scenarios (pause handling,
backchannel, smooth turn-taking, user interruption) as take-over rates and p50/p95 latencies,
and onset → stopped per transport (``loadtest.benchmarks.full_duplex``). ``--noise-reduction``
puts ``audio.input.noise_reduction`` into every session's ``session.update`` (WebSocket and
WebRTC), so that a run with it can be set beside one without.

Client and server share this machine's cores, so ``interruptions`` and ``webrtc`` also say
how late the client's own event loop ran while each was measured (``client_loop_late_ms``,
``loadtest.client.loop_lag``): a figure with a late loop is partly the client's.
"""

import argparse
import asyncio
import base64
import contextlib
import functools
import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, resample
from loadtest import options
from loadtest.benchmarks import full_duplex
from loadtest.benchmarks.full_duplex import phone_table, to_mulaw
from loadtest.client.listener import last_heard
from loadtest.client.loop_lag import LoopLag
from loadtest.client.prompts import with_pause
from loadtest.client.spoken_turns import (
    LONG_QUESTION,
    QUESTIONS,
    Speaker,
    breakdown,
    new_round,
    server_timelines,
    session_input,
    silence,
    wait_for,
)
from loadtest.client.webrtc_call import Call
from loadtest.scenarios.launch import LOCAL_CONFIG, served
from loadtest.stats import percentile, percentiles

MODES: dict[str, dict[str, Any]] = {
    "before": {"type": "server_vad", "interruption": {"min_duration_ms": 0, "ignore_backchannels": False}},
    "server_vad": {"type": "server_vad"},
    "server_vad_unpaced": {"type": "server_vad", "interruption": {"audio_lead_ms": None}},
    "semantic_vad": {"type": "semantic_vad"},
}
PAUSED = [
    ("I would like to know", "the capital of France."),
    ("Can you tell me", "what color the sky is?"),
    ("I was wondering", "how many legs a dog has."),
    ("Please tell me", "the name of a yellow fruit."),
    ("I have been thinking about", "the tallest mountain in the world."),
    ("Could you remind me", "how many days there are in a week?"),
    ("I need to find out", "the capital city of Japan."),
    ("Do you happen to know", "what animal says moo?"),
    ("I would love to hear", "the color of a ripe banana."),
    ("Tell me please", "how many wheels a bicycle has."),
]
BACKCHANNELS = ["Yeah.", "Mm-hmm.", "Mm hmm.", "Uh-huh.", "Right.", "Okay.", None]
"""``None``: a cough (a noise burst of 0.4 s). Piper says "Mm-hmm." so that tiny.en hears
words ("Hey, no, no."); spaced, it hums ("MMMM.")."""
INTERRUPTIONS = [
    "Wait, stop.",
    "No, tell me about cats instead.",
    "Stop, please.",
    "Hold on, what is the capital of Germany?",
]


OBSERVE_S = 3.0
"""How long after the speech ended a round looks for what it caused (a decision takes at
most the speech plus one STT call; an incomplete turn waits up to 2 s under semantic_vad)."""
ANSWER_TIMEOUT_S = 30.0
"""How long a finished question's answer is waited for before the turn counts as not taken."""


def cough() -> bytes:
    """A noise burst of 0.4 s that decays, as a cough does."""
    samples = int(0.4 * SPEECH_RATE)
    burst = np.random.default_rng(7).standard_normal(samples) * np.exp(-np.linspace(0, 6, samples)) * 0.3
    return float_to_pcm16(resample(burst.astype(np.float32), SPEECH_RATE, REALTIME_RATE))


def paused_sentence(speaker: Speaker, first: str, rest: str) -> bytes:
    """The whole sentence spoken, with ``PAUSE_S`` put in between ``first`` and ``rest``."""
    paused, _ = with_pause(speaker.speech(f"{first} {rest}"), len(speaker.speech(first)) // 2)
    return paused


async def bench_paused(
    url: str, mode: dict[str, Any], speaker: Speaker, noise_reduction: str | None = None
) -> dict[str, Any]:
    """``cut_off``: sentences that became more than one turn; ``taken_over`` (FDB's pause
    handling): those, and any other in which a response began before the sentence's speech
    ended; ``spoke_over``: those in which the answer's audio came before it ended."""
    cut_off = taken_over = spoke_over = 0
    for first, rest in PAUSED:
        async with new_round(url, mode, noise_reduction) as round_:
            lead_in, sentence = silence(0.5), paused_sentence(speaker, first, rest)
            _, speech_end = await round_.send(lead_in + sentence + silence(OBSERVE_S), len(lead_in) + len(sentence))
            turns = round_.count("input_audio_buffer.committed")
            began = [s for s, e in round_.log if e.type == "response.created" and s < speech_end]
            heard = [s for s, e in round_.log if e.type == "response.output_audio.delta" and s < speech_end]
        cut_off += turns > 1
        taken_over += turns > 1 or bool(began)
        spoke_over += bool(heard)
        print(f"  paused '{first} | {rest}': {turns} turn(s), {len(began)} response(s) begun in it", flush=True)
    return {"sentences": len(PAUSED), "cut_off": cut_off, "taken_over": taken_over, "spoke_over": spoke_over}


async def bench_backchannels(
    url: str,
    mode: dict[str, Any],
    speaker: Speaker,
    into_s: float,
    repeat: int = 1,
    noise_reduction: str | None = None,
) -> dict[str, Any]:
    """Each of ``BACKCHANNELS`` said ``repeat`` times. ``taken_over`` (FDB's backchannel TOR):
    the answer was cancelled or a new response began after the backchannel;
    ``false_barge_ins``: it barged in (``speech_started``, where a playing client stops, as
    a phone stops at the ``clear``; or the answer cancelled), backchannels and coughs apart."""
    lost = new_turns = taken_over = 0
    barged = {"backchannel": 0, "cough": 0}
    for said in BACKCHANNELS * repeat:
        async with new_round(url, mode, noise_reduction) as round_:
            answer = await round_.answer_playing(speaker, into_s)
            since = time.perf_counter()
            await round_.send((speaker.speech(said) if said else cough()) + silence(OBSERVE_S))
            done = round_.ended(answer)
            cancelled = done is not None and done.response.status == "cancelled"
            lost += cancelled
            new_turns += round_.count("input_audio_buffer.committed", since)
            started = round_.count("input_audio_buffer.speech_started", since)
            barged["cough" if said is None else "backchannel"] += cancelled or started > 0
            began = [
                e for s, e in round_.log if e.type == "response.created" and s >= since and e.response.id != answer
            ]
            taken_over += cancelled or bool(began)
        status = done.response.status if done else "playing on"
        print(f"  backchannel {said or '(cough)'}: answer {status}, speech_started {started}", flush=True)
    return {
        "said": len(BACKCHANNELS) * repeat,
        "backchannels": sum(s is not None for s in BACKCHANNELS) * repeat,
        "coughs": BACKCHANNELS.count(None) * repeat,
        "answers_lost": lost,
        "new_turns": new_turns,
        "taken_over": taken_over,
        "false_barge_ins": barged,
    }


async def bench_interruptions(
    url: str,
    mode: dict[str, Any],
    speaker: Speaker,
    into_s: float,
    loop_lag: LoopLag,
    repeat: int = 1,
    noise_reduction: str | None = None,
) -> dict[str, Any]:
    """Each real interruption said ``repeat`` times, ``into_s`` into a long answer. It is stopped
    when ``speech_started`` comes (a WebSocket client stops its playback there: it has the
    answer's audio ahead of real time); the answer's ``response.done`` is ``cancelled`` too
    if it was still being sent, and came before the speech if it had all been sent. Then a
    new response's first audio is waited for (``full_duplex.ANSWER_WAIT_S``): ``taken_over``
    (FDB's user interruption TOR) counts the interruptions that stopped the answer and got one."""
    missed, to_stop, to_done, to_last_heard, late, sent_whole = 0, [], [], [], [], 0
    taken_over, to_answer = 0, []
    for said in INTERRUPTIONS * repeat:
        async with new_round(url, mode, noise_reduction) as round_:
            answer = await round_.answer_playing(speaker, into_s)
            speech = speaker.speech(said)
            onset, speech_end = await round_.send(speech + silence(OBSERVE_S), voiced_bytes=len(speech))
            with contextlib.suppress(TimeoutError):
                await wait_for(
                    round_.log,
                    lambda e, old=answer: e.type == "response.output_audio.delta" and e.response_id != old,
                    max(0.0, speech_end + full_duplex.ANSWER_WAIT_S - time.perf_counter()),
                )
            started = [s for s, e in round_.log if e.type == "input_audio_buffer.speech_started" and s >= onset]
            stop = started[0] if started else None
            done = next(((s, e) for s, e in round_.log if e.type == "response.done" and e.response.id == answer), None)
            old_audio = [
                (s, len(base64.b64decode(e.delta)) / (2 * REALTIME_RATE))
                for s, e in round_.log
                if e.type == "response.output_audio.delta" and e.response_id == answer
            ]
            new_audio = next(
                (s for s, e in round_.log if e.type == "response.output_audio.delta" and e.response_id != answer), None
            )
        status = None if done is None else done[1].response.status
        sent_before = status == "completed" and stop is not None and done is not None and done[0] <= stop
        if stop is None or not (sent_before or status == "cancelled"):
            missed += 1
            heard = "no speech_started" if stop is None else f"speech_started {(stop - onset) * 1000:.0f} ms"
            answer_end = "no response.done" if done is None else f"{status} {(done[0] - onset) * 1000:.0f} ms"
            print(f"  interruption '{said}': missed ({heard}; the answer: {answer_end})", flush=True)
            continue
        to_stop.append((stop - onset) * 1000)
        late.append(loop_lag.worst_ms(onset, stop))
        to_last_heard.append((last_heard(old_audio, onset, stop) - onset) * 1000)
        if new_audio is not None:
            taken_over += 1
            to_answer.append((new_audio - speech_end) * 1000)
        if sent_before:
            sent_whole += 1
        else:
            assert done is not None
            to_done.append((done[0] - onset) * 1000)
        how = "its audio all sent before" if sent_before else f"response.done {to_done[-1]:.0f} ms"
        answered = "no new answer" if new_audio is None else f"new answer {to_answer[-1]:.0f} ms after its end"
        print(
            f"  interruption '{said}': last heard {to_last_heard[-1]:.0f} ms, speech_started"
            f" {to_stop[-1]:.0f} ms after the onset ({how}; {answered}; client loop late up to {late[-1]:.0f} ms)",
            flush=True,
        )
    return {
        "said": len(INTERRUPTIONS) * repeat,
        "missed": missed,
        "taken_over": taken_over,
        "onset_to_stop_ms": percentiles(to_stop),
        "onset_to_done_ms": percentiles(to_done),
        "answers_all_sent_before": sent_whole,
        "onset_to_last_heard_ms": percentiles(to_last_heard),
        "client_loop_late_ms": percentiles(late),
        "fdb": {
            "onset_to_last_heard_ms": full_duplex.p50_p95(to_last_heard),
            "onset_to_speech_started_ms": full_duplex.p50_p95(to_stop),
            "speech_end_to_answer_ms": full_duplex.p50_p95(to_answer),
        },
    }


async def bench_voice_to_voice(
    url: str, mode: dict[str, Any], speaker: Speaker, repeat: int = 1, noise_reduction: str | None = None
) -> dict[str, Any]:
    """Each question asked ``repeat`` times; with the server's own timeline of the answers
    (medians of each step, from the end of the turn). ``answered`` (FDB's smooth turn-taking
    TOR) counts the questions whose answer's audio came within ``ANSWER_TIMEOUT_S``."""
    latencies, answers, asked = [], [], 0
    for question in QUESTIONS * repeat:
        asked += 1
        async with new_round(url, mode, noise_reduction) as round_:
            speech = speaker.speech(question)
            _, speech_end = await round_.send(speech + silence(3.0), voiced_bytes=len(speech))  # a live mic
            try:
                at, first = await wait_for(
                    round_.log, lambda e: e.type == "response.output_audio.delta", ANSWER_TIMEOUT_S
                )
            except TimeoutError:
                print(f"  question '{question}': no answer within {ANSWER_TIMEOUT_S:g} s", flush=True)
                continue
        latencies.append((at - speech_end) * 1000)
        answers.append(str(first.response_id))
    return {
        "turns": len(latencies),
        "asked": asked,
        "answered": len(latencies),
        "voice_to_voice_ms_p50": percentile(latencies, 50),
        "voice_to_voice_ms_p95": percentile(latencies, 95),
        "voice_to_voice_ms": full_duplex.p50_p95(latencies),
        "server": breakdown(server_timelines(url, answers)),
    }


def first_silence_after(sound_at: list[float], since: float, gap_s: float = 0.2) -> float | None:
    """When the sound heard after ``since`` first stopped for ``gap_s`` (its last frame),
    whether or not it came back."""
    heard = [t for t in sound_at if t >= since]
    if not heard:
        return None
    return next((t for t, after in zip(heard, [*heard[1:], math.inf], strict=True) if after - t >= gap_s), None)


def last_sound_before_gap(sound_at: list[float], since: float, until: float, gap_s: float = 0.3) -> float:
    """The last frame of sound heard from ``since`` that a silence of ``gap_s`` followed, before
    ``until`` (the next answer): where the answer spoken over stopped for good (``since`` if no
    sound came at all). A track paused at the candidate and resumed counts as still playing."""
    heard = [t for t in sound_at if t >= since]
    if not heard:
        return since
    ends = [t for t, after in zip(heard, [*heard[1:], math.inf], strict=True) if t < until and after - t >= gap_s]
    return ends[-1] if ends else since


def another_answer_started(answer: str, event: dict[str, Any]) -> bool:
    return bool(event["type"] == "output_audio_buffer.started" and event["response_id"] != answer)


async def bench_webrtc(
    url: str,
    mode: dict[str, Any],
    speaker: Speaker,
    loop_lag: LoopLag,
    repeat: int = 1,
    noise_reduction: str | None = None,
) -> dict[str, Any]:
    """Over WebRTC calls (the server plays the answer), one call per round: each real
    interruption said ``repeat`` times, then one backchannel ("Yeah."). Speech over the answer
    pauses the track at once; ``onset_to_silence_ms`` is from its first frame sent to the last
    frame of the answer's sound before a silence of 200 ms (the track paused, or a gap between
    words), ``onset_to_last_sound_ms`` to the last frame of it before the new answer (or the
    round's end) that 300 ms of silence followed (the answer stopped); then what became of it,
    and how long after the speech ended a new answer began playing (``output_audio_buffer.started``).
    ``interruption`` and ``backchannel`` keep the first round of each (this part once ran just
    those two, so its earlier reports still compare), ``rounds`` every round."""
    rounds = [("interruption", said) for said in INTERRUPTIONS * repeat] + [("backchannel", "Yeah.")]
    result: dict[str, Any] = {"rounds": []}
    for kind, said in rounds:
        call = Call()
        status, answer_sdp = await call.dial(url.replace("ws", "http", 1) + "/realtime/calls")
        assert status == 201, answer_sdp
        try:
            await call.until(lambda e: e["type"] == "session.created")
            session = {"type": "realtime", "audio": {"input": session_input(mode, noise_reduction)}}
            call.channel.send(json.dumps({"type": "session.update", "session": session}))
            await call.until(lambda e: e["type"] == "session.updated")
            await call.microphone.say(speaker.speech(LONG_QUESTION) + silence(1.0))
            started = await call.until(lambda e: e["type"] == "output_audio_buffer.started", 90)
            answer = started["response_id"]
            while not call.sound_at or call.sound_at[-1] - call.sound_at[0] < 1.0:  # 1 s into the answer
                await asyncio.sleep(0.05)  # polling the caller's own track: it has no event per frame
            onset, onset_counter = time.monotonic(), time.perf_counter()
            speech_end = await call.microphone.say(speaker.speech(said))
            await asyncio.sleep(OBSERVE_S)
            new_answer = None
            if kind == "interruption":
                with contextlib.suppress(TimeoutError):
                    new_answer = await call.until(
                        functools.partial(another_answer_started, answer),
                        max(0.1, speech_end + full_duplex.ANSWER_WAIT_S - time.monotonic()),
                    )
            stopped = first_silence_after(call.sound_at, onset)
            until = time.monotonic() if new_answer is None else call.arrived_at(new_answer)
            last_sound = last_sound_before_gap(call.sound_at, onset, until)
            measured_s = (time.monotonic() if stopped is None else stopped) - onset
            done = next((e for e in call.of_type("response.done") if e["response"]["id"] == answer), None)
            began = [e for e in call.of_type("output_audio_buffer.started") if e["response_id"] != answer]
            outcome = {
                "kind": kind,
                "said": said,
                "onset_to_silence_ms": None if stopped is None else round((stopped - onset) * 1000, 1),
                "onset_to_last_sound_ms": round((last_sound - onset) * 1000, 1),
                "answer": done["response"]["status"] if done else "playing on",
                "new_answer_ms": None
                if new_answer is None
                else round((call.arrived_at(new_answer) - speech_end) * 1000, 1),
                "new_answer_began": bool(began),
                "client_loop_late_ms": loop_lag.worst_ms(onset_counter, onset_counter + measured_s),
            }
            result["rounds"].append(outcome)
            result.setdefault(kind, {key: outcome[key] for key in ("said", "onset_to_silence_ms", "answer")})
            result[kind].setdefault("client_loop_late_ms", outcome["client_loop_late_ms"])
            print(f"  webrtc {kind} '{said}': {outcome}", flush=True)
        finally:
            await call.hang_up()
    cuts = [r for r in result["rounds"] if r["kind"] == "interruption"]
    kept = [r for r in result["rounds"] if r["kind"] == "backchannel"]
    silences = [r["onset_to_silence_ms"] for r in cuts if r["onset_to_silence_ms"] is not None]
    last_sounds = [r["onset_to_last_sound_ms"] for r in cuts]
    answered = [r["new_answer_ms"] for r in cuts if r["new_answer_ms"] is not None]
    result["fdb"] = {
        "user_interruption_tor": full_duplex.rate(
            sum(r["onset_to_silence_ms"] is not None and r["new_answer_ms"] is not None for r in cuts), len(cuts)
        ),
        "backchannel_tor": full_duplex.rate(
            sum(r["answer"] == "cancelled" or r["new_answer_began"] for r in kept), len(kept)
        ),
        "onset_to_silence_ms": full_duplex.p50_p95(silences),
        "onset_to_last_sound_ms": full_duplex.p50_p95(last_sounds),
        "speech_end_to_answer_ms": full_duplex.p50_p95(answered),
    }
    return result


def phone_rounds(speaker: Speaker, repeat: int = 1) -> list[tuple[str, str, bytes]]:
    """What the ``phone`` part says, as a phone sends it (8 kHz μ-law): the real interruptions
    and ``BACKCHANNELS`` (each ``repeat`` times), and the ``PAUSED`` sentences."""
    said = [("interruption", s, to_mulaw(speaker.speech(s))) for s in INTERRUPTIONS * repeat]
    said += [
        ("backchannel", s, to_mulaw(speaker.speech(s))) if s else ("cough", "(cough)", to_mulaw(cough()))
        for s in BACKCHANNELS * repeat
    ]
    said += [("paused", f"{first} | {rest}", to_mulaw(paused_sentence(speaker, first, rest))) for first, rest in PAUSED]
    return said


async def bench_phone(
    url: str,
    mode: dict[str, Any],
    speaker: Speaker,
    into_s: float,
    repeat: int = 1,
    noise_reduction: str | None = None,
) -> dict[str, Any]:
    """``phone_rounds`` over the Twilio media-stream route, each call's session opened with
    ``mode``'s turn detection (and ``noise_reduction``) by a client secret in its TwiML
    (``full_duplex.phone_parameters``; a Twilio call cannot send ``session.update``)."""
    result = await full_duplex.bench_phone(url, mode, speaker, phone_rounds(speaker, repeat), into_s, noise_reduction)
    result["turn_detection"] = mode
    return result


PARTS: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
    "paused": bench_paused,
    "backchannels": bench_backchannels,
    "interruptions": bench_interruptions,
    "voice_to_voice": bench_voice_to_voice,
    "webrtc": bench_webrtc,
    "phone": bench_phone,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, url=None, config=LOCAL_CONFIG)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS))
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="say each real interruption (WebSocket, WebRTC, phone) and each backchannel (WebSocket, phone), and"
        " ask each question, this many times",
    )
    parser.add_argument(
        "--into-s", type=float, default=1.0, help="how far into an answer its listener speaks over it (default 1 s)"
    )
    parser.add_argument(
        "--noise-reduction",
        choices=full_duplex.NOISE_REDUCTION,
        default=None,
        help="put audio.input.noise_reduction {type: X} into each session's session.update (default: none)",
    )


async def main(args: argparse.Namespace) -> None:
    with served(args.url, args.config) as url:
        speaker = Speaker()
        for said in (*INTERRUPTIONS, *filter(None, BACKCHANNELS)):
            speaker.speech(said)  # now, not on the client's loop while an answer streams in (it stalled the sending)
        result: dict[str, Any] = {}
        async with LoopLag() as loop_lag:
            for name in args.modes:
                print(f"{name}:", flush=True)
                result[name] = {}
                for part in args.parts:
                    over_answers = ("interruptions", "backchannels", "phone")
                    extra: dict[str, Any] = {"into_s": args.into_s} if part in over_answers else {}
                    if part in ("interruptions", "backchannels", "voice_to_voice", "webrtc", "phone"):
                        extra["repeat"] = args.repeat
                    if part in ("interruptions", "webrtc"):
                        extra["loop_lag"] = loop_lag
                    extra["noise_reduction"] = args.noise_reduction
                    result[name][part] = await PARTS[part](url, MODES[name], speaker, **extra)
                result[name]["fdb"] = full_duplex.summary(result[name])
                print(json.dumps({name: result[name]}), flush=True)
        for line in phone_table(result):
            print(line, flush=True)
        result["settings"] = {"noise_reduction": args.noise_reduction, "repeat": args.repeat, "into_s": args.into_s}
    print(json.dumps(result))
