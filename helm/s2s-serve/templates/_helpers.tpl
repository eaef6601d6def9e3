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

{{/* The container both head and workers run: the app's image, the hub token, the TURN
credential, Twilio's auth token and the API key if any, the session secret, the redis store's
URL, and the data path's and tracing's settings, which every process reads from its
environment. */}}
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
  {{- with .Values.twilio.authTokenSecret }}
  {{- if .name }}
  - name: S2S_TWILIO_AUTH_TOKEN
    valueFrom:
      secretKeyRef:
        name: {{ .name }}
        key: {{ .key }}
  {{- end }}
  {{- end }}
  {{- with .Values.apiKeySecret }}
  {{- if .name }}
  - name: S2S_API_KEY
    valueFrom:
      secretKeyRef:
        name: {{ .name }}
        key: {{ .key }}
  {{- end }}
  {{- end }}
  - name: S2S_SESSION_SECRET
    valueFrom:
      secretKeyRef:
        name: {{ include "s2s-serve.sessionSecretName" . }}
        key: {{ .Values.sessionStore.secret.key }}
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
{{- if .headersSecret.name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ .headersSecret.name }}
      key: {{ .headersSecret.key }}
{{- end }}
{{- range $name, $value := .env }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The redis session store's URL: from the user's Secret, or the chart's own Redis, with
its password from S2S_REDIS_PASSWORD (defined first: Kubernetes expands $(VAR) in a value
from the variables before it) and, with TLS, the CA the pods check the server with. */}}
{{- define "s2s-serve.redisUrlEnv" -}}
{{- $redis := .Values.sessionStore.redis -}}
{{- if $redis.urlSecret.name }}
- name: S2S_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $redis.urlSecret.name }}
      key: {{ $redis.urlSecret.key }}
{{- else if $redis.deploy }}
- name: S2S_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "s2s-serve.redisAuthSecretName" . }}
      key: {{ $redis.auth.key }}
- name: S2S_REDIS_URL
  {{- if $redis.tls.secretName }}
  value: rediss://:$(S2S_REDIS_PASSWORD)@{{ include "s2s-serve.redisService" . }}:6379/0?ssl_ca_certs={{ include "s2s-serve.redisCaDir" . }}/ca.crt
  {{- else }}
  value: redis://:$(S2S_REDIS_PASSWORD)@{{ include "s2s-serve.redisService" . }}:6379/0
  {{- end }}
{{- end }}
{{- end -}}
{{- define "s2s-serve.redisService" -}}
{{ .Release.Name }}-session-redis
{{- end -}}

{{/* Where the Ray pods mount the chart's Redis's CA (redis TLS), and the volume and mount
themselves, as list items (none without TLS). */}}
{{- define "s2s-serve.redisCaDir" -}}
/etc/s2s-serve/session-redis-tls
{{- end -}}
{{- define "s2s-serve.redisCaVolume" -}}
{{- $redis := .Values.sessionStore.redis -}}
{{- if and $redis.deploy $redis.tls.secretName (not $redis.urlSecret.name) }}
- name: session-redis-ca
  secret:
    secretName: {{ $redis.tls.secretName }}
    items: [{key: ca.crt, path: ca.crt}]
{{- end }}
{{- end -}}
{{- define "s2s-serve.redisCaMount" -}}
{{- $redis := .Values.sessionStore.redis -}}
{{- if and $redis.deploy $redis.tls.secretName (not $redis.urlSecret.name) }}
- {name: session-redis-ca, mountPath: {{ include "s2s-serve.redisCaDir" . }}, readOnly: true}
{{- end }}
{{- end -}}

{{/* The Secrets the pods read: the operator's, or the chart's (secrets.yaml). */}}
{{- define "s2s-serve.sessionSecretName" -}}
{{- .Values.sessionStore.secret.name | default (printf "%s-session-secret" .Release.Name) -}}
{{- end -}}
{{- define "s2s-serve.redisAuthSecretName" -}}
{{- .Values.sessionStore.redis.auth.existingSecret | default (printf "%s-session-redis-auth" .Release.Name) -}}
{{- end -}}

{{/* A chart-made Secret's value, base64: the one the cluster's Secret of that name already
holds (`lookup`), so an upgrade keeps it, else a new random one (letters and digits: safe in
a URL). A template-only render (`helm template`, --dry-run) sees no cluster: a new value. */}}
{{- define "s2s-serve.secretValue" -}}
{{- $existing := lookup "v1" "Secret" .root.Release.Namespace .name -}}
{{- $data := ($existing | default dict).data | default dict -}}
{{- if hasKey $data .key -}}
{{- index $data .key -}}
{{- else -}}
{{- randAlphaNum .length | b64enc -}}
{{- end -}}
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
{{- if ne ($store.secret_env | default "S2S_SESSION_SECRET") "S2S_SESSION_SECRET" }}
{{- fail "serve.app.args.ingress.session_store.secret_env: the chart gives the session secret as S2S_SESSION_SECRET" }}
{{- end }}
{{- /* The operator's Redis password goes into the URL as is: refuse one that would not
parse (seen only where the render can read the cluster). */}}
{{- if and $redis.deploy $redis.auth.existingSecret }}
{{- $secret := lookup "v1" "Secret" .Release.Namespace $redis.auth.existingSecret }}
{{- $data := ($secret | default dict).data | default dict }}
{{- if and (hasKey $data $redis.auth.key) (not (regexMatch "^[A-Za-z0-9._~-]+$" (index $data $redis.auth.key | b64dec))) }}
{{- fail (printf "sessionStore.redis.auth.existingSecret %s: the password (key %s) may hold only letters, digits and ._~- (it goes into the URL as is)" $redis.auth.existingSecret $redis.auth.key) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Fails the render when Twilio's auth token or the API key is asked for from a variable
no Secret provides, or given twice; or OTLP headers are given both in plain values and a
Secret. */}}
{{- define "s2s-serve.checkSecretEnv" -}}
{{- $ingress := .Values.serve.app.args.ingress | default dict }}
{{- $twilio := $ingress.twilio | default dict }}
{{- $tokenEnv := $twilio.auth_token_env | default "" }}
{{- if .Values.twilio.authTokenSecret.name }}
{{- if and $tokenEnv (ne $tokenEnv "S2S_TWILIO_AUTH_TOKEN") }}
{{- fail "serve.app.args.ingress.twilio.auth_token_env: the chart gives Twilio's auth token as S2S_TWILIO_AUTH_TOKEN (leave it unset)" }}
{{- end }}
{{- else if eq $tokenEnv "S2S_TWILIO_AUTH_TOKEN" }}
{{- fail "serve.app.args.ingress.twilio.auth_token_env reads S2S_TWILIO_AUTH_TOKEN: set twilio.authTokenSecret.name to the Secret that holds it" }}
{{- end }}
{{- $keyEnv := $ingress.api_key_env | default "" }}
{{- if .Values.apiKeySecret.name }}
{{- if and $keyEnv (ne $keyEnv "S2S_API_KEY") }}
{{- fail "serve.app.args.ingress.api_key_env: the chart gives the API key as S2S_API_KEY (leave it unset)" }}
{{- end }}
{{- else if eq $keyEnv "S2S_API_KEY" }}
{{- fail "serve.app.args.ingress.api_key_env reads S2S_API_KEY: set apiKeySecret.name to the Secret that holds it" }}
{{- end }}
{{- with .Values.tracing }}
{{- if and .headersSecret.name (hasKey (.env | default dict) "OTEL_EXPORTER_OTLP_HEADERS") }}
{{- fail "tracing: give the OTLP headers either from tracing.headersSecret or in tracing.env.OTEL_EXPORTER_OTLP_HEADERS, not both" }}
{{- end }}
{{- if and .headersSecret.name (not .otlpEndpoint) }}
{{- fail "tracing.headersSecret: set tracing.otlpEndpoint too (without it nothing is exported)" }}
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

{{/* The app's args as served: serve.app.args, with recording enabled its ingress.recording
from the recording values (the directory: the volume's mountPath; the byte budget: the
recordingBytes below), with Twilio's token its ingress.twilio.auth_token_env, and with the
API key's Secret its ingress.api_key_env. */}}
{{- define "s2s-serve.appArgs" -}}
{{- $args := deepCopy .Values.serve.app.args -}}
{{- $ingress := $args.ingress | default dict }}
{{- $recording := .Values.recording -}}
{{- if $recording.enabled }}
{{- $config := dict "directory" $recording.mountPath "mode" $recording.mode "max_session_s" $recording.maxSessionS }}
{{- $bytes := include "s2s-serve.recordingBytes" . }}
{{- $_ := set $config "max_total_bytes" (ternary nil (int64 $bytes) (eq $bytes "")) }}
{{- $_ := set $config "retention_days" $recording.retentionDays }}
{{- $_ := set $ingress "recording" $config }}
{{- end }}
{{- if .Values.twilio.authTokenSecret.name }}
{{- $twilio := $ingress.twilio | default dict }}
{{- $_ := set $twilio "auth_token_env" "S2S_TWILIO_AUTH_TOKEN" }}
{{- $_ := set $ingress "twilio" $twilio }}
{{- end }}
{{- if .Values.apiKeySecret.name }}
{{- $_ := set $ingress "api_key_env" "S2S_API_KEY" }}
{{- end }}
{{- if $ingress }}
{{- $_ := set $args "ingress" $ingress }}
{{- end }}
{{- toYaml $args }}
{{- end -}}

{{/* A Kubernetes quantity in bytes (the schema admits digits with an optional fraction and
a binary or decimal suffix up to T). */}}
{{- define "s2s-serve.bytes" -}}
{{- $quantity := toString . -}}
{{- $number := regexFind "^[0-9]+([.][0-9]+)?" $quantity -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- mulf $number (get $units (trimPrefix $number $quantity)) | floor | int64 -}}
{{- end -}}

{{/* The recordings' byte budget the app gets (ingress.recording.max_total_bytes; "" for
none): on the emptyDir at most 90 % of its sizeLimit, which it is when not given, as the
kubelet evicts a pod whose emptyDir passes its sizeLimit; with a claim, as given. Fails the
render for a budget over that, or one the app would refuse: less than one recording of
maxSessionS at its peak (deployments/realtime/recording/config.py, peak_bytes: both raw
channels, 24 kHz 16-bit, and the WAV made of them, its header and 64 KiB for its report). */}}
{{- define "s2s-serve.recordingBytes" -}}
{{- $recording := .Values.recording -}}
{{- $given := not (kindIs "invalid" $recording.maxTotalBytes) -}}
{{- $bytes := "" -}}
{{- if $recording.existingClaim -}}
{{- if $given }}{{ $bytes = int64 $recording.maxTotalBytes }}{{ end -}}
{{- else -}}
{{- $limit := include "s2s-serve.bytes" $recording.sizeLimit | int64 -}}
{{- $most := mulf $limit 0.9 | floor | int64 -}}
{{- $bytes = $most -}}
{{- if $given -}}
{{- $bytes = int64 $recording.maxTotalBytes -}}
{{- if gt $bytes $most -}}
{{- fail (printf "recording.maxTotalBytes (%d) must leave 10 %% of the emptyDir's sizeLimit (%s) free: at most %d, or null for that" $bytes $recording.sizeLimit $most) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $one := add 65580 (mul (mulf $recording.maxSessionS 24000 | floor | int64) 8) -}}
{{- if and (ne (toString $bytes) "") (lt (int64 $bytes) (int64 $one)) -}}
{{- fail (printf "recording: the byte budget (%d: maxTotalBytes, or 90 %% of sizeLimit) must hold one recording of maxSessionS while its WAV is made (%d bytes)" (int64 $bytes) (int64 $one)) -}}
{{- end -}}
{{- $bytes -}}
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
