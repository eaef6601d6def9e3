"""A session's record outside its socket, and its resume: the store's rules, on both
stores (the ``ray`` store's rules in process, the ``redis`` store on a real redis-server),
and whole sessions on fake stages resumed through the store's real client."""

import asyncio
import contextlib
import hashlib
import json
import secrets
import time
from collections.abc import Callable
from typing import Any, cast

import redis
from blocking_records import BlockingRedisRecords
from fakes import FakeStages, Gate, Harness, InProcessActor, append_audio, speech
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.redis_server import RedisServer
from deployments.keyed_digests import KeyedDigests
from deployments.session_store.ray_records import ActorRecords, SessionRecords
from deployments.session_store.redis_records import RedisRecords
from deployments.session_store.store import ResumeToken, SessionStore
from deployments.session_store.writer import EMPTY_STATE

WINDOW_S = 300.0
KEY = b"the server's key"
DIGESTS = KeyedDigests(b"the session secret")


def digest(secret: str) -> bytes:
    """A digest for the records' rules, which compare digests and never make them."""
    return hashlib.sha256(secret.encode()).digest()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def store_on(records: SessionRecords, key: bytes | None = None) -> tuple[SessionStore, InProcessActor]:
    actor = InProcessActor(records)
    return SessionStore(ActorRecords(actor), WINDOW_S, DIGESTS, key), actor  # type: ignore[arg-type]


def text_item(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def replayed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items a resumed session showed right after ``session.created``."""
    assert events[0]["type"] == "session.created"
    shown = []
    for event in events[1:]:
        if event["type"] not in ("conversation.item.added", "conversation.item.done"):
            break
        shown += [event["item"]] if event["type"] == "conversation.item.done" else []
    return shown


# ---- the store's rules ---------------------------------------------------------------


def test_a_token_resumes_once_and_moves_the_record_to_a_new_epoch(new_records: Any) -> None:
    records = new_records()
    token = ResumeToken.new("sess_a")
    secret = digest(token.secret)
    records.open("sess_a", secret, None, EMPTY_STATE)
    assert records.save("sess_a", 0, {"settings": {}, "items": [{"kind": "x"}]}, secret, None)
    found = records.resume("sess_a", secret, None, digest("next"))
    assert found == (1, {"settings": {}, "items": [{"kind": "x"}]})
    assert records.resume("sess_a", secret, None, digest("again")) is None, "a used token"
    assert not records.save("sess_a", 0, EMPTY_STATE, secret, None), "the connection it was taken from cannot write"
    assert records.save("sess_a", 1, EMPTY_STATE, digest("next"), None)
    assert records.resume("sess_a", digest("next"), None, digest("third")) is not None


def test_a_store_that_restarted_empty_takes_its_open_sessions_records_again(new_records: Any) -> None:
    """Ray restarts a lost store actor with no records (a Redis without persistence restarts
    empty too): an open session's next write is kept, not taken for a resume elsewhere (that
    closed calls on a lost node, CI 2026-12-05), and its token resumes it; the newest epoch
    wins whichever connection writes first."""
    restarted = new_records()
    state = {"settings": {}, "items": [{"kind": "x"}]}
    assert restarted.renew(["sess_a", "sess_b"]) == ["sess_a", "sess_b"], "both to be written again"
    assert restarted.save("sess_a", 0, state, digest("a0"), None)
    assert restarted.renew(["sess_a", "sess_b"]) == ["sess_b"]
    assert restarted.resume("sess_a", digest("a0"), None, digest("a1")) == (1, state)

    assert restarted.save("sess_b", 2, EMPTY_STATE, digest("b2"), None), "a stale connection wrote first"
    assert restarted.save("sess_b", 3, state, digest("b3"), None), "the current one takes it over"
    assert not restarted.save("sess_b", 2, EMPTY_STATE, digest("b2"), None)
    assert restarted.resume("sess_b", digest("b2"), None, digest("n")) is None
    assert restarted.resume("sess_b", digest("b3"), None, digest("b4")) == (4, state)


def test_a_wrong_foreign_or_expired_token_is_refused_and_changes_nothing() -> None:
    clock = Clock()
    records = SessionRecords(WINDOW_S, clock)
    token = ResumeToken.new("sess_a")
    key = hashlib.sha256(KEY).digest()
    records.open("sess_a", digest(token.secret), key, EMPTY_STATE)
    records.open("sess_b", digest("b's secret"), key, EMPTY_STATE)
    assert records.resume("sess_a", digest("guess"), key, digest("n")) is None
    assert records.resume("sess_a", digest(token.secret), None, digest("n")) is None, "no key"
    assert records.resume("sess_a", digest(token.secret), hashlib.sha256(b"other").digest(), digest("n")) is None
    assert records.resume("sess_b", digest(token.secret), key, digest("n")) is None, "another session's secret"
    assert records.resume("sess_nobody", digest(token.secret), key, digest("n")) is None
    clock.now += WINDOW_S - 1
    records.renew(["sess_a"])  # still open: it lives on; sess_b's client left
    clock.now += 2
    assert records.resume("sess_b", digest("b's secret"), key, digest("n")) is None, "expired"
    assert records.resume("sess_a", digest(token.secret), key, digest("n")) == (1, EMPTY_STATE), "untouched"
    clock.now += WINDOW_S
    assert records.resume("sess_a", digest("n"), key, digest("m")) is None, "expired"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_no_made_up_token_resumes_a_session(new_records: Any, text: str) -> None:
    records = new_records()
    token = ResumeToken.new("sess_a")
    records.open("sess_a", digest(token.secret), None, EMPTY_STATE)
    parsed = ResumeToken.parse(text)
    if parsed is not None:
        assert records.resume(parsed.session_id, digest(parsed.secret), None, digest("n")) is None
    near_misses = [str(token)[:-1], str(token) + "x", f"sess_a.{token.secret.upper()}", f"sess_a.{text}"]
    for near in near_misses:
        if near != str(token) and (miss := ResumeToken.parse(near)) is not None:
            assert records.resume(miss.session_id, digest(miss.secret), None, digest("n")) is None
    assert records.resume("sess_a", digest(token.secret), None, digest("n")) is not None


# ---- whole sessions ------------------------------------------------------------------


def stored_items(records: SessionRecords, session_id: str) -> list[dict[str, Any]]:
    return records._records[session_id].state["items"]


async def test_a_resumed_session_keeps_its_id_settings_and_items_and_answers_from_them() -> None:
    """Three sessions through the same stages and store; one loses its socket and resumes:
    it gets its id, settings and items back (replayed in order) and a new token, and its
    next answer's prompt holds its earlier turns and nothing of the others'."""
    stages = FakeStages()
    records = SessionRecords(WINDOW_S)
    store, actor = store_on(records)
    a_stored, b_stored, c_stored = [await store.new_session(with_key=False) for _ in range(3)]
    async with Harness(stages, name="b", stored=b_stored) as b, Harness(stages, name="c", stored=c_stored) as c:
        async with Harness(stages, name="a", stored=a_stored) as a:
            created = a.socket.of_type("session.created")[0]["session"]
            assert created["id"] == a_stored.session_id and created["resume_token"] == a_stored.resume_token
            a.socket.client_sends(type="session.update", session={"type": "realtime", "instructions": "Be brief."})
            a.socket.client_sends(type="conversation.item.create", item=text_item("My name is Ada."))
            for h, question in ((a, 1), (b, 2), (c, 3)):
                append_audio(h.socket, speech(question))
            for h in (a, b, c):
                await h.socket.wait_type("response.done")
            finished = [e["item"]["id"] for e in a.socket.of_type("conversation.item.done")]
            await actor.until(lambda: len(stored_items(records, a_stored.session_id)) == len(finished) == 3)
        assert not b.task.done() and not c.task.done()  # type: ignore[union-attr]

        resumed = await store.resumed_session(a_stored.resume_token, with_key=False)
        assert resumed is not None and resumed.session_id == a_stored.session_id
        assert await store.resumed_session(a_stored.resume_token, with_key=False) is None, (
            "a token opens one connection"
        )
        async with Harness(stages, name="a-again", stored=resumed) as again:
            created = again.socket.of_type("session.created")[0]["session"]
            assert created["id"] == a_stored.session_id and created["resume_token"] == resumed.resume_token
            assert created["instructions"] == "Be brief."
            shown = replayed(again.socket.sent)
            assert [item["id"] for item in shown] == finished
            assert [item["role"] for item in shown] == ["user", "user", "assistant"]
            again.socket.client_sends(type="conversation.item.create", item=text_item("What is my name?"))
            again.socket.client_sends(type="response.create")
            await again.socket.wait_type("response.done")
    assert stages.llm_requests[-1].messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "My name is Ada."},
        {"role": "user", "content": "Question one."},
        {"role": "assistant", "content": "The answer is one. That is all."},
        {"role": "user", "content": "What is my name?"},
    ], "a's turns and nothing of b's or c's"
    assert len(stored_items(records, b_stored.session_id)) == 2, "b's record holds b's turn alone"


async def test_the_answer_in_flight_when_the_socket_is_lost_is_not_kept_and_never_resent() -> None:
    """The socket goes while the answer speaks: the resumed session holds the question
    alone (the answer ended as it ended: cut, never replayed) and is sent nothing of it."""
    stages = FakeStages()
    stages.tts_chunks = 3
    records = SessionRecords(WINDOW_S)
    store, actor = store_on(records)
    stored = await store.new_session(with_key=False)
    async with Harness(stages, name="lost", stored=stored) as lost:
        stages.session_tts_gates["lost"] = gate = Gate()
        gate.close(after=1)  # the answer's first chunk, then it stalls
        append_audio(lost.socket, speech(1))
        cut = await lost.socket.wait_type("response.output_audio.delta")
        lost.socket.client_leaves()
        await lost.task  # type: ignore[misc]
        gate.open()
    await actor.until(lambda: [i["kind"] for i in stored_items(records, stored.session_id)] == ["user_audio"])
    resumed = await store.resumed_session(stored.resume_token, with_key=False)
    assert resumed is not None
    async with Harness(stages, name="resumed", stored=resumed) as again:
        assert [item["role"] for item in replayed(again.socket.sent)] == ["user"]
        again.socket.client_sends(type="conversation.item.create", item=text_item("Go on."))
        again.socket.client_sends(type="response.create")
        await again.socket.wait_type("response.done")
        seen = {e.get("response_id") for e in again.socket.sent} | {e.get("item_id") for e in again.socket.sent}
        assert cut["response_id"] not in seen and cut["item_id"] not in seen


async def test_a_session_that_fails_to_start_releases_its_record_and_a_resume_keeps_its_token() -> None:
    """A resume whose socket fails before it was told its new token hands the record back
    to the token its client holds; neither that record nor a failed new one is renewed."""
    records = SessionRecords(WINDOW_S)
    store, actor = store_on(records)
    resumable, failed_new = await store.new_session(with_key=False), await store.new_session(with_key=False)
    resumed = await store.resumed_session(resumable.resume_token, with_key=False)
    assert resumed is not None
    await store.unstarted(resumed.session_id, with_key=False)
    await store.unstarted(failed_new.session_id, with_key=False)
    calls = len(actor.calls)
    await store._renew_open()  # what the renewal loop would do next: nothing is open
    assert actor.calls[calls:] == [], "no record renewed for a session that never started"
    again = await store.resumed_session(resumable.resume_token, with_key=False)
    assert again is not None and again.session_id == resumable.session_id, "the client's token still resumes it"
    store.started(again.session_id)
    await store.unstarted(again.session_id, with_key=False)  # it had started: its token was spent
    assert await store.resumed_session(resumable.resume_token, with_key=False) is None


def finished_ids(socket: Any) -> list[str]:
    return [e["item"]["id"] for e in socket.of_type("conversation.item.done")]


def roles_done(socket: Any) -> set[str]:
    return {e["item"]["role"] for e in socket.of_type("conversation.item.done")}


async def test_a_draining_sessions_turn_ends_only_once_its_record_holds_the_turn() -> None:
    """Three sessions on the same stages and store are told their replica drains, and the
    store is slow: no client hears ``response.done`` (its cue to leave and resume at once
    elsewhere) before its record holds the turn, the interrupted one's included. Each token
    then resumes with every item its client was told was done (a redeploy lost 8 of 1,184
    such items when the turn's end went out first)."""
    stages = FakeStages()
    stages.tts_chunks = 3
    records = SessionRecords(WINDOW_S)
    store, actor = store_on(records)
    stored = [await store.new_session(with_key=False) for _ in range(3)]
    async with (
        Harness(stages, name="a", stored=stored[0], drain_notice=True) as a,
        Harness(stages, name="b", stored=stored[1]) as b,
        Harness(stages, name="cut", stored=stored[2]) as cut,
    ):
        stages.session_tts_gates["cut"] = tts = Gate()
        tts.close(after=1)  # its answer's first chunk, then it stalls until the barge-in
        for harness in (a, b, cut):
            harness.session.draining(10.0)
        await a.socket.wait_type("session.draining")  # told, as it asked
        actor.gate.close()
        for harness, question in ((a, 1), (b, 2), (cut, 3)):
            append_audio(harness.socket, speech(question))
        await cut.socket.wait_type("response.output_audio.delta")
        append_audio(cut.socket, speech(4))  # the barge-in
        for harness in (a, b):
            await harness.socket.until(lambda h=harness: "assistant" in roles_done(h.socket))  # type: ignore[misc]
        await cut.socket.wait_type("input_audio_buffer.speech_started", count=2)
        tts.open()  # the answer to the barge-in
        assert [h.socket.of_type("response.done") for h in (a, b, cut)] == [[], [], []], "held for the record"
        actor.gate.open()
        for harness in (a, b):
            await harness.socket.wait_type("response.done")
        await cut.socket.wait_type("response.done", count=2)
        assert cut.socket.of_type("response.done")[0]["response"]["status"] == "cancelled"
        told = {h.session.id: finished_ids(h.socket) for h in (a, b, cut)}
    for one in stored:
        resumed = await store.resumed_session(one.resume_token, with_key=False)
        assert resumed is not None and resumed.resumed is not None
        assert [item["id"] for item in resumed.resumed["items"]] == told[one.session_id], one.session_id


async def test_a_connection_whose_session_was_resumed_elsewhere_is_closed_at_its_next_write() -> None:
    """A half-open socket's session is resumed on a new connection: the old one's next
    change is refused by the store, and it is closed saying why; the new one goes on."""
    stages = FakeStages()
    records = SessionRecords(WINDOW_S)
    store, actor = store_on(records)
    stored = await store.new_session(with_key=False)
    async with Harness(stages, name="old", stored=stored) as old:
        resumed = await store.resumed_session(stored.resume_token, with_key=False)
        assert resumed is not None
        async with Harness(stages, name="new", stored=resumed) as new:
            old.socket.client_sends(type="session.update", session={"type": "realtime", "instructions": "Mine."})
            error = await old.socket.wait_type("error")
            assert error["error"]["code"] == "session_resumed_elsewhere"
            await old.task  # type: ignore[misc]
            assert old.socket.closed == (1008, "session_resumed_elsewhere")
            new.socket.client_sends(type="session.update", session={"type": "realtime", "instructions": "Ours."})
            await new.socket.wait_type("session.updated")
            settings = lambda: records._records[stored.session_id].state["settings"]  # noqa: E731
            await actor.until(lambda: settings().get("instructions") == "Ours.")
            assert not new.task.done()  # type: ignore[union-attr]


async def test_a_replicas_sessions_write_to_the_store_together_each_its_own_record() -> None:
    """Five sessions on one replica change at once while the store is held: their writes go
    together (at most the first alone, then the rest in one call; not a call each), and each
    record holds its own session's change and nobody else's."""
    stages = FakeStages()
    records = SessionRecords(WINDOW_S)
    store, actor = store_on(records)
    stored = [await store.new_session(with_key=False) for _ in range(5)]
    async with contextlib.AsyncExitStack() as stack:
        sessions = [
            await stack.enter_async_context(Harness(stages, name=f"s{i}", stored=s)) for i, s in enumerate(stored)
        ]
        await actor.until(lambda: not store._writes)
        written_before = actor.calls.count("save_many")
        actor.gate.close()
        for i, session in enumerate(sessions):
            session.socket.client_sends(
                type="session.update", session={"type": "realtime", "instructions": f"I am {i}."}
            )
        for session in sessions:
            await session.socket.wait_type("session.updated")
        actor.gate.open()

        def instructions() -> list[str | None]:
            return [records._records[s.session_id].state["settings"].get("instructions") for s in stored]

        await actor.until(lambda: instructions() == [f"I am {i}." for i in range(5)])
        calls = actor.calls.count("save_many") - written_before
        assert calls <= 2, f"{calls} calls: at most the first write, then the other four at once"


async def test_sessions_outlive_a_restart_of_the_store_and_stay_resumable() -> None:
    """The store actor is lost (its node went) and Ray starts it again, empty, while three
    sessions are open: the one that changes next writes its record again and stays open (it
    was closed as ``session_resumed_elsewhere``), the idle ones are written again at the
    next renewal, and every token resumes its own session."""
    stages = FakeStages()
    actor = InProcessActor(SessionRecords(WINDOW_S))
    store = SessionStore(ActorRecords(actor), 0.2, DIGESTS, None)  # type: ignore[arg-type]  # renewals every 50 ms
    stored = [await store.new_session(with_key=False) for _ in range(3)]
    async with (
        Harness(stages, name="busy", stored=stored[0]) as busy,
        Harness(stages, name="idle-1", stored=stored[1]),
        Harness(stages, name="idle-2", stored=stored[2]),
    ):
        restarted = SessionRecords(WINDOW_S)
        actor.restart(restarted)
        busy.socket.client_sends(type="session.update", session={"type": "realtime", "instructions": "Still here."})
        await busy.socket.wait_type("session.updated")
        await actor.until(lambda: {s.session_id for s in stored} <= restarted._records.keys())
        assert restarted._records[stored[0].session_id].state["settings"]["instructions"] == "Still here."
        append_audio(busy.socket, speech(1))
        await busy.socket.wait_type("response.done")
        assert not busy.socket.of_type("error") and not busy.task.done()  # type: ignore[union-attr]
    for session in stored:
        resumed = await store.resumed_session(session.resume_token, with_key=False)
        assert resumed is not None and resumed.session_id == session.session_id


# ---- the redis store -----------------------------------------------------------------


def test_a_redis_record_lives_a_window_after_its_last_sign_of_life(redis_server: RedisServer) -> None:
    """Redis's own expiry is the resume window: set at each write and renewal, and an
    expired record is refused and named as lacking."""
    records = BlockingRedisRecords(redis_server.url, 0.5)  # at 0.05 a loaded machine saw it gone at once
    client = redis.Redis(port=redis_server.port)
    try:
        records.open("sess_a", digest("a"), None, EMPTY_STATE)
        key = records.prefix + "sess_a"
        assert 0 < client.pttl(key) <= 500
        while client.exists(key):  # Redis expires it within its window (and ~100 ms of sweep)
            time.sleep(0.01)
        assert records.resume("sess_a", digest("a"), None, digest("n")) is None
        assert records.renew(["sess_a"]) == ["sess_a"]
    finally:
        records.close()
        client.close()


class Watched:
    """A store's records, with a way to wait for what they hold after their calls."""

    def __init__(self, records: RedisRecords) -> None:
        self.records = records
        self._served = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.records, name)

        async def call(*args: Any) -> Any:
            try:
                return await method(*args)
            finally:
                self._served.set()

        return call

    async def until(self, holds: Callable[[], bool], timeout_s: float = 10.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not holds():
                self._served.clear()
                await self._served.wait()


async def test_sessions_on_redis_outlive_its_restart_and_resume_on_another_cluster(redis_server: RedisServer) -> None:
    """Three sessions through the same stages on the redis store, one busy. Redis restarts
    empty under them (its pod lost, no persistence): the busy one's next write and the idle
    ones' next renewal make their records again, and the calls stay open. Then every token
    resumes its own session through a second store on the same Redis (the Ray cluster that
    a ``NewCluster`` upgrade brings up), the busy one with its settings and turns."""
    stages = FakeStages()
    prefix = f"test:{secrets.token_hex(6)}:"
    client = redis.Redis(port=redis_server.port)
    first_cluster = Watched(RedisRecords.connect(redis_server.url, prefix, 2.0))
    store = SessionStore(first_cluster, 2.0, DIGESTS, None)  # renewals every 0.5 s
    stored = [await store.new_session(with_key=False) for _ in range(3)]
    keys = [prefix + session.session_id for session in stored]

    def busy_record() -> dict[str, Any]:
        return cast(dict[str, Any], json.loads(client.hget(keys[0], "state") or "{}"))

    async with (
        Harness(stages, name="busy", stored=stored[0]) as busy,
        Harness(stages, name="idle-1", stored=stored[1]) as idle_1,
        Harness(stages, name="idle-2", stored=stored[2]) as idle_2,
    ):
        redis_server.restart()
        assert client.exists(*keys) == 0
        busy.socket.client_sends(type="session.update", session={"type": "realtime", "instructions": "Still here."})
        await busy.socket.wait_type("session.updated")
        await first_cluster.until(lambda: client.exists(*keys) == 3)
        append_audio(busy.socket, speech(1))
        await busy.socket.wait_type("response.done")
        await first_cluster.until(lambda: len(busy_record().get("items", [])) == 2)
        for harness in (busy, idle_1, idle_2):
            assert not harness.socket.of_type("error") and not harness.task.done()  # type: ignore[union-attr]

    second_cluster = RedisRecords.connect(redis_server.url, prefix, WINDOW_S)
    try:
        new_store = SessionStore(second_cluster, WINDOW_S, DIGESTS, None)
        resumed = [await new_store.resumed_session(session.resume_token, with_key=False) for session in stored]
        assert [r.session_id if r else None for r in resumed] == [s.session_id for s in stored]
        assert resumed[0] is not None and resumed[0].resumed is not None
        assert resumed[0].resumed["settings"]["instructions"] == "Still here."
        assert [item["kind"] for item in resumed[0].resumed["items"]] == ["user_audio", "assistant"]
        for idle in resumed[1:]:
            assert idle is not None and idle.resumed is not None and idle.resumed["items"] == [], "theirs alone"
            assert idle.resumed["settings"].get("instructions") != "Still here."
        assert await store.resumed_session(stored[0].resume_token, with_key=False) is None, "used on the other cluster"
    finally:
        await second_cluster.close()
        await first_cluster.records.close()
        client.close()
