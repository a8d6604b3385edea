{{/*
Chart name, cut to the 63 characters a label value allows, without a trailing "-" (however many
the cut leaves).
*/}}
{{- define "forgerunner.name" -}}
{{- regexReplaceAll "-+$" (default .Chart.Name .Values.nameOverride | trunc 63) "" }}
{{- end }}

{{/*
Full name used as the name, or the prefix of the name, of every object; the release name alone
when it already contains the chart name, so `helm install forgerunner` gives objects named
"forgerunner". Always a DNS-1035 label (the rule for Service names, the strictest of the
chart's kinds; a DNS-1123 subdomain too): dots become "-", a name that does not start with a letter
gets the chart name in front, and it is cut to 63 characters without a trailing "-". Release
names Helm accepts may hold dots and start with a digit; names that were valid keep their value.
tests/chart/test_names.py checks every derived name against the API server's rules.
*/}}
{{- define "forgerunner.fullname" -}}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- $full := .Values.fullnameOverride }}
{{- if not $full }}
{{- if contains $name .Release.Name }}
{{- $full = .Release.Name }}
{{- else }}
{{- $full = printf "%s-%s" .Release.Name $name }}
{{- end }}
{{- end }}
{{- $full = replace "." "-" $full }}
{{- if not (regexMatch "^[a-z]" $full) }}
{{- $full = printf "%s-%s" $name $full }}
{{- end }}
{{- regexReplaceAll "-+$" ($full | trunc 63) "" }}
{{- end }}

{{/*
Labels that select the operator pods; never change them, Deployment selectors are immutable.
*/}}
{{- define "forgerunner.selectorLabels" -}}
app.kubernetes.io/name: {{ include "forgerunner.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels on every object of the release.
*/}}
{{- define "forgerunner.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "forgerunner.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: forgerunner
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The metrics Service's name: the full name and "-metrics", the full name cut first so the whole
stays a DNS-1035 label of at most 63 characters.
*/}}
{{- define "forgerunner.metricsServiceName" -}}
{{- printf "%s-metrics" (regexReplaceAll "-+$" (include "forgerunner.fullname" . | trunc 55) "") }}
{{- end }}

{{/*
The pod's affinity: `affinity` as given, plus, with more than one replica, the pod anti-affinity of
`podAntiAffinityPreset` unless `affinity` sets its own. Replicas on one node would lose the
leader and its standby together (security review L9). Empty when there is nothing to set.
*/}}
{{- define "forgerunner.affinity" -}}
{{- $affinity := deepCopy (default (dict) .Values.affinity) }}
{{- $preset := .Values.podAntiAffinityPreset }}
{{- if and (gt (int .Values.replicaCount) 1) (ne $preset "none") (not (hasKey $affinity "podAntiAffinity")) }}
{{- $term := dict "labelSelector" (dict "matchLabels" (include "forgerunner.selectorLabels" . | fromYaml)) "topologyKey" "kubernetes.io/hostname" }}
{{- if eq $preset "hard" }}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) }}
{{- else }}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) }}
{{- end }}
{{- end }}
{{- with $affinity }}
{{- toYaml . }}
{{- end }}
{{- end }}

{{/*
The operator's ServiceAccount name.
*/}}
{{- define "forgerunner.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "forgerunner.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference: a digest wins over a tag; the tag defaults to the chart's appVersion.
*/}}
{{- define "forgerunner.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The ClusterRole holding the runner container hooks' permissions (rbac.runnerContainerHooks),
bound by the operator to each kubernetes-mode group's runner ServiceAccount in the group's
namespace.
*/}}
{{- define "forgerunner.runnerHooksClusterRole" -}}
{{- printf "%s-runner-hooks" (include "forgerunner.fullname" .) }}
{{- end }}

{{/*
The ClusterRole the operator binds to itself in a kubernetes-mode group's namespace, to delete
what the hooks of the group's dead runners left behind.
*/}}
{{- define "forgerunner.runnerHooksCleanupClusterRole" -}}
{{- printf "%s-runner-hooks-cleanup" (include "forgerunner.fullname" .) }}
{{- end }}

{{/*
Lease name for leader election.
*/}}
{{- define "forgerunner.leaseName" -}}
{{- default (include "forgerunner.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/*
The operator configuration file (the config.yaml contract of crates/operator). Only contract
keys may appear: the operator exits with code 2 on an unknown key.
*/}}
{{- define "forgerunner.config" -}}
forges:
{{- range .Values.forges.enabled }}
  - {{ . }}
{{- end }}
watchNamespaces:
{{- if .Values.watchNamespaces }}
{{- range .Values.watchNamespaces }}
  - {{ . }}
{{- end }}
{{- else }} []
{{- end }}
forgeHosts:
  allowed:
{{- if .Values.forgeHosts.allowed }}
{{- range .Values.forgeHosts.allowed }}
    - {{ . | quote }}
{{- end }}
{{- else }} []
{{- end }}
  refusePrivateAddresses: {{ .Values.forgeHosts.refusePrivateAddresses }}
metrics:
  jobLabels: {{ .Values.metrics.jobLabels }}
runnerHooks:
{{- if .Values.rbac.runnerContainerHooks }}
  clusterRole: {{ include "forgerunner.runnerHooksClusterRole" . }}
  cleanupClusterRole: {{ include "forgerunner.runnerHooksCleanupClusterRole" . }}
  operatorServiceAccount: {{ include "forgerunner.serviceAccountName" . }}
{{- else }}
  clusterRole: ""
  cleanupClusterRole: ""
  operatorServiceAccount: ""
{{- end }}
  operatorNamespace: {{ .Release.Namespace }}
httpAddr: "0.0.0.0:8080"
metricsAddr: "0.0.0.0:{{ .Values.metrics.port }}"
logFormat: {{ .Values.logFormat }}
logLevel: {{ .Values.logLevel | quote }}
listingCacheEntries: {{ int64 .Values.listingCacheEntries }}
leaderElection:
  enabled: {{ .Values.leaderElection.enabled }}
  leaseName: {{ include "forgerunner.leaseName" . }}
  leaseNamespace: {{ .Release.Namespace }}
  leaseDurationSeconds: {{ .Values.leaderElection.leaseDurationSeconds }}
  {{- with .Values.leaderElection.renewDeadlineSeconds }}
  renewDeadlineSeconds: {{ . }}
  {{- end }}
  {{- with .Values.leaderElection.retryPeriodSeconds }}
  retryPeriodSeconds: {{ . }}
  {{- end }}
{{- end }}

{{/*
RBAC rules for namespaced resources, shared by the ClusterRole (all namespaces) and the
per-namespace Roles. Each rule says why the operator needs it; verbs are the minimum.
*/}}
{{- define "forgerunner.namespacedRules" -}}
# Watch RunnerGroups; add and remove the forgerunner.dev/cleanup finalizer with patches.
- apiGroups: ["forgerunner.dev"]
  resources: ["runnergroups"]
  verbs: ["list", "watch", "patch"]
# Write observed state (conditions, runner counts) with server-side apply.
- apiGroups: ["forgerunner.dev"]
  resources: ["runnergroups/status"]
  verbs: ["patch"]
# No runnergroups/finalizers rule: the owner references on runner Jobs and runner RBAC objects
# (kube's controller_owner_ref) set controller but not blockOwnerDeletion, and
# OwnerReferencesPermissionEnforcement checks that right only for references that block.
# One Job per runner: create on demand, watch progress, mark busy (annotation), delete on scale-down.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
# List runner pods for their phases, waiting reasons and exit codes (idle, busy, stuck, failed);
# annotate a runner pod with the forge job it runs once the forge tells (job identity).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "patch"]
# Read forge credentials (and, once after a restart, whether a pending runner has its Secret);
# create the per-runner Secret (JIT config / registration token; owned by the Job, so it goes
# with it). spec.cache: create the cache's Secret (shared secret and config files; owned by the
# cache Deployment, so it goes with it), read it back so the secret is kept, and update it when
# its config or owner changes. Never list or delete.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "update"]
# spec.cache (Gitea, Forgejo): the group's shared Actions cache, all owned by the group and named
# <group>-actions-cache. Read to tell the group's own from someone else's (never taken over).
# The cache server: updated in place when its spec changes, deleted when spec.cache goes.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "create", "update", "delete"]
# Its volume: grown in place when spec.cache.size grows, deleted when spec.cache goes.
# spec.dockerCache (containerMode dind): the group's pool of Docker data-root claims
# <group>-docker-<n>, owned by the group; listed to find the pool (and, once per group, any pool
# left from a removed spec.dockerCache), created when missing, deleted when no longer asked for.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "create", "update", "delete"]
# Its Service: replaced (deleted, created) when its spec changes.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "create", "delete"]
# The NetworkPolicy admitting only the group's runner pods to it: replaced the same way.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "delete"]
# Read the Job controller's FailedCreate Events (a quota or admission refusing a runner pod).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["list"]
{{- if .Values.rbac.runnerContainerHooks }}
# containerMode kubernetes / kubernetes-novolume (GitHub): the ServiceAccount each such group's
# runners run as. Created, never patched, and owned by the group; read to tell the group's own
# from someone else's (which is never taken over); deleted when the group no longer needs it.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create", "delete"]
# (the two RoleBindings of such a group, in its namespace: the hooks' ClusterRole for that
# account, the cleanup ClusterRole for the operator; same verbs, same reasons)
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["rolebindings"]
  verbs: ["get", "create", "delete"]
# Those bindings name ClusterRoles whose rules the operator does not hold: the API server allows
# that to whoever may "bind" the named role (RBAC docs, "Restrictions on role binding creation or
# update"), so the operator may bind these two and no other.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["clusterroles"]
  verbs: ["bind"]
  resourceNames:
    - {{ include "forgerunner.runnerHooksClusterRole" . }}
    - {{ include "forgerunner.runnerHooksCleanupClusterRole" . }}
{{- end }}
# Read the CA bundle ConfigMap a RunnerGroup may name (spec.<forge>.caBundleConfigMap).
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
# Report condition transitions as Events on the RunnerGroup (events.k8s.io/v1; a repeated
# Event is patched into a series).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
The runner container hooks' rules (actions/runner-container-hooks, packages/k8s), granted in a
group's namespace only, to that group's runner ServiceAccount. The same as ARC's runner Role and
as forgerunner_github::container_mode::runner_role_rules for containerMode kubernetes
(crates/operator/tests/rbac_coverage.rs compares them); kubernetes-novolume needs all but jobs.
*/}}
{{- define "forgerunner.runnerHooksRules" -}}
# Start, watch and delete the job pods.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "create", "delete"]
# Exec into the job pods to run the steps.
- apiGroups: [""]
  resources: ["pods/exec"]
  verbs: ["get", "create"]
# Stream the job pods' logs.
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get", "list", "watch"]
# Run container steps as Jobs (kubernetes mode).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "create", "delete"]
# Pass job secrets to the job pods through Secrets they create, read, list and clean up.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "create", "delete"]
{{- end }}

{{/*
What the operator needs, in a kubernetes-mode group's namespace only, to delete what the hooks
of the group's dead runners left (crates/core/src/reconcile/hook_leftovers.rs); it lists pods
with its own rule.
*/}}
{{- define "forgerunner.runnerHooksCleanupRules" -}}
# Delete the job pods of runner pods that are gone.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["delete"]
# Find the Secrets the hooks left (by label) and delete them.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["list", "delete"]
{{- end }}
