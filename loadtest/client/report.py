"""The load test's report: counts and latency percentiles (JSON), a Markdown table, PNG plots.

Correctness counters, each of which must be zero in a healthy run:
- ``stale_bytes``: audio the client must never get, split by kind in
  ``stale_bytes_after_done`` (of a response, after its own ``response.done``) and
  ``stale_bytes_never_created`` (of a response whose ``response.created`` never came); the
  report's ``stale`` list names each such response, its session and the events before it
  (the server's log names the same response id: what it did with it);
- ``leaks``: answers that name a question their session never asked (another session's);
- ``cut_short``: answers reported ``completed`` with fewer than ``CUT_SHORT`` of the words the
  same question got when answered alone, which no cancel of their own explains. Only answers
  that the calibration can stand for are compared: every scripted (tone) answer, and the first
  turn of a session with a real model (later turns have a history, which changes the answer);
- ``no_response``, ``done_without_created``, ``timeouts``, ``disconnects``, ``errors``.

``interrupts_too_late`` counts interruptions that reached the server after its answer had
ended (a ``response.cancel`` then gets ``response_cancel_not_active``, which is right).

With backchannels said over answers (``--backchannel-rate``), two more must be zero:
``answers_lost_to_backchannels`` (an answer a backchannel cancelled) and
``unasked_responses`` (a backchannel taken for a turn and answered).

With questions said with a pause mid-sentence (``--pause-rate``), ``cut_offs`` counts the
turns the server answered before they ended (``paused_turns`` of them were paused): the
turn-taking's figure, not a bug's (OpenAI's ``server_vad`` ends a turn at any 500 ms pause).

With ``--resume``, ``resume`` says what drops and drains did: connections lost (by close
code, or ``draining``), resumed and not, resume time, items lost and answers in flight lost
(``resume_summary``); ``not_resumed`` and ``items_lost`` must be zero.
"""

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, get_args

import numpy as np

from loadtest.client.metrics import server_view
from loadtest.client.prompts import PromptSet
from loadtest.client.records import Response, SessionLog, StaleKind, Turn
from loadtest.client.report_plots import latency_samples, plot
from loadtest.client.run import LoadResult

CUT_SHORT = 0.5
STALE_LISTED = 200
"""Responses with stale audio listed by name in the report (all are counted)."""
PERCENTILES = (50, 90, 95, 99)


def summarize(result: LoadResult) -> dict[str, Any]:
    prompts = result.prompts
    turns = [turn for log in result.logs for turn in log.turns]
    samples = latency_samples(result)
    errors: dict[str, int] = {}
    for log in result.logs:
        for code, count in log.errors.items():
            errors[code] = errors.get(code, 0) + count
    responses = [turn.response for turn in turns if turn.response is not None]
    stale = stale_records(result)
    completed = sum(r.status == "completed" for r in responses)
    counts = {
        "sessions": len(result.logs),
        "turns": len(turns),
        "responses": len(responses),
        "completed": completed,
        "cancelled": sum(r.status == "cancelled" for r in responses),
        "failed": sum(r.status == "failed" for r in responses),
        "barge_ins": sum(t.interruption == "barge-in" for t in turns),
        "cancels": sum(t.interruption == "cancel" for t in turns),
        "interrupts_too_late": sum(
            t.interruption in ("barge-in", "cancel") and t.response is not None and t.response.status == "completed"
            for t in turns
        ),
        "backchannels": sum(t.interruption == "backchannel" for t in turns),
        "answers_lost_to_backchannels": sum(
            t.interruption == "backchannel" and t.response is not None and t.response.status != "completed"
            for t in turns
        ),
        "unasked_responses": sum(log.unasked_responses for log in result.logs),
        "paused_turns": sum(t.paused for t in turns),
        "cut_offs": sum(bool(t.cut_off_by) for t in turns),
        "stale_bytes": sum(record["bytes"] for record in stale),
        **{
            f"stale_bytes_{kind}": sum(record["bytes"] for record in stale if record["kind"] == kind)
            for kind in get_args(StaleKind)
        },
        "leaks": sum(_leaked(log_turns, prompts) for log_turns in (log.turns for log in result.logs)),
        "cut_short": sum(_cut_short(t, result.calibrated_words, prompts) for t in turns),
        "no_response": sum(t.response is None for t in turns),
        "done_without_created": sum(log.done_without_created for log in result.logs),
        "timeouts": sum(t.timed_out for t in turns),
        "disconnects": sum(log.disconnected for log in result.logs),
        "errors": errors,
    }
    duration = result.ended_at - result.started_at
    return {
        "config": asdict(result.config),
        "server_info": {"model": result.model, "prompts": prompts.name, "url": result.config.url},
        "duration_s": round(duration, 2),
        "completed_turns_per_s": round(completed / duration, 3) if duration else 0.0,
        "counts": counts,
        "latency_ms": {name: _percentiles(values) for name, values in sorted(samples.items())},
        "resume": resume_summary(result.logs, responses) if result.config.resume else None,
        "stale": stale[:STALE_LISTED],
        "calibrated_words": result.calibrated_words,
        "timeline": result.timeline,
        "server": {**server_view(result.server_metrics), "scraped_after_end_s": result.server_scraped_after_s},
    }


def resume_summary(logs: list[SessionLog], responses: list[Response]) -> dict[str, Any]:
    """What drops and drains did to the sessions (``--resume``): how many connections were
    lost and why (``lost_untold``: with no ``session.draining`` first), how many were
    resumed and how fast (from the loss, the client's reconnect included, to the resumed
    ``session.created``), the items the resumed sessions did not hold, and the answers that
    were in flight."""
    resumes = [resume for log in logs for resume in log.resumes]
    resumed = [resume for resume in resumes if resume.resumed_at is not None]
    reasons: dict[str, int] = {}
    for resume in resumes:
        reasons[resume.reason] = reasons.get(resume.reason, 0) + 1
    return {
        "sessions_dropped": sum(bool(log.resumes) or log.disconnected for log in logs),
        "connections_lost": len(resumes),
        "by_reason": reasons,
        "lost_untold": sum(not resume.told for resume in resumes),
        "resumed": len(resumed),
        "not_resumed": len(resumes) - len(resumed),
        "resume_attempts_refused": sum(len(resume.refusals) for resume in resumes),
        "resume_ms": _percentiles([1000 * (r.resumed_at - r.lost_at) for r in resumed if r.resumed_at]),
        "items_seen_before_loss": sum(len(resume.items_before) for resume in resumed),
        "items_lost": sum(resume.items_lost for resume in resumed),
        "answers_in_flight_lost": sum(response.status == "connection_lost" for response in responses),
    }


def stale_records(result: LoadResult) -> list[dict[str, Any]]:
    """Every response with stale audio, in the order it was read: kind, session, bytes, and
    the events that came before its first stale delta."""
    records = [
        {"session": log.index, "at_s": round(stale.at - result.started_at, 3), **asdict(stale)}
        for log in result.logs
        for stale in log.stale.values()
    ]
    return sorted(records, key=lambda record: record["at_s"])


def _percentiles(values: list[float]) -> dict[str, float]:
    stats: dict[str, float] = {"count": len(values)}
    if not values:
        return stats
    stats.update({f"p{p}": round(float(np.percentile(values, p)), 1) for p in PERCENTILES})
    return stats


def _leaked(turns: list[Turn], prompts: PromptSet) -> int:
    """Answers that name a question this session had not asked (so: another session's)."""
    leaks, asked = 0, set()
    for turn in turns:
        asked.add(turn.prompt.number)
        if turn.response is None or not turn.response.transcript:
            continue
        named = prompts.named_in(turn.response.transcript)
        leaks += bool(named - asked) and turn.prompt.number not in named
    return leaks


def _cut_short(turn: Turn, calibrated: dict[int, int], prompts: PromptSet) -> bool:
    response = turn.response
    expected = calibrated.get(turn.prompt.number)
    comparable = prompts.history_free or turn.index == 0
    if response is None or response.status != "completed" or not expected or not comparable:
        return False
    return len(response.transcript.split()) < CUT_SHORT * expected


def markdown(summary: dict[str, Any]) -> str:
    config, counts = summary["config"], summary["counts"]
    lines = [
        f"# Load test: {config['sessions']} sessions x {config['turns']} turns, "
        f"interrupt rate {config['interrupt_rate']}, cancel rate {config['cancel_rate']}, "
        f"backchannel rate {config['backchannel_rate']}, pause rate {config['pause_rate']}, "
        f"turn detection {config['turn_detection'] or 'the server default'}",
        "",
        f"Server model `{summary['server_info']['model']}`, {summary['duration_s']} s, "
        f"{summary['completed_turns_per_s']} completed turns/s.",
        "",
        "| counter | value |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in counts.items() if name != "errors"),
        f"| errors | {counts['errors'] or 0} |",
        "",
        "| latency (ms) | count | p50 | p90 | p95 | p99 |",
        "|---|---|---|---|---|---|",
        *(
            f"| {name} | {s['count']} | {s['p50']} | {s['p90']} | {s['p95']} | {s['p99']} |"
            for name, s in summary["latency_ms"].items()
        ),
        *_stale_table(summary["stale"]),
    ]
    return "\n".join(lines) + "\n"


def _stale_table(stale: list[dict[str, Any]]) -> list[str]:
    if not stale:
        return []
    rows = (
        f"| {r['at_s']} | {r['session']} | `{r['response_id']}` | {r['kind']} | {r['deltas']} | {r['bytes']} "
        f"| {' · '.join(r['events_before'][-4:])} |"
        for r in stale
    )
    header = "| at s | session | response | kind | deltas | bytes | last events before it |"
    return ["", "Stale audio, by response:", "", header, "|---|---|---|---|---|---|---|", *rows]


def write(result: LoadResult, out: Path) -> dict[str, Any]:
    """Write ``out`` (JSON), ``out`` with ``.md``, and the plots beside it; return the summary."""
    summary = summarize(result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    out.with_suffix(".md").write_text(markdown(summary))
    summary["plots"] = [str(path) for path in plot(summary, result, out.with_suffix(""))]
    return summary
