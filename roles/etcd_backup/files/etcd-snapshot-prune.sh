#!/bin/bash
# etcd-snapshot-prune DIR KEEP: keep the KEEP newest etcd snapshots in DIR, remove the rest.
#
# A snapshot is DIR/etcd-snapshot-<UTC time>-<node>.db with its checksum beside it
# (<name>.sha256); names sort by time, so "newest" is "last by name", whatever the files'
# mtimes say (a copy keeps its name, not its time). Only such files are touched; each
# removed snapshot is printed. The nodes' timer, `rackform backup` on the backup host and
# on the controller all prune with this one script.
set -euo pipefail
export LC_ALL=C  # the same order everywhere
if [ "$#" -ne 2 ] || ! [[ "$2" =~ ^[0-9]+$ ]] || [ "$2" -lt 1 ]; then
  echo "usage: etcd-snapshot-prune DIR KEEP (KEEP a whole number, at least 1)" >&2
  exit 2
fi
dir=$1
keep=$2
[ -d "$dir" ] || exit 0
mapfile -t snapshots < <(find "$dir" -maxdepth 1 -type f -name 'etcd-snapshot-*.db' -printf '%f\n' | sort)
remove=$(( ${#snapshots[@]} - keep ))
for (( i = 0; i < remove; i++ )); do
  rm -f -- "$dir/${snapshots[$i]}" "$dir/${snapshots[$i]}.sha256"
  echo "removed ${snapshots[$i]}"
done
