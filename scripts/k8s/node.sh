# shellcheck shell=bash
# A real node for scripts/k8s-testenv (sourced by it): kube-controller-manager and
# kube-scheduler next to the API server, containerd 2.x with runc and the CNI bridge, and a
# kubelet joined to the test API server. Everything it makes is its own and removed by
# node_stop: a unique cgroup root in every hierarchy (kubelet cgroupRoot), containerd's root
# and state, the kubelet's root, pod logs and volume plugins under DIR, a bridge of its own
# with a /24 nobody else routes, the CNI's address store under DIR. The host's sysctls the
# kubelet sets (overcommit, panic, keys) are recorded and put back. See docs/K8S-TESTENV.md.
#
# Needs: runc (/usr/sbin/runc, Debian's), the CNI plugins (/usr/lib/cni: bridge, host-local,
# loopback; Debian's containernetworking-plugins), iproute2, mount/umount.

# shellcheck disable=SC2034 # used by scripts/k8s-testenv, which sources this file
NODE_BINS=(kubelet kube-scheduler kube-controller-manager containerd containerd-shim-runc-v2 ctr pause)
CNI_DIR=${BULKHEAD_K8S_CNI_DIR:-/usr/lib/cni}
RUNC=${BULKHEAD_K8S_RUNC:-/usr/sbin/runc}
# The sysctls kubelet's container manager sets unless protectKernelDefaults (which would make
# it refuse to start here instead): recorded before, put back at stop.
KUBELET_SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

node_check() {
  [[ -x $RUNC ]] || die "runc is needed at $RUNC (apt-get install runc)"
  local p
  for p in bridge host-local loopback; do
    [[ -x $CNI_DIR/$p ]] || die "the CNI plugin $p is needed in $CNI_DIR (apt-get install containernetworking-plugins)"
  done
  command -v ip >/dev/null || die "ip (iproute2) is needed"
}

# node_net DIR: a bridge and a free 10.250.X.0/24 for the pods; the host's end is .1, where
# the API server listens so that pods reach it (there is no kube-proxy).
node_net() {
  local dir=$1 x i routes br
  routes=$(ip -4 route show table all 2>/dev/null)
  for ((i = 0; i < 50; i++)); do
    x=$((RANDOM % 250 + 1))
    [[ $routes == *"10.250.$x."* ]] || break
  done
  ((i < 50)) || die "no free 10.250.X.0/24 for the pods"
  br=bhk8s$(printf '%04x' $((RANDOM % 65536)))
  ip link add "$br" type bridge || die "cannot create the bridge $br"
  echo "$br" >"$dir/node/bridge"
  ip addr add "10.250.$x.1/24" dev "$br"
  ip link set "$br" up
  echo "10.250.$x" >"$dir/node/subnet"
}

# node_cgroups DIR: the cgroup root of the kubelet (and so of every pod), in every hierarchy.
node_cgroups() {
  local dir=$1 name mnt f
  name=bulkhead-k8s-node-$(basename "$dir")-$$
  echo "/$name" >"$dir/node/cgroup-root"
  while read -r mnt; do
    mkdir "$mnt/$name"
    echo "$mnt/$name" >>"$dir/node/cgroup-dirs"
    # v1 cpuset starts with no CPUs and no memory nodes: inherit the parent's.
    if [[ -e $mnt/cpuset.cpus && ! -e $mnt/cgroup.controllers ]]; then
      for f in cpuset.cpus cpuset.mems; do cat "$mnt/$f" >"$mnt/$name/$f"; done
    fi
  done < <(awk '$9 == "cgroup" || $9 == "cgroup2" { print $5 }' /proc/self/mountinfo | sort -u)
}

node_sysctls_save() {
  local dir=$1 k
  for k in "${KUBELET_SYSCTLS[@]}"; do
    [[ -e /proc/sys/$k ]] && printf '%s %s\n' "$k" "$(<"/proc/sys/$k")"
  done >"$dir/node/sysctls"
}

node_sysctls_restore() {
  local dir=$1 k v
  [[ -s $dir/node/sysctls ]] || return 0
  while read -r k v; do
    [[ $(<"/proc/sys/$k") == "$v" ]] || echo "$v" >"/proc/sys/$k" || log "cannot put back $k = $v"
  done <"$dir/node/sysctls"
}

node_containerd_config() {
  local dir=$1
  local n=$dir/node
  cat >"$n/containerd.toml" <<EOF
version = 3
root = "$n/containerd/root"
state = "$n/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$n/containerd.sock"

[ttrpc]
  address = "$n/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$n/containerd/opt"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  # No container gets an OOM score below containerd's own: the kubelet asks -998 for pod
  # sandboxes, which needs CAP_SYS_RESOURCE, and some machines (this project's CI) run
  # without it.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$CNI_DIR"]
    conf_dir = "$n/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
        Root = "$n/runc"
        SystemdCgroup = false

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "$n/nri/nri.sock"
  plugin_path = "$n/nri/plugins"
  plugin_config_path = "$n/nri/conf.d"
  # NRI's built-in validator: a pod annotated required-plugins.noderesource.dev/pod:
  # "[bulkhead]" is not created while the bulkhead plugin is not registered (docs/FLEET.md).
  [plugins."io.containerd.nri.v1.nri".default_validator]
    enable = true
EOF
  mkdir -p "$n/cni/net.d" "$n/nri/plugins" "$n/nri/conf.d" "$n/runc"
  local sub
  sub=$(<"$n/subnet")
  cat >"$n/cni/net.d/10-bulkhead-test.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "bulkhead-test",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$(<"$n/bridge")",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$n/cni/ipam",
        "ranges": [[{"subnet": "$sub.0/24", "gateway": "$sub.1"}]]
      }
    }
  ]
}
EOF
}

node_kubelet_config() {
  local dir=$1
  local n=$dir/node port healthz
  free_port port
  free_port healthz
  cat >"$n/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: $(<"$n/cgroup-root")
cgroupsPerQOS: true
# Hybrid hosts count as cgroup v1 for the kubelet and runc; v1 is deprecated since 1.31 and
# would refuse to start with failCgroupV1 (default true since 1.35, KEP-5573).
failCgroupV1: false
containerRuntimeEndpoint: unix://$n/containerd.sock
imageServiceEndpoint: unix://$n/containerd.sock
address: $(<"$n/subnet").1
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
podLogsDir: $n/kubelet/pod-logs
volumePluginDir: $n/kubelet/volume-plugins
makeIPTablesUtilChains: false
protectKernelDefaults: false
# Never evict or garbage-collect the imported images for disk space on a shared machine.
# Absolute thresholds, not shares: on a large, nearly full disk (a CI runner's 252G with 3G
# left) 1% is already DiskPressure, and the kubelet then rejects every new pod at admission
# ("The node had condition: [DiskPressure]"), tolerations or not. The test pods need a few MB.
evictionHard: {memory.available: 100Mi, nodefs.available: 256Mi, imagefs.available: 256Mi, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 20
resolvConf: /etc/resolv.conf
failSwapOn: false
EOF
  echo "$healthz" >"$n/kubelet-healthz-port"
}

# node_start DIR NODE: after the API server is ready (start sourced DIR/env's values).
node_start() {
  local dir=$1 node=$2 n=$1/node t0 i pid
  t0=$(now_ms)
  local ca=$dir/ca.crt kc=$dir/kubeconfig
  node_cgroups "$dir"
  # The scheduler and the controllers the node needs: DaemonSets and Jobs get pods, deleted
  # owners take their dependents, namespaces get their default ServiceAccount and the root
  # CA ConfigMap that projected ServiceAccount tokens mount, and the node lifecycle
  # controller lifts the not-ready taint the kubelet registers the node with.
  spawn "$n/kube-controller-manager.pid" "$n/kube-controller-manager.log" "$BIN/kube-controller-manager" \
    --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --leader-elect=false --secure-port 0 --root-ca-file "$ca" \
    --controllers daemonset-controller,job-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,root-ca-certificate-publisher-controller,node-lifecycle-controller \
    --use-service-account-credentials=false --v 1
  spawn "$n/kube-scheduler.pid" "$n/kube-scheduler.log" "$BIN/kube-scheduler" \
    --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --leader-elect=false --secure-port 0 --v 1
  node_containerd_config "$dir"
  mkdir -p "$n/kubelet/root" "$n/kubelet/pod-logs" "$n/kubelet/volume-plugins"
  node_kubelet_config "$dir"
  # Shims put their sockets in /run/containerd/s whatever containerd's state dir is.
  [[ -e /run/containerd ]] || touch "$n/run-containerd-made"
  # The kubelet links containers' logs in /var/log/containers whatever its podLogsDir.
  [[ -e /var/log/containers ]] || touch "$n/var-log-containers-made"
  # containerd finds its shim on PATH.
  PATH=$BIN:$PATH spawn "$n/containerd.pid" "$n/containerd.log" "$BIN/containerd" --config "$n/containerd.toml"
  pid=$(<"$n/containerd.pid")
  for ((i = 0; ; i++)); do
    "$BIN/ctr" --address "$n/containerd.sock" version >/dev/null 2>&1 && break
    alive "$pid" || { tail -20 "$n/containerd.log" >&2; die "containerd exited (log: $n/containerd.log)"; }
    ((i < 300)) || die "containerd not answering after 30 s (log: $n/containerd.log)"
    sleep 0.1
  done
  log "containerd $CONTAINERD_VERSION up (pid $pid) after $(($(now_ms) - t0)) ms"
  "$ROOT/scripts/k8s/oci-image" --out "$n/pause.tar" --name "$PAUSE_IMAGE" \
    --add "$LOCAL_BIN/pause:/pause" --entrypoint /pause >/dev/null
  node_import "$dir" "$n/pause.tar"
  node_sysctls_save "$dir"
  spawn "$n/kubelet.pid" "$n/kubelet.log" "$BIN/kubelet" \
    --config "$n/kubelet/config.yaml" --kubeconfig "$kc" --root-dir "$n/kubelet/root" \
    --hostname-override "$node" --node-ip "$(<"$n/subnet").1" --v 1
  pid=$(<"$n/kubelet.pid")
  for ((i = 0; ; i++)); do
    # Ready, and schedulable: the not-ready taint lifted.
    [[ $(kube_get "$dir" "/api/v1/nodes/$node" | python3 -c '
import json, sys
n = json.load(sys.stdin)
ready = any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
tainted = any(t["key"].startswith("node.kubernetes.io/") for t in n["spec"].get("taints", []))
print(ready and not tainted)' 2>/dev/null) == True ]] && break
    alive "$pid" || { tail -30 "$n/kubelet.log" >&2; die "kubelet exited (log: $n/kubelet.log)"; }
    ((i < 1200)) || die "node $node not Ready after 120 s (log: $n/kubelet.log)"
    sleep 0.1
  done
  {
    printf 'export K8S_NODE=%q\n' "$node"
    printf 'export K8S_NODE_IP=%q\n' "$(<"$n/subnet").1"
    printf 'export K8S_NODE_CGROUP_ROOT=%q\n' "$(<"$n/cgroup-root")"
    printf 'export K8S_NODE_KUBELET_CONFIG=%q\n' "$n/kubelet/config.yaml"
    printf 'export K8S_NODE_NRI_SOCKET=%q\n' "$n/nri/nri.sock"
    printf 'export K8S_NODE_CONTAINERD=%q\n' "$n/containerd.sock"
    printf 'export KUBELET_PID=%q\n' "$pid"
  } >>"$dir/env"
  log "node $node Ready (kubelet $K8S_VERSION pid $pid, containerd, runc $("$RUNC" --version | awk 'NR == 1 { print $3 }')); node start took $(($(now_ms) - t0)) ms"
}

# kube_get DIR PATH: GET from the API server with the admin token.
kube_get() {
  local dir=$1 url token
  url=$(<"$dir/kube-apiserver.url")
  token=$(cut -d, -f1 "$dir/tokens.csv")
  curl -sf --max-time 5 --cacert "$dir/ca.crt" -H "Authorization: Bearer $token" "$url$2"
}

node_import() {
  local dir=$1 tar=$2
  "$BIN/ctr" --address "$dir/node/containerd.sock" -n k8s.io images import --local "$tar" >/dev/null ||
    die "ctr images import $tar failed"
}

# Kill every process in the node's cgroups (the pods' containers; they are all ours).
node_kill_cgroup_procs() {
  local dir=$1 d pids
  [[ -s $dir/node/cgroup-dirs ]] || return 0
  for ((i = 0; i < 50; i++)); do
    pids=$(while read -r d; do [[ -d $d ]] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null; done <"$dir/node/cgroup-dirs" | sort -u)
    [[ -z $pids ]] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  log "processes left in the node's cgroups: $pids"
}

# Unmount everything under DIR (overlay roots, netns, the kubelet's tmpfs volumes), deepest first.
node_unmount() {
  local dir=$1 m
  for ((i = 0; i < 5; i++)); do
    mapfile -t mounts < <(awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
    ((${#mounts[@]})) || return 0
    for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
}

node_stop() {
  local dir=$1 n=$1/node pid p
  [[ -d $n ]] || return 0
  # The containers' processes first (the kubelet would restart them), then the daemons.
  stop_pid TERM "$n/kubelet.pid" "$BIN/kubelet" || true
  node_kill_cgroup_procs "$dir"
  stop_pid TERM "$n/containerd.pid" "$BIN/containerd" || true
  # Shims outlive containerd (they are daemons of their own): stop this node's by their
  # binary and their -address, by PID.
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/exe" 2>/dev/null) == "$BIN/containerd-shim-runc-v2" ]] || continue
    if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$n/containerd.sock"; then
      kill -KILL "${p#/proc/}" 2>/dev/null || true
    fi
  done
  # Their sockets (containerd 2 names them in each bundle's bootstrap.json).
  for p in "$n"/containerd/state/io.containerd.runtime.v2.task/*/*/bootstrap.json; do
    [[ -s $p ]] || continue
    p=$(grep -o 'unix:///run/containerd/s/[0-9a-f]*' "$p" | head -1) || continue
    rm -f "${p#unix://}"
  done
  if [[ -e $n/run-containerd-made ]]; then
    rmdir /run/containerd/s /run/containerd 2>/dev/null || true
  fi
  stop_pid KILL "$n/kube-scheduler.pid" "$BIN/kube-scheduler" || true
  stop_pid KILL "$n/kube-controller-manager.pid" "$BIN/kube-controller-manager" || true
  node_unmount "$dir"
  # The pods' network namespaces are gone with their mounts; so are their veths.
  if [[ -s $n/bridge ]] && ip link show "$(<"$n/bridge")" >/dev/null 2>&1; then
    ip link del "$(<"$n/bridge")" || log "cannot remove the bridge $(<"$n/bridge")"
  fi
  # The kubelet's links to container logs (it removes them with the containers).
  find /var/log/containers -maxdepth 1 -type l -lname "$n/*" -delete 2>/dev/null || true
  if [[ -e $n/var-log-containers-made ]]; then rmdir /var/log/containers 2>/dev/null || true; fi
  if [[ -s $n/cgroup-dirs ]]; then
    while read -r p; do
      [[ -d $p ]] && { find "$p" -depth -type d -exec rmdir {} + 2>/dev/null || true; }
      if [[ -d $p ]]; then log "cgroup $p could not be removed"; fi
    done <"$n/cgroup-dirs"
  fi
  node_sysctls_restore "$dir"
}
