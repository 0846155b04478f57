{{/* The chart's name. */}}
{{- define "trustsync.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name objects are named with. */}}
{{- define "trustsync.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "trustsync.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "trustsync.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "trustsync.labels" -}}
app.kubernetes.io/name: {{ include "trustsync.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: trustsync
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
The clientConfig of one webhook route. Takes a dict with "root" (the chart context)
and "path" (the route).
*/}}
{{- define "trustsync.webhookClientConfig" -}}
{{- if .root.Values.webhook.url -}}
url: {{ printf "%s%s" (trimSuffix "/" .root.Values.webhook.url) .path | quote }}
{{- else -}}
service:
  name: {{ include "trustsync.fullname" .root }}-webhook
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path | quote }}
  port: 443
{{- end }}
{{- with .root.Values.webhook.caBundle }}
caBundle: {{ . }}
{{- end }}
{{- end }}

{{/*
A CEL list of the policy's signer names, so only their CSRs are sent to the webhook:
kubelet and controller-manager CSRs never depend on it.
*/}}
{{- define "trustsync.policySignersCEL" -}}
[{{ range $i, $s := .Values.policy.signers }}{{ if $i }}, {{ end }}{{ $s.signerName | squote }}{{ end }}]
{{- end }}
