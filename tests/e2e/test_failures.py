"""A response cut short by a failure is reported as failed, with an error event, never as
completed; the session goes on (synthetic engines, so that the kill lands mid-answer)."""

from collections.abc import Iterator

import pytest
import ray
from ray import serve
from ray.util.state import list_actors
from realtime_client import open_client

from deployments.app import build_app

APP = "voice-failures"


@pytest.fixture(scope="module")
def slow_synthetic_url(serve_port: int) -> Iterator[str]:
    """Synthetic engines whose LLM takes seconds per answer."""
    tiny = {"num_cpus": 0.01}
    config = {
        "synthetic": {"answer_words": 40, "tokens_per_s": 8},
        "ingress": {"max_sessions": 4, "deployment": {**tiny, "max_ongoing_requests": 8}},
        **{stage: {"deployment": {**tiny}} for stage in ("vad", "stt", "llm", "tts")},
    }
    serve.run(build_app(config), name=APP, route_prefix="/failures")
    yield f"ws://127.0.0.1:{serve_port}/failures/v1"
    serve.delete(APP)


def kill_llm_replica() -> None:
    (replica,) = list_actors(
        address=ray.get_runtime_context().gcs_address,
        filters=[("class_name", "=", f"ServeReplica:{APP}:LLM"), ("state", "=", "ALIVE")],
    )
    ray.kill(ray.get_actor(replica.name, namespace="serve"), no_restart=True)


async def ask(client, text: str) -> None:
    await client.connection.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    await client.connection.response.create()


async def test_a_replica_dying_mid_answer_fails_the_response_visibly(slow_synthetic_url: str) -> None:
    async with open_client(slow_synthetic_url) as client:
        await ask(client, "Question 5.")
        first = await client.until(lambda e: e.type == "response.output_audio.delta")
        kill_llm_replica()
        done = await client.until(lambda e: e.type == "response.done")
        errors = list(client.of_type("error"))

        # The session goes on: the next answer comes from the replica Serve starts instead (a
        # request sent before Serve has noticed the death may still fail, visibly).
        for _ in range(3):
            await ask(client, "Question 6.")
            again = await client.until(lambda e: e.type == "response.done", timeout_s=120)
            if again.response.status == "completed":
                break

    assert done.response.id == first.response_id
    assert done.response.status == "failed"
    assert done.response.status_details.error.code == "response_failed"
    assert [(e.error.type, e.error.code) for e in errors] == [("server_error", "response_failed")]
    assert again.response.status == "completed"
