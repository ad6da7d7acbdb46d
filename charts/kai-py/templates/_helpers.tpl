{{/* Names and labels shared by every template. */}}
{{- define "kai-py.name" -}}kai-py{{- end -}}

{{- define "kai-py.labels" -}}
app.kubernetes.io/name: kai-py
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kai-py.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The roles that run as Deployments, by deploymentMode. */}}
{{- define "kai-py.deployments" -}}
{{- if eq .Values.deploymentMode "single" -}}
all: scheduler,binder,podgrouper
{{- else -}}
scheduler: scheduler
binder: binder
podgrouper: podgrouper
{{- end -}}
{{- end -}}

{{/* The ServiceAccount of a role ("all" in single mode). */}}
{{- define "kai-py.serviceAccount" -}}
{{- if eq .role "all" -}}kai-py{{- else -}}kai-py-{{ .role }}{{- end -}}
{{- end -}}

{{/* The options every `kai-py run` gets. */}}
{{- define "kai-py.runArgs" -}}
- --scheduler-name={{ .Values.schedulerName }}
- --schedule-period={{ .Values.schedulePeriod }}
- --placement={{ .Values.placement }}
- --queue-admission-gating={{ .Values.queueAdmissionGating }}
- --metrics-port={{ .Values.metrics.port }}
- --liveness=http://0.0.0.0:{{ .Values.healthPort }}/healthz
{{- if .Values.leaderElection.enabled }}
- --leader-elect
{{- else }}
- --no-leader-elect
{{- end }}
{{- if eq .Values.logLevel "debug" }}
- --verbose
{{- end }}
{{- end -}}

{{/* Environment of every kai-py container. */}}
{{- define "kai-py.env" -}}
- name: KAI_PY_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- end -}}

{{/* The PriorityClass of kai-py's own pods: a scheduler, binder or webhook that is
preempted is an outage. */}}
{{- define "kai-py.priorityClassName" -}}
{{ .Values.priorityClassName | default "kai-py-critical" }}
{{- end -}}

{{/* What every kai-py Deployment's pod spec shares; called with (dict "root" $
"component" C ["hook" true]): the replicas of one component keep apart (replicaAntiAffinity)
unless `affinity` has a podAntiAffinity of its own. */}}
{{- define "kai-py.podSpecCommon" -}}
{{- $values := .root.Values }}
{{- with $values.imagePullSecrets }}
imagePullSecrets: {{ toYaml . | nindent 2 }}
{{- end }}
{{- if not .hook }}
priorityClassName: {{ include "kai-py.priorityClassName" .root }}
{{- else if $values.priorityClassName }}
{{- /* A hook runs before the chart's own PriorityClass exists. */}}
priorityClassName: {{ $values.priorityClassName }}
{{- end }}
securityContext: {{ toYaml $values.podSecurityContext | nindent 2 }}
{{- with $values.nodeSelector }}
nodeSelector: {{ toYaml . | nindent 2 }}
{{- end }}
{{- with $values.tolerations }}
tolerations: {{ toYaml . | nindent 2 }}
{{- end }}
{{- $affinity := deepCopy ($values.affinity | default dict) }}
{{- if and (ne $values.replicaAntiAffinity "none") (not (hasKey $affinity "podAntiAffinity")) }}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (dict "app.kubernetes.io/instance" .root.Release.Name "app.kubernetes.io/component" .component)) }}
{{- if eq $values.replicaAntiAffinity "required" }}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) }}
{{- else }}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) }}
{{- end }}
{{- end }}
{{- with $affinity }}
affinity: {{ toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A PodDisruptionBudget for a component of more than one replica: a drain takes
one at a time, so a leader is always there to take over. (dict "root" $ "name" N
"component" C "replicas" R) */}}
{{- define "kai-py.pdb" -}}
{{- if gt (int .replicas) 1 }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "kai-py.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ .root.Release.Name }}
      app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{- define "kai-py.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: health}
  initialDelaySeconds: 10
  periodSeconds: 20
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /healthz, port: health}
  periodSeconds: 10
  timeoutSeconds: 5
{{- end -}}

{{/* The scheduling shards by name, checked: names unique and DNS labels, one named
default (it runs in the scheduler Deployment), no two serving the same pool. */}}
{{- define "kai-py.shards" -}}
{{- $byName := dict }}
{{- $pools := dict }}
{{- range $i, $shard := .Values.shards }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$" ($shard.name | toString)) }}
{{- fail (printf "values: shards[%d].name: %q is not a lower-case DNS label of 42 characters at most" $i ($shard.name | toString)) }}
{{- end }}
{{- if hasKey $byName $shard.name }}
{{- fail (printf "values: shards[%d].name: %q is given twice" $i $shard.name) }}
{{- end }}
{{- $pool := $shard.partitionLabelValue | default "" }}
{{- if hasKey $pools $pool }}
{{- fail (printf "values: shards[%d].partitionLabelValue: %q is served by shard %q already" $i $pool (get $pools $pool)) }}
{{- end }}
{{- $_ := set $pools $pool $shard.name }}
{{- $_ := set $byName $shard.name $shard }}
{{- end }}
{{- if not (hasKey $byName "default") }}
{{- fail "values: shards: needs the shard named default (the scheduler Deployment runs it)" }}
{{- end }}
{{- toYaml $byName }}
{{- end -}}
