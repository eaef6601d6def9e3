{{- define "s2s-serve.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* KubeRay names the Service in front of Serve's proxies "<RayService name>-serve-svc". */}}
{{- define "s2s-serve.serveService" -}}
{{ .Release.Name }}-serve-svc
{{- end -}}

{{/* The container both head and workers run: the app's image, the hub token and the TURN
credential if any, and
the data path's settings, which Ray reads from the environment of each of its processes. */}}
{{- define "s2s-serve.container" -}}
image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
imagePullPolicy: {{ .Values.image.pullPolicy }}
env:
  {{- if .Values.hubToken.secretName }}
  - name: HF_TOKEN
    valueFrom:
      secretKeyRef:
        name: {{ .Values.hubToken.secretName }}
        key: {{ .Values.hubToken.key }}
  {{- end }}
  {{- if .Values.turnCredential.secretName }}
  - name: S2S_TURN_CREDENTIAL
    valueFrom:
      secretKeyRef:
        name: {{ .Values.turnCredential.secretName }}
        key: {{ .Values.turnCredential.key }}
  {{- end }}
  {{- include "s2s-serve.redisUrlEnv" . | nindent 2 }}
  {{- include "s2s-serve.dataPathEnv" . | nindent 2 }}
  {{- include "s2s-serve.tracingEnv" . | nindent 2 }}
{{- end -}}

{{/* OpenTelemetry's settings, which every process reads from its environment
(deployments/telemetry.py): none unless an endpoint is given. */}}
{{- define "s2s-serve.tracingEnv" -}}
{{- with .Values.tracing }}
{{- if .otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .otlpEndpoint | quote }}
- name: OTEL_TRACES_SAMPLER
  value: parentbased_traceidratio
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .samplingRatio | quote }}
{{- range $name, $value := .env }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The redis session store's URL: from the user's Secret, or the chart's own Redis. */}}
{{- define "s2s-serve.redisUrlEnv" -}}
{{- $redis := .Values.sessionStore.redis -}}
{{- if $redis.urlSecret.name }}
- name: S2S_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $redis.urlSecret.name }}
      key: {{ $redis.urlSecret.key }}
{{- else if $redis.deploy }}
- name: S2S_REDIS_URL
  value: redis://{{ include "s2s-serve.redisService" . }}:6379/0
{{- end }}
{{- end -}}
{{- define "s2s-serve.redisService" -}}
{{ .Release.Name }}-session-redis
{{- end -}}

{{/* Fails the render when the redis session store has no Redis, or two, or reads its URL
from a variable the chart does not set: the ingress replicas would fail to start. */}}
{{- define "s2s-serve.checkSessionStore" -}}
{{- $ingress := .Values.serve.app.args.ingress | default dict }}
{{- $store := $ingress.session_store | default dict }}
{{- $redis := .Values.sessionStore.redis }}
{{- if and $redis.urlSecret.name $redis.deploy }}
{{- fail "sessionStore.redis: set urlSecret.name (a Redis of yours) or deploy (the chart's), not both" }}
{{- end }}
{{- if eq ($store.kind | default "ray") "redis" }}
{{- if not (or $redis.urlSecret.name $redis.deploy) }}
{{- fail "serve.app.args.ingress.session_store.kind is redis: set sessionStore.redis.urlSecret.name or sessionStore.redis.deploy" }}
{{- end }}
{{- if ne ($store.redis_url_env | default "S2S_REDIS_URL") "S2S_REDIS_URL" }}
{{- fail "serve.app.args.ingress.session_store.redis_url_env: the chart gives the URL as S2S_REDIS_URL" }}
{{- end }}
{{- end }}
{{- end -}}

{{/* RAY_SERVE_ENABLE_HA_PROXY and, for HAProxy, its settings and Ray's high-throughput mode
(handle calls over gRPC), as Ray's KubeRay high-throughput guide pairs them (docs/haproxy.md). */}}
{{- define "s2s-serve.dataPathEnv" -}}
{{- $haproxy := eq .Values.dataPath "haproxy" -}}
- name: RAY_SERVE_ENABLE_HA_PROXY
  value: {{ ternary "1" "0" $haproxy | quote }}
{{- if $haproxy }}
- name: RAY_SERVE_THROUGHPUT_OPTIMIZED
  value: "1"
- name: RAY_SERVE_HAPROXY_NBTHREAD
  value: {{ .Values.haproxy.threads | quote }}
- name: RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S
  value: {{ .Values.haproxy.hardStopAfterS | quote }}
{{- /* A stopped ingress replica keeps its HTTP server this long, then cuts every WebSocket
still open: the drain (drain_s, seen within shutdown_poll_s) and the closes must fit, as
deployments/serve_local.py's ingress_drain_hold_s says. Ray's default is 30 s. */}}
{{- $ingress := .Values.serve.app.args.ingress | default dict }}
- name: RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S
  value: {{ addf (include "s2s-serve.drainS" .) ($ingress.shutdown_poll_s | default 1) 2 | quote }}
{{- range $name, $value := .Values.haproxy.env }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Fails the render when a deployment's label_selector matches no worker group's labels:
its replicas would wait forever for a node that the cluster never gets. */}}
{{- define "s2s-serve.checkLabelSelectors" -}}
{{- range $stage, $options := .Values.serve.app.args }}
{{- if and (kindIs "map" $options) (hasKey $options "deployment") }}
{{- with $options.deployment.label_selector }}
{{- $selector := . }}
{{- $found := false }}
{{- range $.Values.workerGroups }}
{{- $labels := .labels | default dict }}
{{- $match := true }}
{{- range $key, $value := $selector }}
{{- if ne (get $labels $key) $value }}{{ $match = false }}{{ end }}
{{- end }}
{{- if $match }}{{ $found = true }}{{ end }}
{{- end }}
{{- if not $found }}
{{- fail (printf "serve.app.args.%s.deployment.label_selector %v matches no worker group's labels: its replicas could never be placed" $stage $selector) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Fails the render when an ICE server reads S2S_TURN_CREDENTIAL but no Secret provides it:
the ingress replicas would fail to start. */}}
{{- define "s2s-serve.checkTurnCredential" -}}
{{- $ingress := .Values.serve.app.args.ingress | default dict }}
{{- $webrtc := $ingress.webrtc | default dict }}
{{- range $webrtc.ice_servers }}
{{- if and (eq (.credential_env | default "") "S2S_TURN_CREDENTIAL") (not $.Values.turnCredential.secretName) }}
{{- fail "serve.app.args.ingress.webrtc.ice_servers reads S2S_TURN_CREDENTIAL: set turnCredential.secretName to the Secret that holds it" }}
{{- end }}
{{- end }}
{{- end -}}

{{/* How long a call may outlive the replica it is on: the ingress's drain_s, and its
graceful_shutdown_timeout_s, after which Serve kills the replica (AppConfig's defaults when
unset). Every pod-level wait is set from them (helm/s2s-serve/README.md, "Live calls"). */}}
{{- define "s2s-serve.drainS" -}}
{{- $ingress := .Values.serve.app.args.ingress | default dict -}}
{{- $ingress.drain_s | default 10 | int -}}
{{- end -}}
{{- define "s2s-serve.graceS" -}}
{{- $ingress := .Values.serve.app.args.ingress | default dict -}}
{{- $deployment := $ingress.deployment | default dict -}}
{{- $deployment.graceful_shutdown_timeout_s | default 20 | int -}}
{{- end -}}

{{/* Worker pods' preStop hook and grace period: the hook drains the pod's Ray node
(cluster/prestop.py) for up to the ingress's grace period plus 10 s; Kubernetes waits 30 s
more before it kills the pod. */}}
{{- define "s2s-serve.workerStop" -}}
{{- $grace := include "s2s-serve.graceS" . | int -}}
terminationGracePeriodSeconds: {{ add $grace 40 }}
{{- end -}}
{{- define "s2s-serve.preStop" -}}
{{- $grace := include "s2s-serve.graceS" . | int -}}
lifecycle:
  preStop:
    exec:
      command: ["python", "-m", "cluster.prestop", "--deadline-s", "{{ add $grace 10 }}"]
{{- end -}}

{{/* Fails the render when HAProxy would cut calls before a drain could hand them over:
its old process, after a reload, holds its tunnels for hardStopAfterS at most. */}}
{{- define "s2s-serve.checkHardStop" -}}
{{- $grace := include "s2s-serve.graceS" . | int -}}
{{- if and (eq .Values.dataPath "haproxy") (lt (int .Values.haproxy.hardStopAfterS) (add $grace 10 | int)) }}
{{- fail (printf "haproxy.hardStopAfterS (%v) must be at least the ingress's graceful_shutdown_timeout_s plus 10 (%d): HAProxy would cut calls that are still being drained" .Values.haproxy.hardStopAfterS (add $grace 10)) }}
{{- end }}
{{- end -}}

{{/* The app's args as served: serve.app.args, and with recording enabled its
ingress.recording from the recording values (the directory: the volume's mountPath). */}}
{{- define "s2s-serve.appArgs" -}}
{{- $args := deepCopy .Values.serve.app.args -}}
{{- $recording := .Values.recording -}}
{{- if $recording.enabled }}
{{- $ingress := $args.ingress | default dict }}
{{- $config := dict "directory" $recording.mountPath "mode" $recording.mode "max_session_s" $recording.maxSessionS }}
{{- $_ := set $config "max_total_bytes" (ternary nil (int64 $recording.maxTotalBytes) (kindIs "invalid" $recording.maxTotalBytes)) }}
{{- $_ := set $config "retention_days" $recording.retentionDays }}
{{- $_ := set $ingress "recording" $config }}
{{- $_ := set $args "ingress" $ingress }}
{{- end }}
{{- toYaml $args }}
{{- end -}}

{{/* Fails the render when the app's recording is set by hand: without the chart's volume
its files would go to the container's own disk, lost with it. */}}
{{- define "s2s-serve.checkRecording" -}}
{{- $ingress := .Values.serve.app.args.ingress | default dict }}
{{- if hasKey $ingress "recording" }}
{{- fail "serve.app.args.ingress.recording: set the chart's recording values instead (recording.enabled mounts the volume and sets it)" }}
{{- end }}
{{- end -}}

{{/* "true" when the worker group (.group) can run the ingress: its labels satisfy the
ingress's label_selector, or it has none. */}}
{{- define "s2s-serve.runsIngress" -}}
{{- $ingress := .root.Values.serve.app.args.ingress | default dict }}
{{- $deployment := $ingress.deployment | default dict }}
{{- $labels := .group.labels | default dict }}
{{- $match := true }}
{{- range $key, $value := $deployment.label_selector | default dict }}
{{- if ne (get $labels $key) $value }}{{ $match = false }}{{ end }}
{{- end }}
{{- $match }}
{{- end -}}
