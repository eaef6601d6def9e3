"""Twilio's request signature (``X-Twilio-Signature``), checked on the voice webhook so that
only Twilio, holding the account's auth token, can ask for a call's TwiML.

The signature is base64(HMAC-SHA1(auth token, URL + each POST parameter's name and value,
sorted by name)): https://www.twilio.com/docs/usage/security#validating-requests. The URL
is the one Twilio was given; behind a TLS-terminating proxy this replica sees ``http``,
and Twilio drops or adds the default port, so each of those spellings is tried.
"""

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

DEFAULT_PORTS = {"https": 443, "http": 80}


def signature(auth_token: bytes, url: str, params: Mapping[str, str]) -> str:
    data = url + "".join(name + params[name] for name in sorted(params))
    return base64.b64encode(hmac.digest(auth_token, data.encode(), hashlib.sha1)).decode()


def is_signed(auth_token: bytes, presented: str, url: str, params: Mapping[str, str]) -> bool:
    """Did Twilio sign this request (``url``: as this replica received it)?"""
    matches = [hmac.compare_digest(signature(auth_token, one, params), presented) for one in _spellings(url)]
    return bool(presented) and any(matches)


def _spellings(url: str) -> Iterable[str]:
    """``url`` as received, and as Twilio may have been given it: ``https``, with or without
    its default port."""
    parts = urlsplit(url)
    yield url
    host = parts.hostname or ""
    for scheme in dict.fromkeys([parts.scheme, "https"]):
        for netloc in (host, f"{host}:{DEFAULT_PORTS.get(scheme, parts.port)}"):
            yield urlunsplit((scheme, netloc, parts.path, parts.query, parts.fragment))
