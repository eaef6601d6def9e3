"""``s2s-bench <name> [options]``: every benchmark and scenario behind one command.

Each is one module with ``add_arguments(parser)`` and ``main(args)`` (plain or async), ending
with one JSON object on stdout; a module is imported only when its name is asked for, so
``s2s-bench --help`` loads no model. A new benchmark is a module in ``loadtest/benchmarks/``
(or ``loadtest/scenarios/`` when it starts or changes a cluster) and one line below.
"""

import argparse
import asyncio
import importlib
import inspect
import sys
from types import ModuleType

BENCHMARKS: dict[str, str] = {
    "load": "loadtest.benchmarks.load",
    "telephony": "loadtest.benchmarks.telephony",
    "greeting": "loadtest.benchmarks.greeting",
    "handlers": "loadtest.benchmarks.handlers",
    "cancel": "loadtest.benchmarks.cancel",
    "vad": "loadtest.benchmarks.vad",
    "backchannel-words": "loadtest.benchmarks.backchannel_words",
    "interruption-table": "loadtest.benchmarks.interruption_table",
    "client": "loadtest.benchmarks.client_cost",
    "e2e": "loadtest.benchmarks.e2e",
    "quality": "loadtest.benchmarks.quality",
    "stt-decode": "loadtest.benchmarks.stt_decode",
    "turns": "loadtest.benchmarks.turns",
    "phone": "loadtest.benchmarks.phone",
    "mulaw": "loadtest.benchmarks.mulaw",
    "cpu": "loadtest.benchmarks.cpu",
    "results-plots": "loadtest.benchmarks.results_plots",
    "scaling": "loadtest.scenarios.scaling",
    "two-node": "loadtest.scenarios.two_node",
    "soak": "loadtest.scenarios.soak",
    "disruption": "loadtest.scenarios.disruption",
    "phone-rollout": "loadtest.scenarios.phone_rollout",
    "cluster-swap": "loadtest.scenarios.cluster_swap",
}


def parser_for(name: str) -> tuple[argparse.ArgumentParser, ModuleType]:
    """The benchmark's module and its parser (``prog`` is the command a user types)."""
    module = importlib.import_module(BENCHMARKS[name])
    doc = (module.__doc__ or "").strip()
    parser = argparse.ArgumentParser(
        prog=f"s2s-bench {name}",
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 1)[1] if "\n\n" in doc else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    return parser, module


def run(name: str, argv: list[str]) -> int:
    """Parses ``argv`` for benchmark ``name`` and runs it; its exit code (0 when it returns none)."""
    parser, module = parser_for(name)
    args = parser.parse_args(argv)
    check = getattr(module, "check_arguments", None)
    if check is not None:
        check(parser, args)
    outcome = module.main(args)
    if inspect.iscoroutine(outcome):
        outcome = asyncio.run(outcome)
    return int(outcome or 0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in BENCHMARKS:
        listing = "\n".join(f"  {name}" for name in BENCHMARKS)
        print(f"usage: s2s-bench <name> [options]  (s2s-bench <name> --help)\n\nbenchmarks:\n{listing}")
        wrong = bool(argv) and argv[0] not in ("-h", "--help")
        if wrong:
            print(f"s2s-bench: no benchmark named {argv[0]!r}", file=sys.stderr)
        return 2 if wrong or not argv else 0
    return run(argv[0], argv[1:])


def load_main() -> int:
    """``s2s-loadtest``: the load harness, as ``s2s-bench load``."""
    return main(["load", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
