#!/bin/bash
# rackform-cri-running NAME: the IDs of this node's running Kubernetes containers named NAME
# (the kubelet's io.kubernetes.container.name label: etcd, kube-apiserver), one a line; none
# prints nothing. Through containerd's own ctr: the nodes need no crictl.
set -euo pipefail
if [ "$#" -ne 1 ] || [ -z "$1" ]; then
  echo "usage: rackform-cri-running NAME" >&2
  exit 2
fi
mapfile -t ids < <(ctr -n k8s.io containers ls -q "labels.\"io.kubernetes.container.name\"==$1")
[ "${#ids[@]}" -gt 0 ] || exit 0
ctr -n k8s.io tasks ls | awk 'NR > 1 && $3 == "RUNNING" { print $1 }' | grep -xF -f <(printf '%s\n' "${ids[@]}") || true
