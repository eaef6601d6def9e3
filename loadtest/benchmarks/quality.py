"""What the agent says and how it sounds: right, short answers in the question's language, with no silence inside them.

Asks the question set (``loadtest/data/quality_questions.yaml``: facts, arithmetic, yes/no, a
question that needs the turn before, "what did I just ask?", questions to answer "I don't
know", and questions that should call an offered function) of a served app, each in a
session of its own with the session's defaults, as a newcomer's client would:

- ``--mode text``: the question as a text item and ``response.create``;
- ``--mode voice``: Piper speaks it at microphone pace and the server's VAD ends the turn;
  faster-whisper then reads the answer's audio back, and what is judged is what it heard.

For every answer: right or not (any accepted word in it), its length in seconds of audio
and in words, whether it is in English (lingua), time to its first audio (voice: from the
end of the question's speech), the silences a client that plays audio as it arrives would
hear inside it (each audio delta played from when it arrives or when the one before ends,
whichever is later), and for voice the question's word error rate (what the server's STT
heard). For the function questions: whether the right function was called (precision and
recall). ``--sessions N`` asks N questions at once.

The app is ``--url``'s, or ``--config``'s served for the run, with ``--set`` overrides of its
args (``--set llm.handler.temperature=0.3``): one row of docs/bench/quality.md per run.
Readable lines, then one JSON object on the last line; ``--out`` keeps every answer.
"""

import argparse
import asyncio
import base64
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jiwer
import yaml
from openai import AsyncOpenAI

from handlers.audio import REALTIME_RATE, SPEECH_RATE, pcm16_to_float, resample
from loadtest import options
from loadtest.benchmarks.answer_checks import EnglishCheck, is_right, normalise
from loadtest.client.spoken_turns import Speaker
from loadtest.scenarios.launch import LOCAL_CONFIG, app_config, served
from loadtest.stats import percentile

QUESTIONS = Path(__file__).parents[1] / "data" / "quality_questions.yaml"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {
        "type": "function",
        "name": "set_timer",
        "description": "Start a countdown timer.",
        "parameters": {"type": "object", "properties": {"minutes": {"type": "number"}}, "required": ["minutes"]},
    },
]
"""Offered to the ``tool`` and ``no_tool`` questions' sessions."""
AUDIBLE_GAP_MS = 100.0
"""A silence inside an answer longer than this is heard as a stop (the issue's target)."""
ANSWER_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Question:
    kind: str
    ask: str
    accept: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    tool: str | None = None

    @property
    def offers_tools(self) -> bool:
        return self.kind in ("tool", "no_tool")


def load_questions(path: Path = QUESTIONS) -> list[Question]:
    return [
        Question(q["kind"], q["ask"], tuple(map(str, q.get("accept", ()))), tuple(q.get("before", ())), q.get("tool"))
        for q in yaml.safe_load(path.read_text())
    ]


@dataclass
class Answer:
    """One question's answer, as the client got it."""

    kind: str
    question: str
    before: tuple[str, ...] = ()
    transcript: str = ""
    """The server's transcript of the answer (``response.output_audio_transcript``)."""
    heard: str | None = None
    """Voice mode: what faster-whisper heard in the answer's audio."""
    heard_question: str | None = None
    """Voice mode: what the server's STT heard of the question."""
    audio_s: float = 0.0
    first_audio_ms: float | None = None
    silences_ms: list[float] = field(default_factory=list)
    called: list[str] = field(default_factory=list)
    status: str = ""
    right: bool | None = None
    english: bool | None = None
    error: str | None = None
    audio: bytes = field(default=b"", repr=False)

    @property
    def judged_text(self) -> str:
        return self.heard if self.heard is not None else self.transcript

    @property
    def words(self) -> int:
        return len(self.judged_text.split())


def silences(arrivals: list[tuple[float, float]]) -> list[float]:
    """The silences (ms) a client hears that plays each ``(arrival time s, duration ms)``
    chunk as it arrives, after the ones before it: the answer's gaps, not its wait."""
    gaps, playing_until = [], None
    for arrived, ms in arrivals:
        if playing_until is not None and arrived > playing_until:
            gaps.append((arrived - playing_until) * 1000)
        playing_until = max(playing_until or arrived, arrived) + ms / 1000
    return gaps


class Session:
    """One Realtime session of the benchmark: its events as they arrive."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.events: list[tuple[float, Any]] = []
        self._arrived = asyncio.Event()

    async def receive(self) -> None:
        async for event in self.connection:
            self.events.append((time.perf_counter(), event))
            self._arrived.set()

    async def next(self, kind: str, after: int = 0) -> tuple[int, Any]:
        """The first event of ``kind`` from index ``after`` on."""
        while True:
            for index in range(after, len(self.events)):
                if self.events[index][1].type == kind:
                    return index, self.events[index][1]
            self._arrived.clear()
            await self._arrived.wait()


async def ask_one(url: str, question: Question, mode: str, speaker: Speaker | None, instructions: str | None) -> Answer:
    answer = Answer(question.kind, question.ask, question.before)
    sdk = AsyncOpenAI(api_key="unused", websocket_base_url=url)
    async with sdk.realtime.connect(model="s2s") as connection:
        session = Session(connection)
        receiver = asyncio.ensure_future(session.receive())
        try:
            await session.next("session.created")
            update: Any = {"type": "realtime"}
            if question.offers_tools:
                update["tools"] = TOOLS
            if instructions is not None:
                update["instructions"] = instructions
            if len(update) > 1:
                await connection.session.update(session=update)
                await session.next("session.updated")
            for turn in question.before:
                await say(connection, session, turn, mode, speaker)
            async with asyncio.timeout(ANSWER_TIMEOUT_S):
                await listen(connection, session, question.ask, mode, speaker, answer)
        finally:
            receiver.cancel()
    return answer


async def say(connection: Any, session: Session, text: str, mode: str, speaker: Speaker | None) -> tuple[int, float]:
    """Ask ``text``; the index its events start from, and when it was asked (voice: when its
    speech ended), once its answer is done."""
    start = len(session.events)
    if mode == "voice":
        assert speaker is not None
        asked = await speaker.say(connection, text)
    else:
        await connection.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        )
        asked = time.perf_counter()
        await connection.response.create()
    await session.next("response.done", start)
    return start, asked


async def listen(
    connection: Any, session: Session, text: str, mode: str, speaker: Speaker | None, answer: Answer
) -> None:
    start, asked = await say(connection, session, text, mode, speaker)
    events = session.events[start:]
    done = next(e for _, e in events if e.type == "response.done")
    answer.status = done.response.status
    arrivals = []
    audio = bytearray()
    for arrived, event in events:
        if event.type == "response.output_audio.delta" and event.response_id == done.response.id:
            pcm = base64.b64decode(event.delta)
            audio += pcm
            arrivals.append((arrived, len(pcm) * 1000 / (2 * REALTIME_RATE)))
        elif event.type == "response.output_audio_transcript.done" and event.response_id == done.response.id:
            answer.transcript = event.transcript
        elif event.type == "response.function_call_arguments.done":
            answer.called.append(event.name)
        elif event.type == "conversation.item.input_audio_transcription.completed":
            answer.heard_question = event.transcript
    answer.audio = bytes(audio)
    answer.audio_s = len(audio) / (2 * REALTIME_RATE)
    if arrivals:
        answer.first_audio_ms = (arrivals[0][0] - asked) * 1000
        answer.silences_ms = [round(gap, 1) for gap in silences(arrivals)]


def read_back(answers: list[Answer]) -> None:
    """faster-whisper's reading of each spoken answer (after the run: it costs no answer time)."""
    from handlers.stt import SpeechToText

    stt = SpeechToText()
    for answer in answers:
        if answer.audio:
            samples = resample(pcm16_to_float(answer.audio), REALTIME_RATE, SPEECH_RATE)
            answer.heard = stt.transcribe(samples)


def judge(answers: list[Answer], questions: list[Question]) -> None:
    in_english = EnglishCheck()
    for answer, question in zip(answers, questions, strict=True):
        text = answer.judged_text
        if question.tool is not None:
            answer.right = answer.called == [question.tool]
        elif question.accept:
            answer.right = is_right(text, question.accept) and not answer.called
        answer.english = in_english(text)


def question_wer(answers: list[Answer]) -> float | None:
    pairs = [(a.question, a.heard_question) for a in answers if a.heard_question is not None]
    if not pairs:
        return None
    return round(jiwer.wer([normalise(q) for q, _ in pairs], [normalise(h) or "-" for _, h in pairs]), 3)


def summary(answers: list[Answer], mode: str) -> dict[str, Any]:
    spoken = [a for a in answers if a.audio_s > 0]
    judged = [a for a in answers if a.right is not None]
    calls = [name for a in answers for name in a.called]
    tool_questions = [a for a in answers if a.kind == "tool"]
    right_calls = sum(a.right is True for a in tool_questions)
    worst = [max(a.silences_ms, default=0.0) for a in spoken]
    by_kind = {
        kind: f"{sum(bool(a.right) for a in judged if a.kind == kind)}/{sum(a.kind == kind for a in judged)}"
        for kind in dict.fromkeys(a.kind for a in judged)
    }
    return {
        "mode": mode,
        "questions": len(answers),
        "right_share": round(sum(bool(a.right) for a in judged) / len(judged), 3) if judged else None,
        "right_by_kind": by_kind,
        "failed": sum(a.status not in ("completed", "incomplete") or a.error is not None for a in answers),
        "cut_at_cap": sum(a.status == "incomplete" for a in answers),
        "answer_s_p50": percentile([a.audio_s for a in spoken], 50),
        "answer_s_max": round(max((a.audio_s for a in spoken), default=0.0), 2),
        "answers_over_15_s": sum(a.audio_s > 15 for a in spoken),
        "words_p50": statistics.median([a.words for a in spoken]) if spoken else None,
        "not_english": sum(a.english is False for a in answers),
        "first_audio_ms_p50": percentile([a.first_audio_ms for a in spoken if a.first_audio_ms is not None], 50),
        "first_audio_ms_p95": percentile([a.first_audio_ms for a in spoken if a.first_audio_ms is not None], 95),
        "answers_with_gap_over_100_ms": sum(gap > AUDIBLE_GAP_MS for gap in worst),
        "longest_gap_ms_p50": percentile(worst, 50),
        "longest_gap_ms_max": round(max(worst, default=0.0), 1),
        "question_wer": question_wer(answers),
        "tool_precision": round(right_calls / len(calls), 3) if calls else None,
        "tool_recall": round(right_calls / len(tool_questions), 3) if tool_questions else None,
    }


async def ask_all(
    url: str, questions: list[Question], mode: str, sessions: int, instructions: str | None
) -> list[Answer]:
    speaker = Speaker() if mode == "voice" else None
    answers: list[Answer | None] = [None] * len(questions)
    pending = iter(enumerate(questions))

    async def worker() -> None:
        for index, question in pending:
            try:
                answer = await ask_one(url, question, mode, speaker, instructions)
            except Exception as exc:  # one question's failure is a row of the report, not the end of it
                answer = Answer(question.kind, question.ask, question.before, error=f"{type(exc).__name__}: {exc}")
            answers[index] = answer
            print(
                f"{index + 1:3d} {mode} {answer.audio_s:5.1f} s  {question.ask!r} -> {answer.transcript[:100]!r}"
                f"{' ' + str(answer.called) if answer.called else ''}{' ' + answer.error if answer.error else ''}",
                flush=True,
            )

    await asyncio.gather(*(worker() for _ in range(sessions)))
    return [a for a in answers if a is not None]


def with_overrides(args: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The app's args with each ``dotted.key=yaml value`` set."""
    for override in overrides:
        key, _, value = override.partition("=")
        *parents, last = key.split(".")
        node = args
        for parent in parents:
            node = node.setdefault(parent, {})
        node[last] = yaml.safe_load(value)
    return args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, url=None, config=LOCAL_CONFIG, sessions=1, out=None)
    parser.add_argument("--mode", choices=("text", "voice"), action="append", help="text, voice or both (default both)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--limit", type=options.positive_int, help="ask only the first N questions")
    parser.add_argument("--kinds", help="ask only these kinds (comma-separated)")
    parser.add_argument("--instructions", help="session instructions every session sets (default: the server's)")
    parser.add_argument("--label", default="", help="the row's name in the report")
    parser.add_argument(
        "--judge", type=Path, metavar="REPORT", help="judge a saved report's answers again (--out's), asking nothing"
    )


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.url is not None and args.overrides:
        parser.error("--set changes the app this run serves: it cannot change --url's")


def judged(answers: list[Answer], questions: list[Question], mode: str, kept: dict[str, Any]) -> dict[str, Any]:
    """The summary of ``answers`` judged, each kept (without its audio) in ``kept[mode]``."""
    judge(answers, questions)
    kept[mode] = [asdict(a) | {"audio": None, "words": a.words} for a in answers]
    print(json.dumps(summary(answers, mode)), flush=True)
    return summary(answers, mode)


def rejudged(report: Path) -> dict[str, Any]:
    """A saved report, its answers judged again by today's rules."""
    saved = json.loads(report.read_text())
    asked = {(q.kind, q.ask, q.before): q for q in load_questions()}
    kept: dict[str, Any] = {}
    for mode, rows in saved["answers"].items():
        fields = [{k: v for k, v in row.items() if k not in ("audio", "words")} for row in rows]
        answers = [Answer(**row | {"before": tuple(row.get("before", ()))}) for row in fields]
        questions = [asked[(a.kind, a.question, a.before)] for a in answers]
        saved[mode] = judged(answers, questions, mode, kept)
    return saved | {"answers": kept}


async def main(args: argparse.Namespace) -> None:
    if args.judge is not None:
        report = rejudged(args.judge)
        args.judge.write_text(json.dumps(report, indent=1))
        print(json.dumps({k: v for k, v in report.items() if k != "answers"}))
        return
    questions = load_questions()
    if args.kinds:
        questions = [q for q in questions if q.kind in args.kinds.split(",")]
    questions = questions[: args.limit]
    result: dict[str, Any] = {"label": args.label, "overrides": args.overrides, "instructions": args.instructions}
    kept: dict[str, Any] = {}
    _, app_args = app_config(args.config)
    with served(args.url, args.config, with_overrides(app_args, args.overrides)) as url:
        for mode in args.mode or ["text", "voice"]:
            answers = await ask_all(url, questions, mode, args.sessions, args.instructions)
            if mode == "voice":
                await asyncio.to_thread(read_back, answers)
            result[mode] = judged(answers, questions, mode, kept)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result | {"answers": kept}, indent=1))
    print(json.dumps(result))
