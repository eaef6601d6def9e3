"""The chart's Grafana dashboard: shipped for the sidecar, and true to the code. Every code
the server can send is on it (collected from the source, so a new ``ProtocolError`` code
without its row fails here), and every metric it queries is one the app or Ray Serve
defines, of the kind the query assumes (a renamed metric fails here, not on a blank panel).
"""

import ast
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import helm_python as helm
import pytest
import ray
import yaml

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""

ROOT = Path(__file__).parents[2]
CHART = ROOT / "helm" / "s2s-serve"
DASHBOARD = CHART / "dashboards" / "s2s-serve.json"
TEMPLATE = "s2s-serve/templates/grafana-dashboard.yaml"
RAY_SERVE = Path(ray.__file__).parent / "serve"
FILTER = 'namespace=~"$namespace",application=~"$application"'
"""Every app query's label filter: the dashboard's namespace and Serve application variables."""

CARRIERS = {"ProtocolError", "StageFailure"}
"""Exceptions whose first argument (or ``code=``) is a code that reaches the client in an
``error`` event or a failed event; their subclasses (``LimitExceeded``) are found too."""
REFUSALS = {"refusal": 1, "deny": 2}
"""``deployments.access``'s HTTP refusals, before any session: (status, code) by position."""
METRIC_KINDS = {"Counter", "Gauge", "Histogram"}
SUFFIXES = {"Counter": ("_total",), "Gauge": ("",), "Histogram": ("_bucket", "_sum", "_count")}
"""What Prometheus calls each kind's series: Ray prefixes ``ray_`` and, as OpenMetrics
says, a counter's series ends ``_total`` (``ray/_private/metrics_agent.py``)."""


class Unresolved(Exception):
    """A code made in a way this collector cannot read: teach it, do not skip it."""


class _Module:
    """One source file, and its ``Literal`` aliases (``StageName``): codes built as f-strings
    over a parameter of such a type take each of its values."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tree = ast.parse(path.read_text(), str(path))
        self.literals: dict[str, list[str]] = {}
        for node in self.tree.body:
            value = node.value if isinstance(node, ast.Assign) else None
            if isinstance(value, ast.Subscript) and ast.unparse(value.value) == "Literal":
                elements = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
                values = [str(e.value) for e in elements if isinstance(e, ast.Constant)]
                self.literals |= {t.id: values for t in getattr(node, "targets", []) if isinstance(t, ast.Name)}

    def scoped(self) -> Iterator[tuple[ast.AST, ast.FunctionDef | ast.AsyncFunctionDef | None, str | None]]:
        """Every node, with the innermost function and class around it."""

        def walk(node: ast.AST, function: Any, cls: str | None) -> Iterator[tuple[ast.AST, Any, str | None]]:
            for child in ast.iter_child_nodes(node):
                yield child, function, cls
                inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
                yield from walk(child, inner, child.name if isinstance(child, ast.ClassDef) else cls)

        yield from walk(self.tree, None, None)

    def strings(self, expr: ast.expr, function: Any, seen: frozenset[str] = frozenset()) -> set[str]:
        """The codes ``expr`` can be: literals, both sides of ``or`` and ``if``, an f-string
        over a ``Literal`` parameter, a local variable's assignments. A parameter or an
        attribute passes on a code made elsewhere (collected there): nothing new."""
        if isinstance(expr, ast.Constant):
            return {expr.value} if isinstance(expr.value, str) else set()
        if isinstance(expr, ast.BoolOp):
            return set().union(*(self.strings(v, function, seen) for v in expr.values))
        if isinstance(expr, ast.IfExp):
            return self.strings(expr.body, function, seen) | self.strings(expr.orelse, function, seen)
        if isinstance(expr, ast.JoinedStr):
            return self._fstring(expr, function)
        if isinstance(expr, ast.Attribute):
            return set()
        if isinstance(expr, ast.Name):
            if expr.id in seen or expr.id in _parameters(function):
                return set()
            assigned = list(_assignments(expr.id, function or self.tree))
            if not assigned:
                raise Unresolved(f"{self.path}:{expr.lineno}: where does {expr.id!r} come from?")
            return set().union(*(self.strings(value, function, seen | {expr.id}) for value in assigned))
        raise Unresolved(f"{self.path}:{expr.lineno}: a code from {ast.unparse(expr)!r}")

    def _fstring(self, expr: ast.JoinedStr, function: Any) -> set[str]:
        """``f"{stage}_timeout"`` for each value of ``stage: StageName``."""
        codes = {""}
        for part in expr.values:
            if isinstance(part, ast.Constant):
                options = [str(part.value)]
            elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name):
                parameter = _parameters(function).get(part.value.id)
                annotation = parameter.annotation if parameter is not None else None
                if not isinstance(annotation, ast.Name) or annotation.id not in self.literals:
                    raise Unresolved(f"{self.path}:{expr.lineno}: {ast.unparse(expr)} over what values?")
                options = self.literals[annotation.id]
            else:
                raise Unresolved(f"{self.path}:{expr.lineno}: {ast.unparse(expr)}")
            codes = {code + option for code in codes for option in options}
        return codes


def _parameters(function: Any) -> dict[str, ast.arg]:
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
        return {}
    arguments = function.args
    return {a.arg: a for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}


def _assignments(name: str, scope: ast.AST) -> Iterator[ast.expr]:
    """What ``name`` is set to in ``scope``; from ``a, b = (x, y) if c else (z, w)`` the
    elements at ``name``'s place."""

    def at(value: ast.expr, index: int) -> Iterator[ast.expr]:
        if isinstance(value, ast.Tuple):
            yield value.elts[index]
        elif isinstance(value, ast.IfExp):
            yield from at(value.body, index)
            yield from at(value.orelse, index)
        else:
            raise Unresolved(f"line {value.lineno}: {name} unpacked from {ast.unparse(value)!r}")

    for node in ast.walk(scope):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id == name:
                yield node.value
            elif isinstance(target, ast.Tuple):
                for index, element in enumerate(target.elts):
                    if isinstance(element, ast.Name) and element.id == name:
                        yield from at(node.value, index)


def _called(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _argument(node: ast.Call, position: int, keyword: str) -> ast.expr | None:
    if len(node.args) > position:
        return node.args[position]
    return next((k.value for k in node.keywords if k.arg == keyword), None)


def _modules(root: Path) -> list[_Module]:
    return [_Module(path) for path in sorted(root.rglob("*.py"))]


def _carriers(modules: list[_Module]) -> set[str]:
    """``CARRIERS`` and every class derived from one, however deep."""
    carriers = set(CARRIERS)
    classes = [node for module in modules for node in ast.walk(module.tree) if isinstance(node, ast.ClassDef)]
    while derived := {
        c.name for c in classes if c.name not in carriers and {ast.unparse(b) for b in c.bases} & carriers
    }:
        carriers |= derived
    return carriers


def error_codes(root: Path = ROOT / "deployments") -> set[str]:
    """Every code the server can send in an ``error`` event (or a failed one): the first
    argument of each ``ProtocolError``, ``StageFailure`` or subclass made in ``deployments/``
    (``cls(...)`` in their own classmethods too), every ``code=`` and every ``"code"`` of
    an event written as a dict."""
    modules = _modules(root)
    carriers = _carriers(modules)
    codes: set[str] = set()
    for module in modules:
        for node, function, cls in module.scoped():
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "code":
                        codes |= module.strings(value, function)
            if not isinstance(node, ast.Call):
                continue
            called = _called(node)
            if called in carriers or (called == "cls" and cls in carriers):
                code = _argument(node, 0, "code")
                if code is None:
                    raise Unresolved(f"{module.path}:{node.lineno}: {ast.unparse(node)} has no code")
                codes |= module.strings(code, function)
            else:
                codes |= set().union(*(module.strings(k.value, function) for k in node.keywords if k.arg == "code"))
    return codes


def http_refusals() -> set[tuple[int, str]]:
    """(status, code) of every HTTP refusal (``deployments.access.refusal``/``deny``) whose
    status is a literal: refused before any session."""
    found: set[tuple[int, str]] = set()
    for module in _modules(ROOT / "deployments"):
        for node, function, _ in module.scoped():
            if isinstance(node, ast.Call) and (position := REFUSALS.get(_called(node) or "")) is not None:
                status, code = _argument(node, position - 1, "status"), _argument(node, position, "code")
                if isinstance(status, ast.Constant) and isinstance(status.value, int) and code is not None:
                    found |= {(status.value, c) for c in module.strings(code, function)}
    return found


def defined_metrics(root: Path) -> dict[str, str]:
    """``{name: kind}`` of every Counter, Gauge and Histogram made under ``root``, names as
    regular expressions (Serve makes some with f-strings: ``serve_num_{protocol}_...``)."""
    metrics: dict[str, str] = {}
    for path in root.rglob("*.py"):
        if "tests" in path.parts:
            continue
        with warnings.catch_warnings():  # Ray's source: its invalid escapes are not ours to fail on
            warnings.simplefilter("ignore")
            tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or (kind := _called(node)) not in METRIC_KINDS:
                continue
            name = _argument(node, 0, "name")
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                metrics[re.escape(name.value)] = str(kind)
            elif isinstance(name, ast.JoinedStr):
                parts = [re.escape(str(p.value)) if isinstance(p, ast.Constant) else "[a-z]+" for p in name.values]
                metrics["".join(parts)] = str(kind)
    return metrics


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def prometheus_queries(board: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(panel title, target) of every Prometheus query, the variables' included."""
    for panel in panels(board):
        if panel.get("datasource", {}).get("uid") == "${datasource}":
            for target in panel.get("targets", []):
                yield panel["title"], target
    for variable in board["templating"]["list"]:
        if variable.get("datasource", {}).get("uid") == "${datasource}":
            yield f"variable {variable['name']}", {"expr": variable["definition"]}


def queried_metrics(board: dict[str, Any]) -> set[str]:
    return {name for _, target in prometheus_queries(board) for name in re.findall(r"\bray_[a-z0-9_]+", target["expr"])}


def test_the_panels_are_laid_out_and_described() -> None:
    """Hand-kept JSON: unique ids and query refIds, on Grafana's 24-column grid, and each
    panel says what it shows (the docs' panel list repeats it)."""
    board = dashboard()
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        refs = [target["refId"] for target in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), panel["title"]
        assert panel["type"] in ("row", "text") or panel["description"], panel["title"]
        if panel.get("datasource", {}).get("uid") == "${datasource}":
            assert all(FILTER in target["expr"] for target in panel["targets"]), panel["title"]


def test_every_error_code_the_server_sends_has_its_own_row() -> None:
    codes = error_codes()
    assert {"invalid_json", "event_too_large", "llm_timeout", "tts_unavailable", "response_failed"} <= codes
    (table,) = (p for p in panels(dashboard()) if p["title"] == "Errors by code (over the range)")
    rows = {target["legendFormat"]: target["expr"] for target in table["targets"]}
    missing, gone = sorted(codes - rows.keys()), sorted(rows.keys() - codes)
    assert not missing, f"add a target to {DASHBOARD.name}'s errors table for each of: {missing}"
    assert not gone, f"no code sends these any more: remove their rows from {DASHBOARD.name}: {gone}"
    for code, expr in rows.items():
        assert expr == f'sum(increase(ray_s2s_errors_total{{code="{code}",{FILTER}}}[$__range])) or vector(0)'


def test_the_collector_reads_codes_however_they_are_made_and_refuses_to_guess(tmp_path: Path) -> None:
    (tmp_path / "source.py").write_text(
        """
from typing import Literal
Part = Literal["asr", "tts"]
class TooBig(LimitExceeded): ...
class Worse(TooBig): ...
def fail(part: Part, failure):
    code, why = (failure.code, failure.message) if failure else ("generic_failed", "failed")
    raise ProtocolError(code, why)
def more(part: Part):
    Worse(code=f"{part}_gone", message="gone")
    send({"type": "x", "code": "from_a_dict"})
    RealtimeError(type="server_error", code="from_a_keyword")
"""
    )
    assert error_codes(tmp_path) == {"generic_failed", "asr_gone", "tts_gone", "from_a_dict", "from_a_keyword"}
    (tmp_path / "guess.py").write_text("def f(x):\n    ProtocolError(x.upper(), 'm')\n")
    with pytest.raises(Unresolved, match="x.upper"):
        error_codes(tmp_path)


def test_every_http_refusal_code_is_listed_with_its_status() -> None:
    refusals = http_refusals()
    assert (403, "access_refused") in refusals and (403, "resume_refused") in refusals
    (listing,) = (p for p in panels(dashboard()) if p["title"] == "Refusal codes")
    lines = listing["options"]["content"]
    missing = sorted(f"{status} {code}" for status, code in refusals if f"| `{code}` | {status} |" not in lines)
    assert not missing, f"add a row to {DASHBOARD.name}'s 'Refusal codes' for each of: {missing}"


def test_every_metric_queried_is_defined_with_the_kind_the_query_assumes() -> None:
    ours = defined_metrics(ROOT / "deployments")
    serve = defined_metrics(RAY_SERVE)
    assert {"s2s_turns", "s2s_voice_to_voice_seconds"} <= ours.keys()
    queried = queried_metrics(dashboard())
    unknown = []
    for series in sorted(queried):
        name = series.removeprefix("ray_")
        kinds = {
            kind
            for pattern, kind in (ours | serve).items()
            for suffix in SUFFIXES[kind]
            if re.fullmatch(pattern + re.escape(suffix), name)
        }
        if not kinds:
            unknown.append(series)
    assert not unknown, f"queried but defined nowhere (or not of that kind): {unknown}"
    shown = {re.sub(r"_(total|bucket|sum|count)$", "", s.removeprefix("ray_")) for s in queried}
    assert not ours.keys() - shown, f"the app's metrics missing from the dashboard: {sorted(ours.keys() - shown)}"


def test_histograms_are_read_as_quantiles_and_counters_as_rates() -> None:
    """A counter's raw total or a bucket's raw count on a graph is a mistake: read them over time."""
    for title, target in prometheus_queries(dashboard()):
        expr = target["expr"]
        for bucket in re.findall(r"ray_[a-z0-9_]+_bucket", expr):
            assert "histogram_quantile(" in expr and "by (le" in expr, f"{title}: {bucket} not as a quantile"
        for counter in re.findall(r"ray_[a-z0-9_]+_total", expr):
            assert re.search(rf"(rate|increase)\({counter}\b", expr), f"{title}: {counter} not as a rate"


def test_the_slow_turn_link_opens_a_traceql_search_on_the_tracing_datasource() -> None:
    board = dashboard()
    (panel,) = (p for p in panels(board) if p["title"] == "Voice-to-voice latency")
    (link,) = panel["fieldConfig"]["defaults"]["links"]
    url = urlsplit(link["url"])
    assert url.path == "/explore"
    query = parse_qs(url.query)
    assert query["schemaVersion"] == ["1"]
    (pane,) = json.loads(query["panes"][0]).values()
    (search,) = pane["queries"]
    assert pane["datasource"] == search["datasource"]["uid"] == "${tracing}"
    assert search["datasource"]["type"] == "tempo" and search["queryType"] == "traceql"
    assert search["query"] == '{ name = "agent_turn" && span.lk.e2e_latency > ${slow_turn_s} }'
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["tracing"]["query"] == "tempo" and variables["datasource"]["query"] == "prometheus"
    assert "slow_turn_s" in variables


def render(values: dict[str, Any] | None = None) -> dict[str, Any]:
    manifests = helm.Chart.load(CHART).render(values, name="voice", namespace="agents")
    return {path: yaml.safe_load(text) for path, text in manifests.items() if path.endswith(".yaml") and text.strip()}


def test_the_chart_ships_the_dashboard_in_a_configmap_the_sidecar_loads() -> None:
    enabled = {"grafana": {"dashboard": {"enabled": True}}}
    report = helm.lint(CHART, enabled, strict=True)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []
    config_map = render(enabled)[TEMPLATE]
    assert config_map["kind"] == "ConfigMap"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["labels"]["app.kubernetes.io/instance"] == "voice"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "s2s-serve"}
    ((name, text),) = config_map["data"].items()
    assert name == "s2s-serve.json" and json.loads(text) == dashboard()


def test_the_sidecar_label_and_folder_come_from_values_and_the_dashboard_is_off_by_default() -> None:
    sidecar = {
        "label": "example.com/dashboard",
        "labelValue": "voice",
        "folderAnnotation": "k8s-sidecar-target-directory",
    }
    config_map = render({"grafana": {"dashboard": {"enabled": True, "folder": "/tmp/voice", **sidecar}}})[TEMPLATE]
    assert config_map["metadata"]["labels"]["example.com/dashboard"] == "voice"
    assert "grafana_dashboard" not in config_map["metadata"]["labels"]
    assert config_map["metadata"]["annotations"] == {"k8s-sidecar-target-directory": "/tmp/voice"}
    no_folder = render({"grafana": {"dashboard": {"enabled": True, "folder": ""}}})[TEMPLATE]
    assert "annotations" not in no_folder["metadata"]
    assert TEMPLATE not in render()


@pytest.mark.parametrize(
    ("dashboard_values", "where"),
    [({"labelValue": 1}, "labelValue"), ({"label": "not a label"}, "label"), ({"title": "x"}, "")],
    ids=["number-as-label-value", "bad-label-key", "unknown-field"],
)
def test_bad_dashboard_values_get_the_schemas_error(dashboard_values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmError, match=f"at '/grafana/dashboard{'/' + where if where else ''}'"):
        render({"grafana": {"dashboard": {"enabled": True, **dashboard_values}}})
