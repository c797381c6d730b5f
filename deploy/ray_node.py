"""The command of rlvr's Ray worker containers under KubeRay: `rlvr node start` in place of KubeRay's own
`ray start`, so that a worker pod drains when Kubernetes stops it.

KubeRay starts a worker as `bash -c "ulimit -n 65536; ray start --address=HEAD:6379 --block ..."`. That
`ray start` becomes the container's first process, and as PID 1 of its namespace it never sees SIGTERM (it
sets no handler): a deleted or preempted pod would keep running its work until the kubelet's SIGKILL. With the
pod annotation `ray.io/overwrite-container-cmd: "true"` KubeRay leaves the container's command alone and hands
its generated `ray start` command over in $KUBERAY_GEN_RAY_START_CMD. This script, the container's command,
1. prepares the container's cgroups for the sandbox (cgroup_setup.sh, beside it in the image);
2. raises the open-file limit as KubeRay's command does (65536);
3. replaces itself with `rlvr node start --address HEAD:6379 --grace-s N -- <KubeRay's other flags>`
   (rlvr.scale.node), which runs `ray start --block` and, on SIGTERM, drains the node within N seconds: Ray
   places nothing new there, rlvr's fleets finish or hand back its work, then the node stops.

Copied into the image by deploy/Dockerfile; the manifests run `python /opt/rlvr-pod/ray_node.py --grace-s
100`, with `terminationGracePeriodSeconds` a little above it.
"""
from __future__ import annotations

import argparse
import os
import resource
import shlex
import subprocess
import sys
from pathlib import Path

GENERATED = "KUBERAY_GEN_RAY_START_CMD"
"""Where KubeRay puts the `ray start` command it generated for the container."""
NOFILE = 65536
"""The open-file limit KubeRay's own command sets (`ulimit -n 65536`)."""


def node_argv(generated: str, grace_s: float) -> list[str]:
    """The `rlvr node start` command for KubeRay's generated worker command (`ray start --address=HOST:PORT
    --block --num-cpus=8 ...`): the address becomes the agent's, `--block` is the agent's own, every other
    flag goes on to `ray start`. Words are split as a shell would and `$VARS` expanded, as KubeRay's bash
    would."""
    words = [os.path.expandvars(word) for word in shlex.split(generated)]
    if words[:2] != ["ray", "start"] or "--head" in words:
        raise ValueError(f"${GENERATED} is not a Ray worker's start command: {generated!r}")
    address, rest = None, []
    flags = iter(words[2:])
    for word in flags:
        if word.startswith("--address="):
            address = word.partition("=")[2]
        elif word == "--address":
            address = next(flags, None)
        elif word.split("=")[0] in ("--labels", "--labels-file"):
            raise ValueError(f"${GENERATED} sets node labels ({word}), and `rlvr node start` needs its own: "
                             "give the worker group no `labels`")
        elif word != "--block":
            rest.append(word)
    if not address:
        raise ValueError(f"${GENERATED} names no head to join (no --address): {generated!r}")
    return ["rlvr", "node", "start", "--address", address, "--grace-s", f"{grace_s:g}", "--", *rest]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grace-s", type=float, required=True,
                   help="seconds the node has to drain after SIGTERM: a little under the pod's "
                        "terminationGracePeriodSeconds")
    args = p.parse_args(argv)
    generated = os.environ.get(GENERATED, "")
    try:
        if not generated:
            raise ValueError(f"${GENERATED} is not set: give the pod template the annotation "
                             'ray.io/overwrite-container-cmd: "true"')
        command = node_argv(generated, args.grace_s)
    except ValueError as exc:
        print(f"ray_node: {exc}", file=sys.stderr)
        return 2
    subprocess.run(["sh", str(Path(__file__).with_name("cgroup_setup.sh"))], check=False)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = NOFILE if hard == resource.RLIM_INFINITY else min(NOFILE, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    print(f"ray_node: {shlex.join(command)}", file=sys.stderr, flush=True)
    os.execvp(command[0], command)
    return 1  # not reached: exec replaces this process


if __name__ == "__main__":
    sys.exit(main())
