"""The command-line options benchmarks share, each declared once here.

A benchmark takes the ones it needs with its own defaults (``add(parser, sessions=40,
duration_s=90.0)``, or ``REQUIRED``), so ``--sessions`` means the same, is checked the same and
is explained the same in every ``s2s-bench`` command.
"""

import argparse
from pathlib import Path
from typing import Any

REQUIRED: Any = object()
"""The default of an option the benchmark cannot do without."""

DATA_PATHS = ("haproxy", "proxy")
"""How connections reach the ingress replicas: Ray's HAProxy, or Serve's Python proxy."""


def rate(text: str) -> float:
    """A share of answers, 0 to 1."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a rate is a probability from 0 to 1, not {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def server_url(text: str) -> str:
    """The server's ``ws://HOST:PORT/v1``; the Realtime endpoint's own URL is taken too, so a
    URL copied from ``make run``'s banner works for every benchmark."""
    if not text.startswith(("ws://", "wss://")):
        raise argparse.ArgumentTypeError(f"must be a ws:// or wss:// URL, not {text!r}")
    return text.rstrip("/").removesuffix("/realtime")


SHARED: dict[str, dict[str, Any]] = {
    "session_counts": {"type": positive_int, "nargs": "+", "help": "concurrent sessions: one run at each count"},
    "url": {"type": server_url, "help": "ws://HOST:PORT/v1 of a running server"},
    "sessions": {"type": positive_int, "help": "concurrent sessions"},
    "turns": {"type": positive_int, "help": "questions per session"},
    "duration_s": {"type": positive_float, "help": "stop starting turns after this long"},
    "ramp_s": {"type": non_negative, "help": "start the sessions over this long"},
    "interrupt_rate": {"type": rate, "help": "share of answers cut by speech"},
    "cancel_rate": {"type": rate, "help": "share of answers cut by response.cancel"},
    "seed": {"type": int, "help": "the random choices' seed: the same seed, the same run"},
    "out": {"type": Path, "help": "where the report goes (JSON; Markdown and PNG plots beside it)"},
    "out_dir": {"type": Path, "help": "where the reports go"},
    "config": {"type": Path, "help": "the Serve config of the app to start"},
    "data_path": {"choices": DATA_PATHS, "help": "haproxy: Ray's HAProxy before the ingress; proxy: Serve's proxy"},
}


def add(parser: argparse.ArgumentParser, **defaults: Any) -> None:
    """Adds the shared options named, each with the default given (``None``: none; ``REQUIRED``)."""
    for name, default in defaults.items():
        spec = dict(SHARED[name])
        if default is REQUIRED:
            spec["required"] = True
        else:
            spec["default"] = default
            if default is not None:
                spec["help"] += f" (default {default})"
        flag = "--sessions" if name == "session_counts" else "--" + name.replace("_", "-")
        parser.add_argument(flag, dest=name, **spec)
