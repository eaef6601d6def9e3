"""The Helm chart's RayService on a simulated multi-node Ray cluster of this machine.

Run by ``test_placement.py`` in a process of its own (a driver belongs to one Ray cluster):
``python tests/cluster/simulated_gpu_cluster.py REPORT.json``.

The nodes are shaped as the chart renders them with its default values: a head that takes no
model work (``num-cpus: 0``) and the worker group's pods, each declaring the group's GPUs and
CPUs. The app is the rendered ``serveConfigV2`` (which equals ``cluster/gpu.yaml``) with the
synthetic engines in place of the four models. Ray schedules logical GPUs exactly as it does
physical ones, so no GPU is needed to see where each replica lands.

The report says where every replica went (node, ``ray.get_gpu_ids()``) after start, after one
more TTS replica, and after a worker node was lost mid-answer and replaced (as KubeRay
replaces a lost pod), and what the sessions saw meanwhile.
"""

import asyncio
import base64
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import helm_python as helm
import numpy as np
import ray
import websockets
import yaml
from ray import serve
from ray.cluster_utils import Cluster
from ray.dashboard.modules.serve.sdk import ServeSubmissionClient
from ray.serve.context import _get_global_client
from ray.serve.schema import ServeDeploySchema
from ray.util.state import list_actors

from deployments.placement import ReplicaPlacement
from deployments.ports import free_port
from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, resample
from handlers.synthetic import question_tone

ROOT = Path(__file__).parents[2]
CHART = ROOT / "helm" / "s2s-serve"
APP = "voice"
DEPLOYMENTS = ("RealtimeIngress", "VAD", "STT", "LLM", "TTS")
"""With synthetic engines: the end-of-turn model's stand-in runs in the ingress."""
ANSWER_WORDS = 40
SYNTHETIC = {"answer_words": ANSWER_WORDS, "tokens_per_s": 10}
"""Answers of several seconds, so that a node can be lost while one is being spoken."""
STAGE_TIMEOUT_S = 10
DRAIN_S = 5
REPORT_TIMEOUT_S = 60
"""How long every replica of a deployment has to answer `placement()`."""


def rendered_rayservice() -> dict[str, Any]:
    manifests = helm.Chart.load(CHART).render(None, name="voice", namespace="agents")
    rendered: dict[str, Any] = yaml.safe_load(manifests["s2s-serve/templates/rayservice.yaml"])
    return rendered


def node_shapes(spec: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """Ray node arguments of the head and of every worker pod the chart asks for, by group."""
    cluster = spec["rayClusterConfig"]
    head_params = cluster["headGroupSpec"]["rayStartParams"]
    head = {"num_cpus": int(head_params["num-cpus"]), "num_gpus": int(head_params["num-gpus"])}
    workers = []
    for group in cluster["workerGroupSpecs"]:
        (container,) = group["template"]["spec"]["containers"]
        shape = {
            "num_cpus": int(container["resources"]["limits"]["cpu"]),
            "num_gpus": int(group["rayStartParams"]["num-gpus"]),
            "labels": group.get("labels", {}),
        }
        workers += [(group["groupName"], shape)] * group["replicas"]
    return head, workers


def serve_config(spec: dict[str, Any], port: int, tts_replicas: int) -> dict[str, Any]:
    """The rendered ``serveConfigV2`` with each model handler replaced by the synthetic engines
    and at least ``tts_replicas`` TTS replicas. The proxy runs on the head only, on ``port``:
    every simulated node shares this machine's address."""
    config = yaml.safe_load(spec["serveConfigV2"])
    config["proxy_location"] = "HeadOnly"
    config["http_options"] = {"host": "127.0.0.1", "port": port}
    (app,) = config["applications"]
    args = app["args"]
    for stage in ("vad", "stt", "llm", "tts"):
        args[stage].pop("handler", None)
    args["tts"]["deployment"]["autoscaling_config"]["min_replicas"] = tts_replicas
    args["ingress"]["stage_timeout_s"] = STAGE_TIMEOUT_S
    args["ingress"]["drain_s"] = DRAIN_S  # the chart's 5 minutes, shortened for the test
    args["ingress"]["deployment"]["graceful_shutdown_timeout_s"] = DRAIN_S + 10
    args["synthetic"] = SYNTHETIC
    ServeDeploySchema.model_validate(config)
    return config


class Placements:
    """Every running replica's own report of where it is."""

    def __init__(self, names: dict[str, str]) -> None:
        self._names = names
        """Node id -> ``head`` / ``worker-N``."""

    async def rows(self) -> list[dict[str, Any]]:
        running = serve.status().applications[APP].deployments
        rows: list[dict[str, Any]] = []
        for deployment in DEPLOYMENTS:
            expected = running[deployment].replica_states.get("RUNNING", 0)
            rows += [
                {
                    "deployment": seen.deployment,
                    "replica": seen.replica,
                    "node": self._names.get(seen.node_id, seen.node_id),
                    "gpu_ids": seen.gpu_ids,
                }
                for seen in await self._reports(deployment, expected)
            ]
        return rows

    @staticmethod
    async def _reports(deployment: str, expected: int) -> list[ReplicaPlacement]:
        """Asks until each of the ``expected`` replicas has answered (the router picks one
        replica per call), for up to ``REPORT_TIMEOUT_S``: a handle learns of a new replica by
        Serve's long poll, and on a loaded machine its router may keep to the one it knows
        for a while (seen: 50 quick rounds of 8 calls all answered by one of two TTS)."""
        handle = serve.get_deployment_handle(deployment, APP)
        seen: dict[str, ReplicaPlacement] = {}
        deadline = time.monotonic() + REPORT_TIMEOUT_S
        while time.monotonic() < deadline:
            for report in await asyncio.gather(*(handle.placement.remote() for _ in range(4 * expected))):
                seen[report.replica] = report
            if len(seen) >= expected:
                return sorted(seen.values(), key=lambda report: report.replica)
            await asyncio.sleep(0.5)  # no event tells when the router's view changes: ask again
        raise RuntimeError(f"{deployment}: {len(seen)} of {expected} replicas answered")


class Client:
    """A Realtime client that speaks synthetic questions and keeps every event it got."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self.events: list[dict[str, Any]] = []

    async def until(self, wanted: str, timeout_s: float = 120) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            while True:
                event = json.loads(await self._connection.recv())
                self.events.append(event)
                if event["type"] == wanted:
                    return event

    async def ask(self, question: int) -> None:
        tone = np.concatenate([question_tone(question, 1.0), np.zeros(SPEECH_RATE, np.float32)])
        pcm = float_to_pcm16(resample(tone, SPEECH_RATE, REALTIME_RATE))
        step = REALTIME_RATE * 2 // 10
        for offset in range(0, len(pcm), step):
            audio = base64.b64encode(pcm[offset : offset + step]).decode()
            await self._connection.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["type"] == kind]


def outcome(done: dict[str, Any], client: Client) -> dict[str, Any]:
    """What a client can tell of one response from its ``response.done`` and the events."""
    response = done["response"]
    output = response["output"]
    transcript = output[0]["content"][0].get("transcript", "") if output else ""
    after = client.events[client.events.index(done) + 1 :]
    return {
        "status": response["status"],
        "transcript": transcript,
        "error_code": ((response.get("status_details") or {}).get("error") or {}).get("code"),
        "errors": [event["error"] for event in client.of_type("error")],
        "audio_after_done": sum(
            1
            for event in after
            if event["type"] == "response.output_audio.delta" and event["response_id"] == response["id"]
        ),
    }


async def converse(url: str, question: int) -> dict[str, Any]:
    async with websockets.connect(url, max_size=None) as connection:
        client = Client(connection)
        await client.until("session.created")
        await client.ask(question)
        return outcome(await client.until("response.done"), client)


async def wait_until_serving(
    targets: dict[str, int], lost: frozenset[str] = frozenset(), timeout_s: float = 240
) -> float:
    """Seconds until every deployment runs its target replicas and none of the ``lost``
    replica ids runs (Serve's status has no event to wait on, so it is polled). Without
    ``lost``, a wait right after a node loss returned at once, before the controller had
    noticed it, and the next answer went to the dead replica (a CI run, 2026-12-05)."""
    started = time.monotonic()
    while True:
        app = serve.status().applications.get(APP)
        deployments = app.deployments if app is not None else {}
        running = {name: status.replica_states.get("RUNNING", 0) for name, status in deployments.items()}
        healthy = all(status.status == "HEALTHY" for status in deployments.values())
        replaced = not lost & running_replica_ids()
        if healthy and replaced and all(running.get(name, 0) >= count for name, count in targets.items()):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"not serving after {timeout_s} s: {deployments}")
        await asyncio.sleep(1.0)


def running_replica_ids() -> set[str]:
    """The ids of the app's replicas that the controller counts as running."""
    details = _get_global_client().get_serve_details()["applications"].get(APP, {"deployments": {}})
    return {
        replica["replica_id"]
        for deployment in details["deployments"].values()
        for replica in deployment["replicas"]
        if replica["state"] == "RUNNING"
    }


def actor_nodes(names: dict[str, str], class_name: str) -> list[str]:
    """Where the ingress's actors of ``class_name`` run (its first session started them)."""
    actors = list_actors(
        address=ray.get_runtime_context().gcs_address,
        filters=[("class_name", "=", class_name), ("state", "=", "ALIVE")],
    )
    return sorted(names.get(actor.node_id, actor.node_id) for actor in actors)


class SimulatedCluster:
    """The chart's nodes as Ray nodes of this machine, named by group (``gpu-2``)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        head, self._workers = node_shapes(spec)
        self.cluster = Cluster(
            initialize_head=True, head_node_args={**head, "include_dashboard": True, "dashboard_port": free_port()}
        )
        self.names = {self.cluster.head_node.node_id: "head"}
        self.shapes = {"head": head}
        self._count: dict[str, int] = {}
        self.nodes = [self.add(group, shape) for group, shape in self._workers]
        self.cluster.wait_for_nodes()

    def add(self, group: str, shape: dict[str, Any], note: str = "") -> Any:
        node = self.cluster.add_node(**shape)
        self._count[group] = self._count.get(group, 0) + 1
        name = f"{group}-{self._count[group]}{note}"
        self.names[node.node_id] = name
        self.shapes[name] = shape
        return node

    def group_shape(self, group: str) -> dict[str, Any]:
        return next(shape for name, shape in self._workers if name == group)

    def by_name(self, name: str) -> Any:
        return next(node for node in self.nodes if self.names[node.node_id] == name)


async def scenario(simulated: SimulatedCluster, spec: dict[str, Any]) -> dict[str, Any]:
    placements = Placements(simulated.names)
    report: dict[str, Any] = {}
    port = free_port()
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    # Deployed as KubeRay deploys serveConfigV2: through the dashboard's REST API.
    kuberay = ServeSubmissionClient(f"http://{simulated.cluster.head_node.webui_url}")
    targets = {"RealtimeIngress": 1, "VAD": 2, "STT": 1, "LLM": 1, "TTS": 1}

    kuberay.deploy_applications(serve_config(spec, port, tts_replicas=1))
    await wait_until_serving(targets)
    report["placement_at_start"] = await placements.rows()

    kuberay.deploy_applications(serve_config(spec, port, tts_replicas=2))
    targets["TTS"] = 2
    await wait_until_serving(targets)
    report["placement_with_two_tts"] = await placements.rows()
    report["end_to_end"] = await converse(url, 3)
    report["scope_hosts"] = actor_nodes(simulated.names, "ScopeHost")
    report["session_store"] = actor_nodes(simulated.names, "SessionRecords")

    llm_node = next(row["node"] for row in report["placement_with_two_tts"] if row["deployment"] == "LLM")
    async with websockets.connect(url, max_size=None) as connection:
        client = Client(connection)
        await client.until("session.created")
        await client.ask(5)
        await client.until("response.output_audio.delta")
        simulated.cluster.remove_node(simulated.by_name(llm_node), allow_graceful=False)
        lost_at = time.monotonic()
        done = await client.until("response.done")
        report["node_loss"] = {
            "lost": llm_node,
            "hosted": sorted(row["deployment"] for row in report["placement_with_two_tts"] if row["node"] == llm_node),
            "seconds_to_response_done": round(time.monotonic() - lost_at, 2),
            **outcome(done, client),
        }
        group = llm_node.rsplit("-", 1)[0]
        simulated.add(group, simulated.group_shape(group), " (replacement)")
        lost = frozenset(row["replica"] for row in report["placement_with_two_tts"] if row["node"] == llm_node)
        report["seconds_to_serving_again"] = round(await wait_until_serving(targets, lost), 1)
        report["placement_after_replacement"] = await placements.rows()
        await client.ask(6)
        report["same_session_after_replacement"] = outcome(await client.until("response.done"), client)
    report["new_session_after_replacement"] = await converse(url, 7)
    report["node_drain"] = await stop_the_ingress_pod(simulated, url)
    report["nodes"] = simulated.shapes
    return report


@contextlib.asynccontextmanager
async def resumed(url: str, refusals: list[str], attempts: int = 20) -> AsyncIterator[Client]:
    """A session resumed as a client should: a replica that is itself being moved refuses
    it (``server_draining``, 1013) and the client tries again, a second later."""
    for _ in range(attempts):
        async with websockets.connect(url, max_size=None) as connection:
            client = Client(connection)
            first = json.loads(await connection.recv())
            client.events.append(first)
            if first["type"] == "session.created":
                yield client
                return
            refusals.append(first["error"]["code"])
        await asyncio.sleep(1.0)  # a client's backoff, not a wait for an event
    raise RuntimeError(f"not resumed: {refusals}")


async def stop_the_ingress_pod(simulated: SimulatedCluster, url: str) -> dict[str, Any]:
    """Kubernetes stops the CPU pod that holds the ingress (a node upgrade, an eviction): the
    chart's preStop hook (``cluster.prestop``, run as the pod runs it) drains its Ray node. A
    session that asked to be told is told, closed with 1012 and resumed on the replacement
    replica, on a second CPU pod, where it answers from its earlier turn."""
    spare = simulated.add("cpu", simulated.group_shape("cpu"), " (spare)")
    rows = await Placements(simulated.names).rows()
    (before,) = {row["node"] for row in rows if row["deployment"] == "RealtimeIngress"}  # the one CPU pod
    node_id = simulated.by_name(before).node_id
    drain: dict[str, Any] = {"ingress_node_before": before, "spare": simulated.names[spare.node_id]}
    async with websockets.connect(f"{url}?drain_notice=true", max_size=None) as connection:
        client = Client(connection)
        created = (await client.until("session.created"))["session"]
        await client.ask(8)
        await client.until("response.done")
        prestop = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cluster.prestop",
            f"--address={ray.get_runtime_context().gcs_address}",
            f"--node-id={node_id}",
            "--deadline-s=120",
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
        )
        drain["told"] = (await client.until("session.draining"))["closes_in_ms"]
        try:
            await client.until("never")
        except websockets.ConnectionClosed as closed:
            drain["closed_code"] = closed.rcvd.code if closed.rcvd is not None else None
    items = [event["item"]["id"] for event in client.of_type("conversation.item.done")]
    drain["resume_refusals"] = []
    async with resumed(f"{url}?resume_token={created['resume_token']}", drain["resume_refusals"]) as again:
        drain["resumed_same_id"] = again.of_type("session.created")[0]["session"]["id"] == created["id"]
        await again.ask(9)
        drain["answer_after_resume"] = outcome(await again.until("response.done"), again)
        replayed = [event["item"]["id"] for event in again.of_type("conversation.item.done")]
        drain["items_replayed"] = replayed[: len(items)] == items
    stdout, _ = await prestop.communicate()
    drain["prestop"] = {"rc": prestop.returncode, "said": stdout.decode().strip()}
    rows = await Placements(simulated.names).rows()
    drain["ingress_nodes_after"] = sorted({row["node"] for row in rows if row["deployment"] == "RealtimeIngress"})
    return drain


def main(out: Path) -> None:
    spec = rendered_rayservice()["spec"]
    simulated = SimulatedCluster(spec)
    ray.init(address=simulated.cluster.address, log_to_driver=False)
    try:
        report = asyncio.run(scenario(simulated, spec))
    finally:
        serve.shutdown()
        ray.shutdown()
        simulated.cluster.shutdown()
    out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
