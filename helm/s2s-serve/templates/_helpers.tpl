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

{{/* The container both head and workers run: the app's image, the hub token if any. */}}
{{- define "s2s-serve.container" -}}
image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- if .Values.hubToken.secretName }}
env:
  - name: HF_TOKEN
    valueFrom:
      secretKeyRef:
        name: {{ .Values.hubToken.secretName }}
        key: {{ .Values.hubToken.key }}
{{- end }}
{{- end -}}
