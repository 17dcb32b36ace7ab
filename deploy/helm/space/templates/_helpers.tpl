{{/* Names, labels and images shared by every template. */}}

{{- define "space.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's base name: the release name, plus the chart's unless it holds it. */}}
{{- define "space.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "space.labels" -}}
app.kubernetes.io/name: {{ include "space.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component: include with (list . "control"). */}}
{{- define "space.selector" -}}
{{- $ctx := index . 0 -}}
app.kubernetes.io/name: {{ include "space.name" $ctx }}
app.kubernetes.io/instance: {{ $ctx.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* An image reference: include with (list . .Values.control.image). */}}
{{- define "space.image" -}}
{{- $ctx := index . 0 -}}
{{- $img := index . 1 -}}
{{- $repo := $img.repository -}}
{{- if $ctx.Values.image.registry -}}{{- $repo = printf "%s/%s" $ctx.Values.image.registry $img.repository -}}{{- end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default $ctx.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{- define "space.control.serviceAccount" -}}{{ include "space.fullname" . }}-control{{- end -}}
{{- define "space.worker.serviceAccount" -}}{{ include "space.fullname" . }}-worker{{- end -}}

{{/* Secrets: the user's own, or the chart's. */}}
{{- define "space.bootstrapSecret" -}}
{{- default (printf "%s-bootstrap" (include "space.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}
{{- define "space.storeSecret" -}}
{{- default (printf "%s-store" (include "space.fullname" .)) .Values.store.postgres.existingSecret -}}
{{- end -}}
{{- define "space.storeSecretKey" -}}
{{- if .Values.store.postgres.existingSecret -}}{{ .Values.store.postgres.existingSecretKey }}{{- else -}}dsn{{- end -}}
{{- end -}}
{{- define "space.objectStoreSecret" -}}
{{- default (printf "%s-object-store" (include "space.fullname" .)) .Values.objectStore.existingSecret -}}
{{- end -}}

{{/* The settings no install works without, checked before anything renders. */}}
{{- define "space.validate" -}}
{{- if and (not .Values.store.postgres.dsn) (not .Values.store.postgres.existingSecret) -}}
{{- fail "store.postgres: set dsn (a postgres:// URL) or existingSecret: the control plane needs PostgreSQL" -}}
{{- end -}}
{{- if not (hasPrefix "s3://" .Values.objectStore.url) -}}
{{- fail "objectStore.url: set an s3://BUCKET?endpoint=HOST:PORT URL: suspend snapshots and templates live there" -}}
{{- end -}}
{{- if and (not .Values.objectStore.existingSecret) (or (not .Values.objectStore.accessKey) (not .Values.objectStore.secretKey)) -}}
{{- fail "objectStore: set accessKey and secretKey, or existingSecret" -}}
{{- end -}}
{{- range $k := list "vcpus" "memoryMiB" "sandboxes" -}}
{{- if lt (int (index $.Values.worker.capacity $k)) 1 -}}
{{- fail (printf "worker.capacity.%s must be 1 or more" $k) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.secrets.secretsKey (ne (len (b64dec .Values.secrets.secretsKey)) 32) -}}
{{- fail "secrets.secretsKey must be the base64 of exactly 32 bytes" -}}
{{- end -}}
{{- if lt (int .Values.control.replicas) 1 -}}
{{- fail "control.replicas must be 1 or more" -}}
{{- end -}}
{{- end -}}

{{/* Object-store credentials as the environment spaced reads them from. */}}
{{- define "space.objectStoreEnv" -}}
- name: SPACE_S3_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "space.objectStoreSecret" . }}
      key: access-key
- name: SPACE_S3_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "space.objectStoreSecret" . }}
      key: secret-key
{{- end -}}

{{- define "space.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* millicores of a CPU quantity: "500m" → 500, "2" → 2000. */}}
{{- define "space.millicores" -}}
{{- $q := toString . -}}
{{- if hasSuffix "m" $q -}}{{- trimSuffix "m" $q | int -}}{{- else -}}{{- mulf (float64 $q) 1000 | int -}}{{- end -}}
{{- end -}}

{{/* TLS of the internal channels: the Secret (tls.crt, tls.key, ca.crt) and the names its certificate holds. */}}
{{- define "space.tlsSecret" -}}
{{- default (printf "%s-tls" (include "space.fullname" .)) .Values.tls.existingSecret -}}
{{- end -}}
{{- define "space.workerServerName" -}}
{{ include "space.fullname" . }}-worker.{{ .Release.Namespace }}.svc
{{- end -}}
{{- define "space.controlHost" -}}
{{ include "space.fullname" . }}-control.{{ .Release.Namespace }}.svc
{{- end -}}
{{- define "space.tlsDNSNames" -}}
{{- $full := include "space.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list (include "space.workerServerName" .) (printf "%s-control" $full) (printf "%s-control.%s" $full $ns) (include "space.controlHost" .) (printf "%s.%s" (include "space.controlHost" .) .Values.tls.clusterDomain) "localhost" | toJson -}}
{{- end -}}
{{- define "space.scheme" -}}{{ if .Values.tls.enabled }}https{{ else }}http{{ end }}{{- end -}}
