"""Full-Duplex-Bench-style figures for ``s2s-bench turns``: the compact ``fdb`` summary of a
mode's parts and the ``phone`` part (the same scenarios over the Twilio media-stream route,
in μ-law), set beside the 24 kHz ones.

Full-Duplex-Bench (FDB v1, arXiv:2503.04721; v1.5, arXiv:2507.23159) scores four behaviours
with a take-over rate (TOR: the share of trials in which the model took the turn) and
latencies; this bench scores ours the same way, from its own Piper audio:

- pause handling: a sentence with a mid-sentence pause; taken over when it became more than one
  turn or a response began before the sentence's speech ended (lower is better);
- backchannel: a backchannel or a cough during an answer; taken over when the answer was
  cancelled or a new response began (lower is better);
- smooth turn-taking: a finished question; taken over when its answer's audio came (higher is
  better), latency from the end of its speech to that audio (over the answered turns only, as
  FDB's is);
- user interruption: a real interruption during an answer; taken over when the answer stopped
  and a new response's audio came (higher is better); stop latency from the interruption's
  first voiced frame to the last sound of the old answer a playing client heard, response
  latency from the end of its speech to the new response's first audio.

A phone call sends no ``session.update`` and gets no events: its turn detection is what the
client secret in its TwiML opened the session with (``POST /v1/realtime/client_secrets``, as
an operator's backend makes one, ``docs/telephony.md``), and all it sees of a turn is
``media``, ``mark`` (``response.done <id> <status>`` after each response) and ``clear``.
``phone_beside_24khz`` sets the phone's counts beside the WebSocket's, where the WebSocket's
``clear`` is ``speech_started`` (a playing client stops there).
"""

import asyncio
import contextlib
import functools
import json
import secrets
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from deployments.realtime.transports.wire_audio import PCMU
from handlers.audio import REALTIME_RATE, pcm16_to_float, resample
from loadtest.client.spoken_turns import LONG_QUESTION, Speaker
from loadtest.client.twilio_caller import FRAME_BYTES, TwilioCaller
from loadtest.stats import percentile

NOISE_REDUCTION = ("near_field", "far_field")
"""``audio.input.noise_reduction.type`` values a session may ask for (OpenAI's)."""
ANSWER_WAIT_S = 15.0
"""How long after an interruption's speech ended a new response's audio is waited for."""

PCMU_SILENCE = b"\xff"
"""μ-law's zero."""
PHONE_OBSERVE_S = 3.0
"""How long after what the caller said a phone round looks for what it caused (as the 24 kHz
rounds' ``turns.OBSERVE_S``)."""
LEAD_IN_S = 0.5
"""Silence on the line before a paused sentence (as the 24 kHz round's)."""
WORSE_BY_POINTS = 5.0
"""The target: phone-band turn-taking within this many points of the 24 kHz figures, as the
narrow band and μ-law should cost a caller little (docs/bench/README.md, "Turn-taking on phone
audio")."""


def p50_p95(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p95": percentile(values, 95), "n": len(values)}


def rate(count: int, of: int) -> float | None:
    return round(count / of, 3) if of else None


def summary(parts: dict[str, Any]) -> dict[str, Any]:
    """The ``fdb`` object of one mode, from whichever of its parts ran."""
    fdb: dict[str, Any] = {}
    if "paused" in parts:
        paused = parts["paused"]
        fdb["pause_handling"] = {"tor": rate(paused["taken_over"], paused["sentences"]), "of": paused["sentences"]}
    if "backchannels" in parts:
        said = parts["backchannels"]
        fdb["backchannel"] = {"tor": rate(said["taken_over"], said["said"]), "of": said["said"]}
    if "voice_to_voice" in parts:
        turns = parts["voice_to_voice"]
        fdb["smooth_turn_taking"] = {
            "tor": rate(turns["answered"], turns["asked"]),
            "of": turns["asked"],
            "latency_ms": turns["voice_to_voice_ms"],
        }
    if "interruptions" in parts:
        cut = parts["interruptions"]
        fdb["user_interruption"] = {
            "tor": rate(cut["taken_over"], cut["said"]),
            "of": cut["said"],
            "stop_latency_ms": cut["fdb"]["onset_to_last_heard_ms"],
            "speech_started_ms": cut["fdb"]["onset_to_speech_started_ms"],
            "response_latency_ms": cut["fdb"]["speech_end_to_answer_ms"],
        }
    transports: dict[str, Any] = {}
    if "interruptions" in parts:
        transports["websocket"] = parts["interruptions"]["fdb"]["onset_to_last_heard_ms"]
    if "webrtc" in parts:
        transports["webrtc"] = parts["webrtc"]["fdb"]["onset_to_last_sound_ms"]
    if "phone" in parts and parts["phone"]["interruptions"]["said"]:
        transports["phone"] = parts["phone"]["fdb"]["onset_to_last_heard_ms"]
    if transports:
        fdb["onset_to_stopped_ms"] = transports
    if "phone" in parts:
        fdb["phone_vs_24khz"] = phone_beside_24khz(parts)
    return fdb


def counted(count: int, of: int) -> dict[str, Any]:
    return {"count": count, "of": of, "rate": rate(count, of)}


def phone_beside_24khz(parts: dict[str, Any]) -> dict[str, Any]:
    """Each count of the phone part beside the same count over the WebSocket (24 kHz), where
    both ran: ``points`` is the phone's rate less the WebSocket's, in percentage points (all
    of these are lower-is-better), and ``worse`` says whether it is over ``WORSE_BY_POINTS``."""
    phone = parts["phone"]
    rows: dict[str, Any] = {}

    def row(name: str, wideband: dict[str, Any] | None, on_phone: dict[str, Any]) -> None:
        if not on_phone["of"]:
            return
        rows[name] = {"24khz": wideband, "phone": on_phone, "points": None, "worse": None}
        if wideband is not None and wideband["of"]:
            points = round(100 * (on_phone["count"] / on_phone["of"] - wideband["count"] / wideband["of"]), 1)
            rows[name] |= {"points": points, "worse": points > WORSE_BY_POINTS}

    said = parts.get("backchannels")
    for kind in ("backchannel", "cough"):
        wideband = None
        if said is not None and "false_barge_ins" in said:
            wideband = counted(said["false_barge_ins"][kind], said[f"{kind}s"])
        on_phone = phone["backchannels"]
        row(f"false_barge_ins_{kind}", wideband, counted(on_phone["false_barge_ins"][kind], on_phone[f"{kind}s"]))
    backchannels = phone["backchannels"]
    row(
        "backchannel_tor",
        None if said is None else counted(said["taken_over"], said["said"]),
        counted(backchannels["taken_over"], backchannels["backchannels"] + backchannels["coughs"]),
    )
    cut = parts.get("interruptions")
    interruptions = phone["interruptions"]
    row(
        "missed_interruptions",
        None if cut is None else counted(cut["missed"], cut["said"]),
        counted(interruptions["missed"], interruptions["said"]),
    )
    paused = parts.get("paused")
    on_phone = phone["paused"]
    for name, key in (("pause_cut_offs", "cut_off"), ("pause_tor", "taken_over"), ("pause_spoke_over", "spoke_over")):
        wideband = None if paused is None else counted(paused[key], paused["sentences"])
        row(name, wideband, counted(on_phone[key], on_phone["sentences"]))
    return rows


PHONE_ROWS = {
    "false_barge_ins_backchannel": "false barge-ins on backchannels",
    "false_barge_ins_cough": "false barge-ins on coughs",
    "backchannel_tor": "backchannel TOR (FDB)",
    "missed_interruptions": "missed interruptions",
    "pause_cut_offs": "paused sentences cut off (more than one turn)",
    "pause_tor": "pause handling TOR (FDB)",
    "pause_spoke_over": "paused sentences spoken over (audio before their end)",
}


def phone_table(result: dict[str, Any]) -> list[str]:
    """``phone_vs_24khz`` of each mode in ``result`` as a Markdown table (no lines where no
    mode has it)."""
    lines = []
    for mode, parts in result.items():
        rows = parts.get("fdb", {}).get("phone_vs_24khz", {}) if isinstance(parts, dict) else {}
        for key, label in PHONE_ROWS.items():
            if key not in rows:
                continue
            row = rows[key]
            cells = [f"{row[side]['count']} of {row[side]['of']}" if row[side] else "—" for side in ("24khz", "phone")]
            points = "—" if row["points"] is None else f"{row['points']:+.1f}" + (" **worse**" if row["worse"] else "")
            lines.append(f"| {mode} | {label} | {cells[0]} | {cells[1]} | {points} |")
        phone = parts.get("phone") if isinstance(parts, dict) else None
        if phone is not None and phone["interruptions"]["said"]:
            fdb, wideband = phone["fdb"], parts.get("interruptions", {}).get("fdb", {})
            heard = wideband.get("onset_to_last_heard_ms")
            cells = [
                f"{heard['p50']:.0f} / {heard['p95']:.0f} ms (last heard)" if heard and heard["n"] else "—",
                ", ".join(
                    f"{fdb[key]['p50']:.0f} / {fdb[key]['p95']:.0f} ms ({what}, {fdb[key]['n']})"
                    for key, what in (
                        ("onset_to_clear_ms", "`clear`"),
                        ("onset_to_cancelled_ms", "cancelled mark"),
                        ("onset_to_last_heard_ms", "last heard"),
                    )
                    if key in fdb and fdb[key]["n"]
                )
                or "—",
            ]
            lines.append(f"| {mode} | interruption onset → stopped p50 / p95 | {cells[0]} | {cells[1]} | |")
    if not lines:
        return []
    return [
        "| mode | 8 kHz μ-law phone beside 24 kHz WebSocket | 24 kHz | phone | points |",
        "|---|---|---|---|---|",
        *lines,
    ]


def phone_summary(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The phone part's counts and latencies from its rounds (``phone_over_answer``'s and
    ``phone_paused``'s records).

    - A ``clear``, or the answer's ``response.done`` mark saying ``cancelled``, is a barge-in:
      on a backchannel or a cough a false one; an interruption with neither was missed.
    - ``taken_over`` (FDB's TOR): an interruption that barged in and got a new answer; a
      backchannel or cough that barged in or after which a new answer began.
    - A paused sentence was cut off when it got more than one response, taken over when it
      was cut off or a response (its audio, or its ``response.done`` mark) came before the
      sentence's speech ended, spoken over when the answer's audio did.
    - A call that failed (``failed``: the stream closed, or nothing came) counts in none of
      these, only in ``failed_calls``.
    - Latencies from an interruption's onset: to the ``clear`` (only where one came), to the
      cancelled answer's ``response.done`` mark, and to the last sound of it the caller heard."""
    failed = [r for r in rounds if "failed" in r]
    rounds = [r for r in rounds if "failed" not in r]
    cuts = [r for r in rounds if r["kind"] == "interruption"]
    kept = [r for r in rounds if r["kind"] in ("backchannel", "cough")]
    paused = [r for r in rounds if r["kind"] == "paused"]
    barged = [r for r in cuts if r["barged_in"]]
    return {
        "failed_calls": [f"{r['kind']} '{r['said']}': {r['failed']}" for r in failed],
        "interruptions": {
            "said": len(cuts),
            "missed": len(cuts) - len(barged),
            "taken_over": sum(r["new_answer_ms"] is not None for r in barged),
        },
        "backchannels": {
            "backchannels": sum(r["kind"] == "backchannel" for r in kept),
            "coughs": sum(r["kind"] == "cough" for r in kept),
            "false_barge_ins": {
                kind: sum(r["barged_in"] for r in kept if r["kind"] == kind) for kind in ("backchannel", "cough")
            },
            "taken_over": sum(r["barged_in"] or r["new_answer_ms"] is not None for r in kept),
        },
        "paused": {
            "sentences": len(paused),
            "cut_off": sum(r["responses"] > 1 for r in paused),
            "taken_over": sum(r["responses"] > 1 or r["began_in_it"] for r in paused),
            "spoke_over": sum(r["spoke_over"] for r in paused),
        },
        "fdb": {
            "user_interruption_tor": rate(sum(r["new_answer_ms"] is not None for r in barged), len(cuts)),
            "backchannel_tor": rate(sum(r["barged_in"] or r["new_answer_ms"] is not None for r in kept), len(kept)),
            "pause_handling_tor": rate(sum(r["responses"] > 1 or r["began_in_it"] for r in paused), len(paused)),
            "onset_to_clear_ms": p50_p95([r["clear_ms"] for r in cuts if r["clear_ms"] is not None]),
            "onset_to_cancelled_ms": p50_p95([r["cancelled_ms"] for r in cuts if r.get("cancelled_ms") is not None]),
            "onset_to_last_heard_ms": p50_p95([r["last_sound_ms"] for r in cuts if r["last_sound_ms"] is not None]),
            "speech_end_to_answer_ms": p50_p95([r["new_answer_ms"] for r in barged if r["new_answer_ms"] is not None]),
        },
    }


class PhoneLine:
    """A call's inbound audio as a real line sends it: a 20 ms ``media`` every 20 ms for the
    whole call, silence whenever the caller says nothing (Twilio never stops streaming)."""

    def __init__(self, call: TwilioCaller) -> None:
        self._call = call
        self._said: list[tuple[bytes, asyncio.Future[tuple[float, float]]]] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "PhoneLine":
        self._task = asyncio.ensure_future(self._stream())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def say(self, mulaw: bytes) -> tuple[float, float]:
        """``mulaw`` on the line; when its first and its last frame went out."""
        said: asyncio.Future[tuple[float, float]] = asyncio.get_running_loop().create_future()
        self._said.append((mulaw, said))
        return await said

    async def _stream(self) -> None:
        started, sent, offset, began = time.monotonic(), 0, 0, 0.0
        silence = PCMU_SILENCE * FRAME_BYTES
        while True:
            if self._said:
                audio, said = self._said[0]
                frame = audio[offset : offset + FRAME_BYTES]
                frame += silence[len(frame) :]
                await self._call.say(frame, realtime=False)
                now = time.monotonic()
                began = now if offset == 0 else began
                offset += FRAME_BYTES
                if offset >= len(audio):
                    self._said.pop(0)
                    offset = 0
                    if not said.done():
                        said.set_result((began, now))
            else:
                await self._call.say(silence, realtime=False)
            sent += 1
            await asyncio.sleep(max(0.0, started + sent * FRAME_BYTES / PCMU.rate - time.monotonic()))


async def phone_parameters(url: str, mode: dict[str, Any], noise_reduction: str | None = None) -> dict[str, str]:
    """A call's TwiML ``<Parameter>``s: no greeting (so that every scenario starts as the
    24 kHz ones do), and, for a turn detection (``mode``), a client secret that opens the
    session with it, made as an operator's backend makes one (``POST
    /v1/realtime/client_secrets``): a Twilio call cannot send ``session.update``."""
    parameters = {"greeting": ""}
    audio_input: dict[str, Any] = {}
    if mode:
        audio_input["turn_detection"] = mode
    if noise_reduction is not None:
        audio_input["noise_reduction"] = {"type": noise_reduction}
    if not audio_input:
        return parameters
    body = json.dumps({"session": {"type": "realtime", "audio": {"input": audio_input}}}).encode()
    request = urllib.request.Request(
        url.replace("ws", "http", 1) + "/realtime/client_secrets",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )

    def ask() -> dict[str, Any]:
        with urllib.request.urlopen(request, timeout=30) as response:
            return dict(json.loads(response.read()))

    minted = await asyncio.to_thread(ask)
    shown = minted["session"]["audio"]["input"].get("turn_detection") or {}
    if mode and shown.get("type") != mode.get("type"):
        raise AssertionError(f"the secret opens sessions with {shown}, not {mode}")
    return parameters | {"client_secret": str(minted["value"])}


async def phone_over_answer(
    url: str, parameters: dict[str, str], speaker: Speaker, kind: str, said: str, audio: bytes, into_s: float, name: str
) -> dict[str, Any]:
    """One call: the long question, then ``into_s`` into its answer as the phone plays it,
    ``audio`` (μ-law). The phone stops playing at the ``clear``; a paced answer's audio runs
    out sooner (the server stops sending at the candidate, and Twilio holds at most the
    lead), and the server sends no ``clear`` when Twilio holds none of it. So the stop
    latency is onset → the last sound of the answer played before it stopped: before the
    ``clear``, else before its cancelled ``response.done`` mark came back (echoed at once:
    nothing is left to play before it)."""
    question = to_mulaw(speaker.speech(LONG_QUESTION))
    silence = PCMU_SILENCE * PCMU.rate
    async with TwilioCaller.dial(f"{url}/twilio/media-stream", parameters, name=name) as call, PhoneLine(call) as line:
        await line.say(silence[: PCMU.rate // 5] + question)
        await call.until(lambda: call.answers[-1].first_audio_at is not None, 90)
        playing = len(call.answers) - 1
        first_audio_at = call.answers[playing].first_audio_at
        assert first_audio_at is not None
        await asyncio.sleep(max(0.0, first_audio_at + into_s - time.monotonic()))
        clears = len(call.clears)
        ended = asyncio.ensure_future(moment(call, lambda: call.answers[playing].done is not None))
        onset, speech_end = await line.say(audio)
        await asyncio.sleep(PHONE_OBSERVE_S)
        cleared = len(call.clears) > clears
        done = call.answers[playing].done
        if cleared or kind == "interruption" or (done is not None and done.endswith(" cancelled")):
            with contextlib.suppress(TimeoutError, ConnectionError):
                await call.until(functools.partial(answered_after, call, playing), ANSWER_WAIT_S)
        answered_at = answer_after(call, playing)
        done = call.answers[playing].done
        ended_at = ended.result() if ended.done() else None
        ended.cancel()
    status = done.split()[-1] if done else None
    barged_in = cleared or status == "cancelled"
    stopped_at = call.clears[clears] if cleared else ended_at if status == "cancelled" else None
    record = {
        "kind": kind,
        "said": said,
        "barged_in": barged_in,
        "answer": status or "playing on",
        "clear_ms": round((call.clears[clears] - onset) * 1000, 1) if cleared else None,
        "cancelled_ms": round((ended_at - onset) * 1000, 1) if ended_at is not None and status == "cancelled" else None,
        "last_sound_ms": None
        if stopped_at is None
        else round((last_played(call.played, onset, stopped_at) - onset) * 1000, 1),
        "new_answer_ms": None if answered_at is None else round((answered_at - speech_end) * 1000, 1),
    }
    stop = "not stopped"
    if barged_in:
        stop = "clear " + ("none" if record["clear_ms"] is None else f"{record['clear_ms']:.0f} ms")
        stop += ", cancelled " + ("?" if record["cancelled_ms"] is None else f"{record['cancelled_ms']:.0f} ms")
        stop += ", last sound " + ("?" if record["last_sound_ms"] is None else f"{record['last_sound_ms']:.0f} ms")
    answer = "none" if answered_at is None else f"{record['new_answer_ms']:.0f} ms"
    print(f"  phone {kind} '{said}': {stop}, the answer {record['answer']}, new answer {answer}", flush=True)
    return record


async def moment(call: TwilioCaller, done: Callable[[], bool]) -> float | None:
    """When ``done()`` first held, looked at on each of the call's messages and echoes
    (``None`` if the stream closed first)."""
    with contextlib.suppress(ConnectionError):
        await call.until(done, timeout_s=3600)
        return time.monotonic()
    return None


async def phone_paused(url: str, parameters: dict[str, str], said: str, audio: bytes, name: str) -> dict[str, Any]:
    """One call: a sentence with a pause in it (μ-law), then ``PHONE_OBSERVE_S``; what came
    before its speech ended, and how many responses it got in all (each ``response.done``
    mark, and the answer still playing)."""
    silence = PCMU_SILENCE * PCMU.rate
    async with TwilioCaller.dial(f"{url}/twilio/media-stream", parameters, name=name) as call, PhoneLine(call) as line:
        await line.say(silence[: int(LEAD_IN_S * PCMU.rate)])
        await line.say(audio)
        heard = [a for a in call.answers if a.first_audio_at is not None]
        began = [a for a in call.answers if a.first_audio_at is not None or a.done is not None]
        await asyncio.sleep(PHONE_OBSERVE_S)
        responses = sum(a.first_audio_at is not None or a.done is not None for a in call.answers)
    record = {
        "kind": "paused",
        "said": said,
        "responses": responses,
        "began_in_it": bool(began),
        "spoke_over": bool(heard),
    }
    print(f"  phone paused '{said}': {responses} response(s), {len(began)} begun in it", flush=True)
    return record


async def bench_phone(
    url: str,
    mode: dict[str, Any],
    speaker: Speaker,
    said: Sequence[tuple[str, str, bytes]],
    into_s: float,
    noise_reduction: str | None = None,
) -> dict[str, Any]:
    """Over the Twilio media-stream route (8 kHz μ-law), one call per round of ``said`` (kind,
    what, μ-law audio), each with a client secret of its own that opens its session with
    ``mode``'s turn detection (``phone_parameters``): ``interruption``, ``backchannel`` and
    ``cough`` rounds are said ``into_s`` into an answer (``phone_over_answer``), ``paused``
    ones are sentences alone (``phone_paused``). Its ``rounds``, and their ``phone_summary``.
    Every call has a CallSid of its own: a stream of a CallSid the server has seen within its
    resume window resumes that call's session (its settings and items), as a call brought
    back by ``<Redirect>`` does."""
    rounds = []
    run = secrets.token_hex(4)
    for index, (kind, what, audio) in enumerate(said):
        name = f"fdb-{run}-{index}"
        parameters = await phone_parameters(url, mode, noise_reduction)
        try:
            if kind == "paused":
                rounds.append(await phone_paused(url, parameters, what, audio, name))
            else:
                rounds.append(await phone_over_answer(url, parameters, speaker, kind, what, audio, into_s, name))
        except (ConnectionError, TimeoutError, OSError) as exc:  # this call is reported; the others go on
            rounds.append({"kind": kind, "said": what, "failed": f"{type(exc).__name__}: {str(exc)[:200]}"})
            print(f"  phone {kind} '{what}': the call failed ({rounds[-1]['failed']})", flush=True)
    return {"rounds": rounds, **phone_summary(rounds)}


def last_played(played: Sequence[tuple[float, float]], onset: float, clear: float) -> float:
    """When the caller last heard the answer before its ``clear`` (``onset`` if nothing
    played after it)."""
    ends = [min(began + seconds, clear) for began, seconds in played if began < clear]
    return max([onset, *ends])


def answer_after(call: TwilioCaller, playing: int) -> float | None:
    """When the first answer after answer ``playing`` began to arrive, if one has."""
    return next((a.first_audio_at for a in call.answers[playing + 1 :] if a.first_audio_at is not None), None)


def answered_after(call: TwilioCaller, playing: int) -> bool:
    return answer_after(call, playing) is not None


def to_mulaw(pcm16: bytes) -> bytes:
    """24 kHz PCM16 as a phone sends it: 8 kHz μ-law (``phone.mulaw``'s encoding)."""
    return bytes(PCMU.wire_bytes(resample(pcm16_to_float(pcm16), REALTIME_RATE, PCMU.rate)))
