"""``s2s-bench``: every benchmark answers ``--help``, every command the docs give names a
benchmark and only options it has, and the load client imports nothing of the server."""

import ast
import re
from pathlib import Path

import pytest

from loadtest import cli

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""

ROOT = Path(__file__).parents[2]
COMMAND = re.compile(r"s2s-(?:bench ([a-z][a-z0-9-]*)|loadtest)\b([^`\n]*(?:\\\n[^`\n]*)*)")
"""A documented command: the benchmark's name (none: ``s2s-loadtest``, the load harness) and
what follows on its line, backslash-continued lines included, up to the end of a code span."""


def documents() -> list[Path]:
    """Where users read commands: the READMEs, the docs and their scripts, the Makefile."""
    found = [ROOT / "README.md", ROOT / "Makefile", ROOT / "helm" / "s2s-serve" / "README.md"]
    return found + sorted(p for p in (ROOT / "docs").rglob("*") if p.suffix in (".md", ".sh"))


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """Every ``s2s-bench``/``s2s-loadtest`` command in them: where, which benchmark, its flags."""
    commands = []
    for path in documents():
        for match in COMMAND.finditer(path.read_text()):
            name = match.group(1) or "load"
            flags = re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", match.group(2))
            commands.append((str(path.relative_to(ROOT)), name, flags))
    return commands


@pytest.mark.parametrize("name", list(cli.BENCHMARKS))
def test_every_benchmark_answers_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([name, "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: s2s-bench {name}")


def test_an_unknown_benchmark_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["no-such-bench"]) == 2
    output = capsys.readouterr()
    assert "no benchmark named 'no-such-bench'" in output.err and "two-node" in output.out


def test_every_documented_command_names_a_benchmark_and_its_options() -> None:
    commands = documented_commands()
    assert len(commands) > 40, "the docs give the benchmarks' commands"
    wrong = []
    for where, name, flags in commands:
        if name not in cli.BENCHMARKS:
            wrong.append(f"{where}: no benchmark {name!r}")
            continue
        known = cli.parser_for(name)[0]._option_string_actions
        wrong += [f"{where}: s2s-bench {name} has no {flag}" for flag in flags if flag not in known]
    assert not wrong, "\n".join(wrong)


def test_no_old_benchmark_command_is_left_in_the_docs() -> None:
    old = re.compile(r"python -m loadtest\.\w+|loadtest\.bench_\w+|loadtest/bench_\w+")
    stale = [f"{path.relative_to(ROOT)}: {m.group(0)}" for path in documents() for m in old.finditer(path.read_text())]
    assert not stale, "\n".join(stale)


def test_the_load_client_imports_nothing_of_the_server() -> None:
    """``loadtest/client`` is a client: it may use the model helpers (``handlers``: Piper's
    voice, audio rates), never ``deployments``, ``cancel`` or Ray."""
    server = ("deployments", "cancel", "ray", "cluster")
    imports = []
    for path in (ROOT / "loadtest" / "client").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            imports += [f"{path.name}: {name}" for name in names if name.split(".")[0] in server]
    assert not imports, imports
