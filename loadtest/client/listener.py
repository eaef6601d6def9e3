"""A client that plays an answer's audio as it arrives: what it hears, and when.

Each answer is given as ``(arrival, seconds)`` per audio delta, arrival in seconds of any
one clock. Shared by the turn-taking bench and the tests of paced audio.
"""

Arrivals = list[tuple[float, float]]


def last_heard(audio: Arrivals, onset: float, stop: float) -> float:
    """When such a client, stopping at ``stop``, last hears the answer (``onset`` if it was
    silent from there on)."""
    plays_until = 0.0
    for arrival, seconds in audio:
        if arrival >= stop:
            break
        plays_until = max(plays_until, arrival) + seconds
    return max(onset, min(plays_until, stop))


def most_ahead_ms(audio: Arrivals) -> float:
    """How far the answer's audio was ever ahead of such a client playing it from its first
    delta on (an answer sent as fast as it is made is seconds ahead; a paced one its lead)."""
    first_at, received_s, ahead_s = audio[0][0], 0.0, 0.0
    for arrival, seconds in audio:
        received_s += seconds
        ahead_s = max(ahead_s, received_s - (arrival - first_at))
    return ahead_s * 1000
