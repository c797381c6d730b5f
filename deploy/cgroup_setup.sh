#!/bin/sh
# Run before `ray start` in rlvr's Ray worker containers, by their command (deploy/ray_node.py). Copied into the
# image by deploy/Dockerfile.
#
# rlvr's sandbox gives each of its workers a cgroup with memory and pids limits (docs/SECURITY.md), which a
# container as it is started does not allow:
#   - the container's cgroup filesystem is mounted read-only: it is made writable for this container only
#     (`remount,bind`: the mount's own flag, not the host's filesystem; needs CAP_SYS_ADMIN and no AppArmor
#     profile that forbids mount, see the securityContext in deploy/kuberay/);
#   - on cgroup v2 a cgroup that holds processes cannot hand controllers to child cgroups ("no internal
#     processes"), and /sys/fs/cgroup is the container's own cgroup with every process of the container in it:
#     they are moved into a leaf, init/, and memory and pids are enabled below the root (what Docker-in-Docker
#     does). Ray, started after this, and the sandbox's cgroups (rlvr-<pool>/) are then siblings of init/.
#
# It never fails the container: where a step is refused the sandbox later refuses to start with a one-line reason,
# and `rlvr sandbox check` in the pod shows what holds.
CG=/sys/fs/cgroup

warn() { echo "cgroup_setup: $*" >&2; }

awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts | while read -r mnt; do
  mount -o remount,bind,rw "$mnt" 2>/dev/null || warn "cannot make $mnt writable (needs CAP_SYS_ADMIN)"
done

if [ -f "$CG/cgroup.controllers" ]; then  # cgroup v2 (v1 needs no more: its hierarchies have no such rule)
  if mkdir -p "$CG/init" 2>/dev/null; then
    # shellcheck disable=SC2013  # the whole list is read before any process moves
    for pid in $(cat "$CG/cgroup.procs"); do
      echo "$pid" > "$CG/init/cgroup.procs" 2>/dev/null || :
    done
    echo "+memory +pids" > "$CG/cgroup.subtree_control" 2>/dev/null ||
      warn "cannot enable the memory and pids controllers in $CG (have: $(cat "$CG/cgroup.controllers"))"
  else
    warn "cannot create $CG/init: $CG is not writable"
  fi
fi
exit 0
