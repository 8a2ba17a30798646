{{/* Names ------------------------------------------------------------------------------------ */}}
{{- define "cgc.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cgc.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<component>", kept within 63 characters */}}
{{- define "cgc.component" -}}
{{- printf "%s-%s" (include "cgc.fullname" .root | trunc (int (sub 62 (len .component))) | trimSuffix "-") .component -}}
{{- end -}}

{{- define "cgc.labels" -}}
app.kubernetes.io/name: {{ include "cgc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "cgc.commonLabels" . }}
{{- end -}}

{{/* labels besides the selector labels (pod templates add the selector labels themselves) */}}
{{- define "cgc.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: connect-group-coordinator
{{- end -}}

{{/* selector labels of one component: (dict "root" $ "component" "coordinator") */}}
{{- define "cgc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cgc.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "cgc.image" -}}
{{- $root := .root -}}
{{- printf "%s%s:%s" $root.Values.image.registry .name (default $root.Chart.AppVersion $root.Values.image.tag) -}}
{{- end -}}

{{- define "cgc.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cgc.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Database ---------------------------------------------------------------------------------- */}}
{{- define "cgc.database.check" -}}
{{- if and .Values.database.url .Values.database.existingSecret -}}
{{- fail "database: set database.url or database.existingSecret, not both" -}}
{{- end -}}
{{- if not (or .Values.database.url .Values.database.existingSecret .Values.database.bundled.enabled) -}}
{{- fail "database: set database.url or database.existingSecret (or database.bundled.enabled=true for a trial)" -}}
{{- end -}}
{{- end -}}

{{/* The bundled PostgreSQL runs only when no external database is given. */}}
{{- define "cgc.database.bundled" -}}
{{- if and .Values.database.bundled.enabled (not .Values.database.url) (not .Values.database.existingSecret) -}}true{{- end -}}
{{- end -}}

{{- define "cgc.database.secretName" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else -}}
{{- include "cgc.component" (dict "root" . "component" "database") -}}
{{- end -}}
{{- end -}}

{{- define "cgc.database.secretKey" -}}
{{- if .Values.database.existingSecret -}}{{ .Values.database.existingSecretKey }}{{- else -}}url{{- end -}}
{{- end -}}

{{- define "cgc.database.env" -}}
- name: CONNECT_COORDINATOR_DATABASE
  valueFrom:
    secretKeyRef:
      name: {{ include "cgc.database.secretName" . }}
      key: {{ include "cgc.database.secretKey" . }}
{{- end -}}

{{/* Security (SPEC §9): TLS and ACL flags, volumes and mounts, only when enabled --------------- */}}
{{- define "cgc.tls.check" -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) -}}
{{- fail "tls.enabled: set tls.secretName (a Secret with tls.crt, tls.key and ca.crt)" -}}
{{- end -}}
{{- end -}}

{{/* server-side flags of a gRPC server (coordinator, assignor) */}}
{{- define "cgc.server.securityArgs" -}}
{{- if .Values.tls.enabled }}
- --tls-cert=/etc/connect/tls/tls.crt
- --tls-key=/etc/connect/tls/tls.key
{{- if .Values.tls.requireClientCertificates }}
- --tls-client-ca=/etc/connect/tls/ca.crt
{{- end }}
- --health-listen=0.0.0.0:{{ .Values.tls.healthPort }}
{{- end }}
{{- if .Values.acl.enabled }}
- --acl-file=/etc/connect/acl/acl.yaml
{{- end }}
{{- end -}}

{{- define "cgc.security.volumeMounts" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/connect/tls
  readOnly: true
{{- end }}
{{- if .Values.acl.enabled }}
- name: acl
  mountPath: /etc/connect/acl
  readOnly: true
{{- end }}
{{- end -}}

{{- define "cgc.security.volumes" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .Values.tls.secretName }}
{{- end }}
{{- if .Values.acl.enabled }}
- name: acl
  configMap:
    name: {{ default (include "cgc.component" (dict "root" . "component" "acl")) .Values.acl.existingConfigMap }}
{{- end }}
{{- end -}}

{{/* The port gRPC probes (and the helm test) use: the plaintext health port when TLS is on */}}
{{- define "cgc.healthPortName" -}}
{{- if .Values.tls.enabled -}}health{{- else -}}grpc{{- end -}}
{{- end -}}

{{- define "cgc.probes" -}}
startupProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: 2
  failureThreshold: 60
readinessProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: 5
  failureThreshold: 2
livenessProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 6
{{- end -}}

{{- define "cgc.topologySpread" -}}
{{- $root := .root -}}
{{- range .constraints }}
- {{ toYaml (omit . "labelSelector") | nindent 2 | trim }}
  labelSelector:
    matchLabels:
      {{- include "cgc.selectorLabels" (dict "root" $root "component" $.component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/* Migrations run in the hook Job unless the database is the bundled one (it does not exist yet
     when pre-install hooks run): then the server migrates at start. */}}
{{- define "cgc.migrationHook" -}}
{{- if and .Values.coordinator.migrationJob (not (include "cgc.database.bundled" .)) -}}true{{- end -}}
{{- end -}}
