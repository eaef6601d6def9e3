"""The load-test harness, the benchmarks and the scenarios; they sit on top of every other package.

- ``client/``: the load-test client and harness (sessions, their logs, the report); it imports
  nothing of the server.
- ``benchmarks/``: one module per benchmark of a model or of the serving layer.
- ``scenarios/``: the runs that start a cluster or change one under load, and ``launch``, the
  one way all of them start Ray and Serve.
- ``doubles/``: the servers the client is measured and tested against (the echo server).
- ``cli`` (``s2s-bench <name>``) runs any of them; ``options`` declares their shared options once.
"""
