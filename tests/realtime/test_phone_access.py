"""Who may place a phone call: the voice webhook checked by Twilio's signature (or the API
key), TwiML that carries a one-use secret bound to its call and never the key, and media
streams that wait for their ``start`` under a cap of their own."""

import asyncio
import base64
import json
import logging
from xml.etree import ElementTree

import httpx
import pytest
from cryptography.fernet import Fernet
from fastapi import FastAPI, Request

from deployments.access import Access
from deployments.client_secrets import ClientSecrets
from deployments.config import IngressConfig
from deployments.keyed_digests import KeyedDigests
from deployments.pending_streams import MadeRoom, PendingStreams
from deployments.phone_calls import INCOMING_CALL_PATH, MAX_REDIRECTS, SECRET_PARAMETER, PhoneCalls
from deployments.realtime.transports.call_control import CallEnding
from deployments.realtime.transports.config import TwilioConfig
from deployments.session_store.ray_records import ReplicaSecrets
from deployments.twilio_signature import is_signed, signature

KEY = "the server's key"
AUTH_TOKEN = "twilio's auth token"
CALL = {"CallSid": "CA42", "From": "+15550100", "To": "+15550199"}


def test_the_signature_is_twilios_own_and_accepts_the_url_as_twilio_was_given_it() -> None:
    """The example of https://www.twilio.com/docs/usage/security (token ``12345``), then a
    webhook seen as plain ``http`` behind the TLS proxy."""
    params = {"CallSid": "CA1234567890ABCDE", "Caller": "+12349013030", "Digits": "1234"}
    params |= {"From": "+12349013030", "To": "+18005551212"}
    assert signature(b"12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params) == "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    signed = signature(b"token", "https://voice.example.com/v1/twilio/incoming-call", CALL)
    assert is_signed(b"token", signed, "http://voice.example.com/v1/twilio/incoming-call", CALL)
    assert is_signed(b"token", signed, "https://voice.example.com:443/v1/twilio/incoming-call", CALL)
    assert not is_signed(b"token", signed, "https://voice.example.com/v1/twilio/incoming-call", CALL | {"To": "+1"})
    assert not is_signed(b"other", signed, "https://voice.example.com/v1/twilio/incoming-call", CALL)
    assert not is_signed(b"token", "", "https://voice.example.com/v1/twilio/incoming-call", CALL)


def phone_app(secrets: ClientSecrets, key: str | None, auth_token_env: str | None) -> FastAPI:
    calls = PhoneCalls(
        Access(key.encode() if key else None, None, secrets),
        secrets,
        None,
        None,  # type: ignore[arg-type]  # the webhook admits no session
        None,  # type: ignore[arg-type]
        IngressConfig(twilio=TwilioConfig(auth_token_env=auth_token_env)),
    )
    app = FastAPI()

    @app.post(INCOMING_CALL_PATH)
    async def incoming_call(request: Request) -> object:
        return await calls.incoming_call(request)

    return app


async def webhook(app: FastAPI, headers: dict[str, str], form: dict[str, str] = CALL) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://voice.example.com") as http:
        return await http.post(INCOMING_CALL_PATH, data=form, headers=headers)


def stream_parameters(twiml: str) -> dict[str, str]:
    stream = ElementTree.fromstring(twiml).find("Connect/Stream")
    assert stream is not None
    return {str(p.get("name")): str(p.get("value")) for p in stream.findall("Parameter")}


async def test_a_signed_webhook_gets_twiml_whose_secret_opens_that_calls_stream_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("S2S_TEST_TWILIO_TOKEN", AUTH_TOKEN)
    secrets = ClientSecrets(ReplicaSecrets(), KeyedDigests(b"s"))
    app = phone_app(secrets, KEY, "S2S_TEST_TWILIO_TOKEN")
    url = f"https://voice.example.com{INCOMING_CALL_PATH}"
    basic = "Basic " + base64.b64encode(f"twilio:{KEY}".encode()).decode()

    assert (await webhook(app, {})).status_code == 403
    assert (await webhook(app, {"Authorization": basic})).status_code == 403, "the signature, once configured"
    forged = signature(b"a guess", url, CALL)
    assert (await webhook(app, {"X-Twilio-Signature": forged})).status_code == 403

    answered = await webhook(app, {"X-Twilio-Signature": signature(AUTH_TOKEN.encode(), url, CALL)})
    assert answered.status_code == 200, answered.text
    assert KEY not in answered.text, "the key never goes to Twilio"
    secret = stream_parameters(answered.text)[SECRET_PARAMETER]
    assert await secrets.redeem(secret) is None, "not a secret for /v1/realtime"
    assert await secrets.redeem(secret, "CA7") is None, "nor for another call"
    assert await secrets.redeem(secret, "CA42") is not None
    assert await secrets.redeem(secret, "CA42") is None, "one stream"


async def test_without_a_twilio_token_the_webhook_needs_the_key_and_still_never_passes_it_on() -> None:
    secrets = ClientSecrets(ReplicaSecrets(), KeyedDigests(b"s"))
    app = phone_app(secrets, KEY, None)
    for wrong in ("twilio:guess", "not base64!"):
        encoded = base64.b64encode(wrong.encode()).decode() if ":" in wrong else wrong
        assert (await webhook(app, {"Authorization": f"Basic {encoded}"})).status_code == 403
    basic = "Basic " + base64.b64encode(f"twilio:{KEY}".encode()).decode()
    answered = await webhook(app, {"Authorization": basic})
    assert answered.status_code == 200 and KEY not in answered.text
    assert await secrets.redeem(stream_parameters(answered.text)[SECRET_PARAMETER], "CA42") is not None


async def test_the_twiml_brings_the_call_back_after_its_stream_and_ends_it_once_its_agent_did() -> None:
    """A call's webhook, asked again by the ``<Redirect>`` after its stream: a new stream
    while the call goes on, then ``<Hangup/>`` or ``<Dial>`` once its stream kept an ending;
    another call is not touched."""
    secrets = ClientSecrets(ReplicaSecrets(), KeyedDigests(b"s"))
    app = phone_app(secrets, KEY, None)
    basic = {"Authorization": "Basic " + base64.b64encode(f"twilio:{KEY}".encode()).decode()}
    first = ElementTree.fromstring((await webhook(app, basic)).text)
    assert first.findtext("Redirect") == f"{INCOMING_CALL_PATH}?redirects=1", "back here once the stream closes"
    await secrets.keep_call("CA42", resume_token="sess_1.secret")
    again = ElementTree.fromstring((await webhook(app, basic)).text)
    assert again.find("Connect/Stream") is not None, "a call going on gets a new stream"
    await secrets.keep_call("CA42", call_ending=str(CallEnding("transfer", "+15550123")))
    assert ElementTree.fromstring((await webhook(app, basic)).text).findtext("Dial") == "+15550123"
    await secrets.keep_call("CA42", call_ending=str(CallEnding("hang_up")))
    assert ElementTree.fromstring((await webhook(app, basic)).text).find("Hangup") is not None
    other = ElementTree.fromstring((await webhook(app, basic, CALL | {"CallSid": "CA7"})).text)
    assert other.find("Connect/Stream") is not None, "only that call ends"


async def test_a_call_brought_back_too_often_is_told_and_hung_up_not_looped_in_silence() -> None:
    secrets = ClientSecrets(ReplicaSecrets(), KeyedDigests(b"s"))
    app = phone_app(secrets, KEY, None)
    basic = {"Authorization": "Basic " + base64.b64encode(f"twilio:{KEY}".encode()).decode()}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://voice.example.com") as http:
        url = INCOMING_CALL_PATH
        for _ in range(MAX_REDIRECTS):
            twiml = ElementTree.fromstring((await http.post(url, data=CALL, headers=basic)).text)
            assert twiml.find("Connect/Stream") is not None
            url = str(twiml.findtext("Redirect"))
        turned_away = ElementTree.fromstring((await http.post(url, data=CALL, headers=basic)).text)
    assert turned_away.findtext("Say") and turned_away.find("Hangup") is not None


async def test_a_calls_resume_token_is_kept_sealed_and_read_back_only_with_the_session_secret() -> None:
    records, digests = ReplicaSecrets(), KeyedDigests(b"s")
    secrets = ClientSecrets(records, digests)
    await secrets.keep_call("CA42", resume_token="sess_1.topsecret")
    kept = await records.redeem_client_secret(await digests.of("phone_call", "CA42"), "CA42")
    assert kept is not None and "topsecret" not in json.dumps(kept), "a reader of the store holds nothing to present"
    held = await secrets.call("CA42")
    assert held is not None and held["resume_token"] == "sess_1.topsecret"
    assert await secrets.call("CA7") is None, "another call has none"
    forged = kept | {"resume_token": Fernet(Fernet.generate_key()).encrypt(b"sess_1.mine").decode()}
    await records.add_client_secret(await digests.of("phone_call", "CA42"), forged, 60)
    held = await secrets.call("CA42")
    assert held is not None and held["resume_token"] == "", "not sealed with this server's secret: no token"


async def test_streams_waiting_for_start_are_capped_the_oldest_making_room_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """200 silent sockets against a cap of 4: each new one closes the oldest, so a real
    call's ``start`` is read whenever it comes, and the log holds one line, not 196."""
    pending = PendingStreams(4)
    starts: list[asyncio.Future[str]] = []
    waits = []
    with caplog.at_level(logging.WARNING, logger="deployments.pending_streams"):
        for _ in range(200):
            starts.append(asyncio.get_running_loop().create_future())
            waits.append(asyncio.ensure_future(pending.first(starts[-1])))
            await asyncio.sleep(0)  # let it take its place (each arrives after the last)
        real_start = asyncio.get_running_loop().create_future()
        real = asyncio.ensure_future(pending.first(real_start))
        await asyncio.sleep(0)
        real_start.set_result("start of CA42")
        assert await real == "start of CA42"
        outcomes = await asyncio.gather(*waits[:-3], return_exceptions=True)
    assert all(isinstance(outcome, MadeRoom) for outcome in outcomes), "all but the newest 3 made room"
    assert len(pending) == 3
    assert len(caplog.records) == 1 and "to make room" in caplog.records[0].getMessage()
    for start in starts[-3:]:
        start.cancel()
    await asyncio.gather(*waits[-3:], return_exceptions=True)
