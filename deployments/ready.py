"""Print the WebSocket URL once the app is ready: ``/readyz`` answers 200 only when every
model deployment answers (``make run`` starts this beside ``serve run``, which does not say
when every replica is up)."""

import argparse
import sys
import time
import urllib.error
import urllib.request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{args.port}/readyz", timeout=10) as reply:
                if reply.status == 200:
                    print(f"\n  Voice agent ready: ws://127.0.0.1:{args.port}/v1/realtime\n", flush=True)
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)  # polling a server that has no readiness event to wait on
    sys.exit(f"the app did not become ready on port {args.port} within {args.timeout:.0f} s")


if __name__ == "__main__":
    main()
