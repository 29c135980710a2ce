#!/usr/bin/env bash
# `scripts/k8s-testenv smoke`: build if needed, start a test control plane in a temporary directory
# and use it the way the bulkhead node agent will (a cluster-scoped CRD with a status subresource,
# server-side dry run, server-side apply of status, a watch, a ServiceAccount token limited by
# RBAC), then kubectl and helm; stop and clean up. Each step prints its time; any failure exits 1.
set -euo pipefail

TESTENV=${1:-$(cd "$(dirname "$0")/.." && pwd)/k8s-testenv}
command -v jq >/dev/null || { echo "smoke: jq is needed" >&2; exit 1; }
command -v curl >/dev/null || { echo "smoke: curl is needed" >&2; exit 1; }

now_ms() { date +%s%3N; }
T_ALL=$(now_ms)
STEP='' T_STEP=0 PASSED=0
begin() { STEP=$1; T_STEP=$(now_ms); }
ok() { PASSED=$((PASSED + 1)); printf '[smoke] ok   %-58s %6d ms%s\n' "$STEP" $(($(now_ms) - T_STEP)) "${1:+  ($1)}"; }
fail() { printf '[smoke] FAIL %s: %s\n' "$STEP" "$*" >&2; exit 1; }

DIR=$(mktemp -d /tmp/k8s-testenv-smoke.XXXXXX)
WORK=$(mktemp -d /tmp/k8s-testenv-smoke-work.XXXXXX)
WATCH_PID=
cleanup() {
  local rc=$?
  if [[ -n $WATCH_PID ]]; then kill "$WATCH_PID" 2>/dev/null || true; wait "$WATCH_PID" 2>/dev/null || true; fi
  if [[ -e $DIR/.k8s-testenv ]]; then
    ((rc == 0)) || { echo "--- kube-apiserver.log (tail)" >&2; tail -20 "$DIR/kube-apiserver.log" >&2 || true; }
    "$TESTENV" stop "$DIR" || true
  fi
  rm -rf "$DIR" "$WORK"
  printf '[smoke] %d steps in %d ms\nsmoke: %d passed, %d failed\n' "$PASSED" $(($(now_ms) - T_ALL)) \
    "$PASSED" $((rc == 0 ? 0 : 1))
  exit "$rc"
}
trap cleanup EXIT

# req TOKEN METHOD PATH [CONTENT-TYPE BODY]: response body in $WORK/out, prints the HTTP status.
req() {
  local tok=$1 method=$2 path=$3 args=()
  (($# > 3)) && args=(-H "Content-Type: $4" --data-binary "$5")
  curl -sS --max-time 20 --cacert "$K8S_CA_FILE" -H "Authorization: Bearer $tok" -X "$method" \
    "${args[@]}" -o "$WORK/out" -w '%{http_code}' "$K8S_API_URL$path"
}
# api METHOD PATH [CONTENT-TYPE BODY]: as the admin; fails unless 2xx; prints the response body.
api() {
  local code
  code=$(req "$K8S_TOKEN" "$@")
  [[ $code == 2?? ]] || fail "$1 $2: HTTP $code: $(head -c 400 "$WORK/out")"
  cat "$WORK/out"
}
# expect CODE TOKEN METHOD PATH [CT BODY]: the request must answer CODE (retried for 10 s, since
# new CRDs and RBAC bindings take a moment to be served and seen by the authorizer).
expect() {
  local want=$1 code i
  shift
  for ((i = 0; i < 100; i++)); do
    code=$(req "$@")
    [[ $code == "$want" ]] && return 0
    sleep 0.1
  done
  fail "$2 $3: HTTP $code, expected $want: $(head -c 400 "$WORK/out")"
}

begin "build (cached after the first run)"
BIN=$("$TESTENV" build)
ok "$BIN"

begin "start etcd + kube-apiserver"
"$TESTENV" start "$DIR" 2>"$WORK/start.log" || { cat "$WORK/start.log" >&2; fail "start"; }
# shellcheck source=/dev/null
source "$DIR/env"
ok "$K8S_API_URL"

begin "GET /version"
v=$(api GET /version | jq -r .gitVersion)
[[ $v == "$K8S_VERSION" ]] || fail "version $v"
ok "$v"

PLANS=/apis/bulkhead.io/v1alpha1/plans
begin "create CRD plans.bulkhead.io (cluster-scoped, status subresource)"
api POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions application/yaml '
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: plans.bulkhead.io}
spec:
  group: bulkhead.io
  scope: Cluster
  names: {plural: plans, singular: plan, kind: Plan, listKind: PlanList}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [slice]
            properties:
              slice: {type: string}
              memoryMax: {type: string}
              cpuWeight: {type: integer, minimum: 1, maximum: 10000}
          status:
            type: object
            properties:
              phase: {type: string}
              observedGeneration: {type: integer}
' >/dev/null
ok

begin "wait for the CRD to be Established and served"
for ((i = 0; ; i++)); do
  api GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/plans.bulkhead.io \
    | jq -e '.status.conditions[]? | select(.type == "Established" and .status == "True")' >/dev/null && break
  ((i < 100)) || fail "not Established after 10 s"
  sleep 0.1
done
expect 200 "$K8S_TOKEN" GET "$PLANS"
ok

PLAN='{"apiVersion":"bulkhead.io/v1alpha1","kind":"Plan","metadata":{"name":"redis"},
  "spec":{"slice":"db-redis.slice","memoryMax":"2G","cpuWeight":200}}'
begin "create Plan redis"
RV=$(api POST "$PLANS" application/json "$PLAN" | jq -r .metadata.resourceVersion)
ok "resourceVersion $RV"

begin "schema validation rejects cpuWeight 0 (422)"
code=$(req "$K8S_TOKEN" POST "$PLANS" application/json \
  '{"apiVersion":"bulkhead.io/v1alpha1","kind":"Plan","metadata":{"name":"bad"},"spec":{"slice":"x.slice","cpuWeight":0}}')
[[ $code == 422 ]] || fail "HTTP $code"
ok "$(jq -r .message "$WORK/out" | head -c 80)"

begin "server-side dry-run create (dryRun=All) stores nothing"
name=$(api POST "$PLANS?dryRun=All" application/json \
  '{"apiVersion":"bulkhead.io/v1alpha1","kind":"Plan","metadata":{"name":"dry"},"spec":{"slice":"dry.slice"}}' | jq -r .metadata.name)
[[ $name == dry ]] || fail "dry run answered $name"
code=$(req "$K8S_TOKEN" GET "$PLANS/dry")
[[ $code == 404 ]] || fail "GET after dry run: HTTP $code"
ok

begin "start a watch on plans from resourceVersion $RV"
curl -sS -N --max-time 30 --cacert "$K8S_CA_FILE" -H "Authorization: Bearer $K8S_TOKEN" \
  "$K8S_API_URL$PLANS?watch=1&resourceVersion=$RV&allowWatchBookmarks=true" >"$WORK/watch" 2>/dev/null &
WATCH_PID=$!
ok

begin "server-side apply of status (apply-patch+yaml, fieldManager)"
out=$(api PATCH "$PLANS/redis/status?fieldManager=bulkhead-agent&force=true" application/apply-patch+yaml '
apiVersion: bulkhead.io/v1alpha1
kind: Plan
metadata: {name: redis}
status: {phase: Applied, observedGeneration: 1}
')
[[ $(jq -r .status.phase <<<"$out") == Applied ]] || fail "status not applied: $out"
jq -e '.metadata.managedFields[] | select(.manager == "bulkhead-agent" and .operation == "Apply" and .subresource == "status")' \
  <<<"$out" >/dev/null || fail "no managedFields entry for bulkhead-agent"
[[ $(jq -r .spec.slice <<<"$out") == db-redis.slice ]] || fail "spec changed"
ok "managedFields: bulkhead-agent Apply status"

begin "the watch sees the status change (MODIFIED)"
for ((i = 0; ; i++)); do
  jq -e 'select(.type == "MODIFIED" and .object.status.phase == "Applied")' "$WORK/watch" >/dev/null 2>&1 && break
  ((i < 100)) || fail "no MODIFIED event in 10 s: $(head -c 400 "$WORK/watch")"
  sleep 0.1
done
kill "$WATCH_PID" 2>/dev/null || true
wait "$WATCH_PID" 2>/dev/null || true
WATCH_PID=
ok "$(jq -r .type "$WORK/watch" | sort | uniq -c | tr -s ' \n' ' ')"

begin "ServiceAccount + ClusterRole + ClusterRoleBinding"
api POST /api/v1/namespaces application/json '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bulkhead-system"}}' >/dev/null
api POST /api/v1/namespaces/bulkhead-system/serviceaccounts application/json \
  '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"bulkhead-agent"}}' >/dev/null
api POST /apis/rbac.authorization.k8s.io/v1/clusterroles application/yaml '
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: bulkhead-agent}
rules:
- apiGroups: [bulkhead.io]
  resources: [plans]
  verbs: [get, list, watch]
- apiGroups: [bulkhead.io]
  resources: [plans/status]
  verbs: [get, patch, update]
' >/dev/null
api POST /apis/rbac.authorization.k8s.io/v1/clusterrolebindings application/yaml '
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bulkhead-agent}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bulkhead-agent}
subjects:
- {kind: ServiceAccount, name: bulkhead-agent, namespace: bulkhead-system}
' >/dev/null
ok

begin "TokenRequest for the ServiceAccount"
SA_TOKEN=$(api POST /api/v1/namespaces/bulkhead-system/serviceaccounts/bulkhead-agent/token application/json \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":600}}' | jq -r .status.token)
[[ -n $SA_TOKEN && $SA_TOKEN != null ]] || fail "no token"
who=$(req "$SA_TOKEN" POST /apis/authentication.k8s.io/v1/selfsubjectreviews application/json \
  '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}' >/dev/null; jq -r .status.userInfo.username "$WORK/out")
[[ $who == system:serviceaccount:bulkhead-system:bulkhead-agent ]] || fail "token is $who"
ok "$who"

begin "SA token: list plans 200, patch status 200, list secrets 403"
expect 200 "$SA_TOKEN" GET "$PLANS"
[[ $(jq -r '.items[0].metadata.name' "$WORK/out") == redis ]] || fail "list: $(head -c 300 "$WORK/out")"
expect 200 "$SA_TOKEN" PATCH "$PLANS/redis/status?fieldManager=bulkhead-agent" application/apply-patch+yaml \
  '{"apiVersion":"bulkhead.io/v1alpha1","kind":"Plan","metadata":{"name":"redis"},"status":{"phase":"Ready","observedGeneration":1}}'
expect 403 "$SA_TOKEN" GET /api/v1/namespaces/bulkhead-system/secrets
expect 403 "$SA_TOKEN" DELETE "$PLANS/redis"
ok "$(jq -r .message "$WORK/out" | head -c 70)"

if [[ -x $BIN/kubectl ]]; then
  begin "kubectl version / get plans"
  kv=$("$BIN/kubectl" version -o json | jq -r '.clientVersion.gitVersion + " -> server " + .serverVersion.gitVersion')
  "$BIN/kubectl" get plans -o custom-columns=NAME:.metadata.name,SLICE:.spec.slice,PHASE:.status.phase >"$WORK/kget"
  grep -q 'redis.*db-redis.slice.*Ready' "$WORK/kget" || fail "$(cat "$WORK/kget")"
  "$BIN/kubectl" auth can-i list secrets --as system:serviceaccount:bulkhead-system:bulkhead-agent -A >"$WORK/cani" 2>&1 || true
  grep -qx no "$WORK/cani" || fail "kubectl auth can-i: $(cat "$WORK/cani")"
  ok "$kv"
fi

export HELM_CACHE_HOME=$WORK/helm/cache HELM_CONFIG_HOME=$WORK/helm/config HELM_DATA_HOME=$WORK/helm/data
begin "helm version"
hv=$("$BIN/helm" version --short)
ok "$hv"

begin "helm template of a trivial chart"
mkdir -p "$WORK/chart/templates"
cat >"$WORK/chart/Chart.yaml" <<'EOF'
apiVersion: v2
name: bulkhead-smoke
version: 0.1.0
appVersion: "0.0.0"
EOF
cat >"$WORK/chart/values.yaml" <<'EOF'
slice: db-redis.slice
EOF
cat >"$WORK/chart/templates/plan.yaml" <<'EOF'
apiVersion: bulkhead.io/v1alpha1
kind: Plan
metadata:
  name: {{ .Release.Name }}
  labels: {app.kubernetes.io/managed-by: {{ .Release.Service }}}
spec:
  slice: {{ .Values.slice | quote }}
  memoryMax: {{ printf "kube-%s" .Capabilities.KubeVersion.Version | quote }}
EOF
"$BIN/helm" template smoke "$WORK/chart" --set slice=db-pg.slice >"$WORK/rendered"
grep -q 'slice: "db-pg.slice"' "$WORK/rendered" || fail "$(cat "$WORK/rendered")"
ok "$(grep memoryMax "$WORK/rendered" | tr -d ' ')"

begin "helm install/list/uninstall against the test apiserver"
"$BIN/helm" install smoke "$WORK/chart" -n bulkhead-system >/dev/null
"$BIN/helm" list -n bulkhead-system -q | grep -qx smoke || fail "helm list"
[[ $(api GET "$PLANS/smoke" | jq -r .spec.slice) == db-redis.slice ]] || fail "installed Plan"
"$BIN/helm" uninstall smoke -n bulkhead-system >/dev/null
code=$(req "$K8S_TOKEN" GET "$PLANS/smoke")
[[ $code == 404 ]] || fail "Plan still there after uninstall: HTTP $code"
ok

begin "stop (daemons gone, directory removed)"
pids="$ETCD_PID $KUBE_APISERVER_PID"
"$TESTENV" stop "$DIR" 2>/dev/null
for p in $pids; do
  # Gone, or a zombie that PID 1 has not reaped yet.
  [[ ! -e /proc/$p/stat || $(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) == Z* ]] || fail "pid $p still running"
done
curl -s --max-time 2 -o /dev/null "$K8S_API_URL" 2>/dev/null && fail "$K8S_API_URL still answers"
curl -s --max-time 2 -o /dev/null "$ETCD_URL/health" 2>/dev/null && fail "$ETCD_URL still answers"
[[ ! -e $DIR ]] || fail "$DIR left behind"
ok
