{{/*
Names. Every object is named after the release's full name, so two releases (in one
namespace or in two) never share an object; cluster-scoped objects carry the full name
too (two releases of the same name in two namespaces would share them: Helm refuses the
second install, the objects belonging to the first).
*/}}
{{- define "scheduling-extender.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "scheduling-extender.fullname" -}}
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

{{/* `name: suffix`: the full name with a suffix, cut so that it stays a valid name. */}}
{{- define "scheduling-extender.suffixed" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- printf "%s-%s" (include "scheduling-extender.fullname" $root | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix -}}
{{- end -}}

{{- define "scheduling-extender.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The labels every object carries (Helm's and Kubernetes' recommended set); the
     scheduler pods and the objects about them add app.kubernetes.io/component: scheduler. */}}
{{- define "scheduling-extender.labels" -}}
helm.sh/chart: {{ include "scheduling-extender.chart" . }}
app.kubernetes.io/name: {{ include "scheduling-extender.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: scheduling-extender
{{- end -}}

{{/* What selects this release's scheduler pods (Deployment, PDB, Services, policies). */}}
{{- define "scheduling-extender.selectorLabels" -}}
app.kubernetes.io/name: {{ include "scheduling-extender.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end -}}

{{/* The release's common labels without `name`: for the two metrics Services, whose
     app.kubernetes.io/name is the Prometheus job the rules and the dashboard read. */}}
{{- define "scheduling-extender.jobLabels" -}}
helm.sh/chart: {{ include "scheduling-extender.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: scheduling-extender
{{- end -}}

{{- define "scheduling-extender.serviceAccountName" -}}
{{- include "scheduling-extender.fullname" . -}}
{{- end -}}

{{/*
kube-scheduler's tag: the value, else the cluster's version, never newer than the API
server (version-skew policy):
  v1.30.5-gke.1014001 -> v1.30.5 (the vendor suffix dropped);
  v1.34 (Argo CD passes major.minor only) -> v1.34.0, the first patch of that minor.
*/}}
{{- define "scheduling-extender.kubeSchedulerTag" -}}
{{- $kube := .Capabilities.KubeVersion -}}
{{- $tag := .Values.kubeScheduler.image.tag -}}
{{- if not $tag -}}
{{- $tag = regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" $kube.Version -}}
{{- end -}}
{{- if not $tag -}}
{{- $major := regexFind "^[0-9]+" (toString $kube.Major) -}}
{{- $minor := regexFind "^[0-9]+" (toString $kube.Minor) -}}
{{- if and $major $minor -}}
{{- $tag = printf "v%s.%s.0" $major $minor -}}
{{- end -}}
{{- end -}}
{{- if not $tag -}}
{{- fail (printf "cannot derive kube-scheduler's tag from the cluster version %q: set kubeScheduler.image.tag" $kube.Version) -}}
{{- end -}}
{{- $tag -}}
{{- end -}}

{{- define "scheduling-extender.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The extender's configuration file: the chart's defaults, then `extender.config`. */}}
{{- define "scheduling-extender.extenderConfig" -}}
{{- $defaults := dict
  "listen" "127.0.0.1:8888"
  "schedulerConfig" "kube-scheduler-config.yaml"
  "scoreMode" "in-tree"
  "workers" 1
  "threads" 4
  "workerClass" "inline"
  "logLevel" "info"
  "featureGates" (dict
    "TaintTolerationComparisonOperators" true
    "TaintTolerationNodeAffinitySemverComparisonOperators" true
    "TaintTolerationCEL" true
    "NodeInclusionPolicyInPodTopologySpread" true)
-}}
{{- if .Values.drift.enabled }}{{- $_ := set $defaults "driftEndpoint" true -}}{{- end -}}
{{- if .Values.drift.events }}{{- $_ := set $defaults "driftEvents" true -}}{{- end -}}
{{- if .Values.drift.topologySpread }}{{- $_ := set $defaults "driftTopologySpread" true -}}{{- end -}}
{{- $config := mergeOverwrite $defaults (deepCopy .Values.extender.config) -}}
{{- range $key := list "listen" "inCluster" "kubeconfig" "cluster" "metricsListen" "webhookListen" "tlsCertFile" "tlsPrivateKeyFile" -}}
{{- if hasKey $.Values.extender.config $key -}}
{{- fail (printf "extender.config.%s is set by the chart (the pod's layout: a sidecar of kube-scheduler on 127.0.0.1, live mode, metrics on 8889, the webhook's listener and files); see values.yaml" $key) -}}
{{- end -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The KubeSchedulerConfiguration (manifests/base/kube-scheduler-config.yaml explains each field). */}}
{{- define "scheduling-extender.schedulerConfig" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: {{ include "scheduling-extender.fullname" . }}
  resourceNamespace: {{ .Release.Namespace }}
percentageOfNodesToScore: 100
profiles:
- schedulerName: {{ .Values.schedulerName }}
  plugins:
    multiPoint:
      disabled:
      - name: TaintToleration
      - name: NodeAffinity
      - name: NodeUnschedulable
      - name: PodTopologySpread
  pluginConfig:
  - name: DefaultPreemption
    args:
      minCandidateNodesPercentage: 100
      minCandidateNodesAbsolute: 100
extenders:
- urlPrefix: http://127.0.0.1:8888/scheduler
  filterVerb: filter
  prioritizeVerb: prioritize
  preemptVerb: preempt
  bindVerb: bind
  weight: {{ eq (get (include "scheduling-extender.extenderConfig" . | fromYaml) "scoreMode") "scaled" | ternary 7 1 }}
  nodeCacheCapable: true
  httpTimeout: {{ .Values.kubeScheduler.extenderHTTPTimeout }}
  ignorable: false
{{- end -}}
