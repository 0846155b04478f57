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
app.kubernetes.io/version: {{ include "trustsync.version" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: trustsync
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
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
The policy's signer names as a single-quoted list, valid both as CEL (so only their
CSRs are sent to the webhook: kubelet and controller-manager CSRs never depend on it)
and as a YAML flow sequence (RBAC resourceNames).
*/}}
{{- define "trustsync.policySignersCEL" -}}
[{{ range $i, $s := .Values.policy.signers }}{{ if $i }}, {{ end }}{{ $s.signerName | squote }}{{ end }}]
{{- end }}

{{/*
The version the release runs: the chart's appVersion, or in the tree, the build's
(files/build-version, which make build and make image write; a release's chart has
none), so a rebuild's image is the default and rolls out under helm upgrade.
*/}}
{{- define "trustsync.version" -}}
{{- (.Files.Get "files/build-version" | trim) | default .Chart.AppVersion }}
{{- end }}

{{/*
An image of the release: image.registry (a mirror, say) before image.repository and
its suffix; by digest when one is given, else by tag (default: the version the
release runs), -fips in FIPS mode. Takes a dict with "root", "suffix" and "digest".
*/}}
{{- define "trustsync.imageRef" -}}
{{- $v := .root.Values }}
{{- $repository := printf "%s%s" $v.image.repository .suffix }}
{{- with $v.image.registry }}{{ $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}{{ end }}
{{- if .digest -}}
{{ $repository }}@{{ .digest }}
{{- else -}}
{{ $repository }}:{{ $v.image.tag | default (printf "v%s" (include "trustsync.version" .root)) }}{{ if $v.fips }}-fips{{ end }}
{{- end }}
{{- end }}

{{/*
The image every component runs.
*/}}
{{- define "trustsync.image" -}}
{{ include "trustsync.imageRef" (dict "root" . "suffix" "" "digest" .Values.image.digest) }}
{{- end }}

{{/*
The signer's image: with signer.pkcs11.enabled, the PKCS#11 signer's, named after the
image (<repository>-signer-pkcs11, the same tag), or pinned by signer.pkcs11.digest
when image.digest pins the others.
*/}}
{{- define "trustsync.signerImage" -}}
{{- if not .Values.signer.pkcs11.enabled -}}
{{ include "trustsync.image" . }}
{{- else if and .Values.image.digest (not .Values.signer.pkcs11.digest) }}
{{- fail "image.digest pins the images, but not the PKCS#11 signer's: give its digest in signer.pkcs11.digest" }}
{{- else -}}
{{ include "trustsync.imageRef" (dict "root" . "suffix" "-signer-pkcs11" "digest" .Values.signer.pkcs11.digest) }}
{{- end }}
{{- end }}

{{/*
The environment every component runs with in FIPS 140-3 mode (fips: true): its
binaries are built with Go's validated module, whose default this states.
*/}}
{{- define "trustsync.fipsEnv" -}}
{{- if .Values.fips }}
- name: GODEBUG
  value: fips140=on
{{- end }}
{{- end }}

{{/*
Where a component's pods run and what they pull with: the pod spec fields every
workload shares. Takes a dict with "root" (the chart context), "values" (the
component's values), "component" and "spread" (spread replicas over nodes when the
user gives no affinity). Linux nodes only: the image is built for Linux.
*/}}
{{- define "trustsync.placement" -}}
{{- $v := .values -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
nodeSelector:
  {{- toYaml (merge (deepCopy ($v.nodeSelector | default dict)) (dict "kubernetes.io/os" "linux")) | nindent 2 }}
{{- if $v.affinity }}
affinity:
  {{- toYaml $v.affinity | nindent 2 }}
{{- else if .spread }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            app.kubernetes.io/instance: {{ .root.Release.Name }}
            app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The arguments every component takes from the chart: its log level, then its
extraArgs (last, so that they win over the chart's own). Takes a dict with "root"
and "values".
*/}}
{{- define "trustsync.commonArgs" -}}
- --v={{ .root.Values.logLevel }}
- --logging-format={{ .root.Values.logFormat }}
{{- range .values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
A PodDisruptionBudget for a component. Takes a dict with "root", "values" (with
podDisruptionBudget) and "component".
*/}}
{{- define "trustsync.pdb" -}}
{{- if .values.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "trustsync.fullname" .root }}-{{ .component }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "trustsync.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  minAvailable: {{ .values.podDisruptionBudget.minAvailable }}
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ .root.Release.Name }}
      app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{/* The webhook's TLS Secret name. */}}
{{- define "trustsync.webhookTLSSecret" -}}
{{ .Values.webhook.tlsSecretName | default (printf "%s-webhook-tls" (include "trustsync.fullname" .)) }}
{{- end }}

{{/*
A component's ServiceAccount name: serviceAccount.name, else <fullname>-<component>.
Takes a dict with "root" (the chart context) and "component".
*/}}
{{- define "trustsync.serviceAccountName" -}}
{{- $v := index .root.Values .component }}
{{- $v.serviceAccount.name | default (printf "%s-%s" (include "trustsync.fullname" .root) .component) }}
{{- end }}

{{/*
The ConfigMap in which the controller lists the objects annotation injection fills
(NAMESPACE/NAME): the agents and the signer read it, and only it.
*/}}
{{/*
The namespace the node agent runs in: agent.namespace, or the release's. The agent
must run privileged, so a cluster keeping the release namespace at Pod Security
restricted gives it a namespace of its own, labelled privileged.
*/}}
{{- define "trustsync.agentNamespace" -}}
{{ .Values.agent.namespace | default .Release.Namespace }}
{{- end }}

{{- define "trustsync.injectedIndexName" -}}
{{ include "trustsync.fullname" . }}-injected
{{- end }}
{{- define "trustsync.injectedIndex" -}}
{{- if .Values.targets.enabled }}{{ .Release.Namespace }}/{{ include "trustsync.injectedIndexName" . }}{{ end }}
{{- end }}
