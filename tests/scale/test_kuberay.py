"""The KubeRay manifests under deploy/kuberay/, offline: no cluster, no network.

Every RayCluster and RayJob is validated against its CRD's `openAPIV3Schema`, vendored for two KubeRay
releases under tests/assets/kuberay/, with jsonschema once `crd_to_json_schema` has turned Kubernetes' OpenAPI
dialect into JSON Schema draft 4; mutated manifests show that the validator rejects what Kubernetes would. The
rest checks what a schema cannot say: autoscaling on, a head that takes no work, a drain within its grace on
every worker pod (`rlvr node start`, given KubeRay's `ray start` flags), the RayJob's entrypoint reading the
mounted config, that config loading with rlvr's own loader and fitting the cluster, the RayJob's cluster being
the RayCluster's, and the image deploy/Dockerfile builds.
"""
from __future__ import annotations

import copy
import functools
import importlib.util
import json
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MANIFESTS = sorted((DEPLOY / "kuberay").glob("*.yaml"))
ASSETS = ROOT / "tests" / "assets" / "kuberay"
VERSIONS = sorted(p.name for p in ASSETS.iterdir() if p.is_dir())
CRD_FILES = {"RayCluster": "ray.io_rayclusters.v1.json", "RayJob": "ray.io_rayjobs.v1.json"}
KINDS = {"RayCluster": "ray.io/v1", "RayJob": "ray.io/v1", "ConfigMap": "v1", "PersistentVolumeClaim": "v1"}
"""Every kind the manifests may hold, with its apiVersion (a kind without a schema here is not checked)."""
POD_SCRIPTS = PurePosixPath("/opt/rlvr-pod")
"""Where deploy/Dockerfile puts the worker containers' scripts (ray_node.py, cgroup_setup.sh)."""


def crd_to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """A Kubernetes structural schema (a CRD's `openAPIV3Schema`) as JSON Schema draft 4.

    An OpenAPI v3.0 schema object is draft 4 plus extensions. What changes:
    - `x-kubernetes-int-or-string: true` (resource quantities, ports): an integer or a string, never a float;
    - `nullable: true`: null is allowed too;
    - an object with `properties` takes no other field (`additionalProperties: false`) unless it gives
      `additionalProperties` itself or says `x-kubernetes-preserve-unknown-fields: true`. The API server
      prunes an unknown field silently and `kubectl apply` refuses it (strict field validation, its default):
      either way a misspelled field is a mistake, and here it fails;
    - every other `x-kubernetes-*` key is dropped: list and map semantics (`-list-type`, `-list-map-keys`,
      `-map-type`), which govern merges, and CEL rules (`x-kubernetes-validations`), which jsonschema can't
      evaluate (`cel_guarded` finds the fields they guard; the manifests set none).
    Keywords are read only where they are keywords: the keys under `properties` are field names (a field may
    be called `type` or `format`). `format` stays an annotation (no format checker is passed).
    """
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: crd_to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = crd_to_json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [crd_to_json_schema(sub) for sub in value]
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if node.get("nullable") and "type" in out:
        out["type"] = [*(out["type"] if isinstance(out["type"], list) else [out["type"]]), "null"]
    if "properties" in node and "additionalProperties" not in node \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def cel_guarded(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """The paths in `value` that a CEL rule of `schema` guards (rules this validator does not evaluate)."""
    hits = [path or "."] if "x-kubernetes-validations" in schema else []
    if isinstance(value, dict):
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            child = schema.get("properties", {}).get(key, extra if isinstance(extra, dict) else None)
            if child is not None:
                hits += cel_guarded(child, sub, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, sub in enumerate(value):
            hits += cel_guarded(schema["items"], sub, f"{path}[{i}]")
    return hits


@functools.cache
def raw_schema(version: str, kind: str) -> dict[str, Any]:
    return json.loads((ASSETS / version / CRD_FILES[kind]).read_text(encoding="utf-8"))


@functools.cache
def validator(version: str, kind: str) -> jsonschema.Draft4Validator:
    schema = crd_to_json_schema(raw_schema(version, kind))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def errors(version: str, doc: dict[str, Any]) -> list[str]:
    """Each schema violation of a RayCluster or RayJob as `path: message`."""
    found = validator(version, doc["kind"]).iter_errors(doc)
    paths = sorted(("/".join(map(str, e.absolute_path)), e.message) for e in found)
    return [f"{path}: {message}" for path, message in paths]


def load_documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in MANIFESTS:
        for i, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if doc is not None:
                docs.append((f"{path.name}#{i}", doc))
    return docs


DOCS = load_documents()
RAY_DOCS = [(name, doc) for name, doc in DOCS if doc.get("kind") in CRD_FILES]


def one(kind: str) -> dict[str, Any]:
    found = [doc for _, doc in DOCS if doc.get("kind") == kind]
    assert len(found) == 1, f"expected one {kind} under deploy/kuberay/, found {len(found)}"
    return copy.deepcopy(found[0])


def cluster_specs() -> list[tuple[str, dict[str, Any]]]:
    return [("RayCluster", one("RayCluster")["spec"]), ("RayJob", one("RayJob")["spec"]["rayClusterSpec"])]


SPECS = [pytest.param(spec, id=owner) for owner, spec in cluster_specs()]


def container(group: dict[str, Any]) -> dict[str, Any]:
    """The Ray container of a group's pod (KubeRay's rule: the first one)."""
    return group["template"]["spec"]["containers"][0]


def gpus(group: dict[str, Any]) -> int:
    return int(container(group).get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))


def cpus(quantity: int | str) -> float:
    """A Kubernetes CPU quantity (`8`, `"8"`, `"500m"`) in CPUs."""
    text = str(quantity)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def run_toml() -> str:
    return one("ConfigMap")["data"]["run.toml"]


# ------------------------------------------------------------------------------------------- the schemas
def test_the_manifests_and_the_schemas_are_there() -> None:
    kinds = [doc.get("kind") for _, doc in DOCS]
    assert sorted(kinds) == sorted(KINDS), kinds  # one of each; a new kind needs its checks here first
    for name, doc in DOCS:
        assert doc["apiVersion"] == KINDS[doc["kind"]], name
        assert doc["metadata"]["name"], name
    assert {"v1.4.2", "v1.7.0"} <= set(VERSIONS)
    for version in VERSIONS:
        assert {"headGroupSpec", "workerGroupSpecs", "autoscalerOptions"} <= set(
            raw_schema(version, "RayCluster")["properties"]["spec"]["properties"])
        assert {"entrypoint", "rayClusterSpec", "shutdownAfterJobFinishes"} <= set(
            raw_schema(version, "RayJob")["properties"]["spec"]["properties"])


def test_crd_to_json_schema() -> None:
    crd = {"type": "object", "properties": {
        "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        "note": {"type": "string", "nullable": True},
        "type": {"type": "string", "x-kubernetes-validations": [{"rule": "self != ''"}]},  # a field: type
        "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"a": {}}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "list": {"type": "array", "x-kubernetes-list-type": "map", "items": {
            "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}}
    schema = crd_to_json_schema(crd)
    jsonschema.Draft4Validator.check_schema(schema)
    check = jsonschema.Draft4Validator(schema).is_valid
    assert "x-kubernetes" not in json.dumps(schema)
    assert check({"port": 8080}) and check({"port": "http"}) and not check({"port": 80.5})
    assert check({"note": None}) and not check({"type": None})
    assert check({"open": {"anything": 1}, "labels": {"a": "b"}, "list": [{"name": "x"}]})
    assert not check({"prot": 8080})                                   # misspelled: refused
    assert not check({"list": [{"name": "x", "nmae": "y"}]})           # ... at any depth
    assert not check({"list": [{}]}) and not check({"labels": {"a": 1}})


def test_only_fields_without_cel_rules_are_set() -> None:
    """CEL rules (`x-kubernetes-validations`) are not evaluated here, so the manifests stay clear of them."""
    for version in VERSIONS:
        for name, doc in RAY_DOCS:
            assert cel_guarded(raw_schema(version, doc["kind"]), doc) == [], (version, name)
        touched = one("RayCluster")
        touched["spec"]["managedBy"] = "ray.io/kuberay-operator"
        assert cel_guarded(raw_schema(version, "RayCluster"), touched) == [".spec.managedBy"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("name", "doc"), RAY_DOCS, ids=[name for name, _ in RAY_DOCS])
def test_a_manifest_matches_its_crd_schema(version: str, name: str, doc: dict[str, Any]) -> None:
    assert errors(version, doc) == []


def _spec(doc: dict[str, Any]) -> dict[str, Any]:
    """The cluster spec of a RayCluster or a RayJob."""
    return doc["spec"].get("rayClusterSpec", doc["spec"])


def _workers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return _spec(doc)["workerGroupSpecs"]


MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "replicas as a word": (lambda d: _workers(d)[0].update(replicas="two"), "replicas: 'two' is not of type"),
    "groupName missing": (lambda d: _workers(d)[1].pop("groupName"), "'groupName' is a required property"),
    "misspelled field": (lambda d: _workers(d)[0].update(maxReplica=4), "'maxReplica' was unexpected"),
    "misspelled deep in the pod": (
        lambda d: container(_workers(d)[0])["securityContext"].update(capabilites={"add": ["SYS_ADMIN"]}),
        "securityContext: Additional properties are not allowed ('capabilites' was unexpected)"),
    "unknown upscaling mode": (lambda d: _spec(d)["autoscalerOptions"].update(upscalingMode="Fast"),
                               "upscalingMode: 'Fast' is not one of"),
    "a ray start parameter as a number": (lambda d: _spec(d)["headGroupSpec"]["rayStartParams"].update(
        {"num-cpus": 0}), "rayStartParams/num-cpus: 0 is not of type 'string'"),
    "a CPU quantity as a float": (lambda d: container(_workers(d)[0])["resources"]["limits"].update(cpu=1.5),
                                  "limits/cpu: 1.5 is not of type"),
    "a container without a name": (lambda d: container(_spec(d)["headGroupSpec"]).pop("name"),
                                   "'name' is a required property"),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", sorted(CRD_FILES))
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_validator_rejects_what_kubernetes_would(version: str, kind: str, mutation: str) -> None:
    doc = one(kind)
    change, expected = MUTATIONS[mutation]
    change(doc)
    found = errors(version, doc)
    assert any(expected in e for e in found), found


@pytest.mark.parametrize("version", VERSIONS)
def test_a_rayjob_field_of_the_wrong_type_is_rejected(version: str) -> None:
    doc = one("RayJob")
    doc["spec"]["shutdownAfterJobFinishes"] = "yes"
    assert errors(version, doc) == ["spec/shutdownAfterJobFinishes: 'yes' is not of type 'boolean'"]


# ------------------------------------------------------------------------- what the schemas cannot say
@pytest.mark.parametrize("spec", SPECS)
def test_autoscaling_is_on_and_the_head_takes_no_work(spec: dict[str, Any]) -> None:
    assert spec["enableInTreeAutoscaling"] is True
    options = spec["autoscalerOptions"]
    assert options["idleTimeoutSeconds"] > 0
    assert options["upscalingMode"] in ("Default", "Aggressive", "Conservative")
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    if gpus(head):  # the trainer's GPU: Ray must not place an engine on it
        assert head["rayStartParams"]["num-gpus"] == "0"
    for group in spec["workerGroupSpecs"]:
        low, high = group["minReplicas"], group["maxReplicas"]
        assert 0 <= low <= group.get("replicas", low) <= high
        assert high > low, f"{group['groupName']} has no room to scale"
    cpu_groups = [g for g in spec["workerGroupSpecs"] if not gpus(g)]
    gpu_groups = [g for g in spec["workerGroupSpecs"] if gpus(g)]
    assert cpu_groups and gpu_groups
    assert all(g["minReplicas"] == 0 for g in gpu_groups)  # no idle GPU pods


def ray_node() -> Any:
    """deploy/ray_node.py, the worker containers' command, as a module (nothing runs at import)."""
    spec = importlib.util.spec_from_file_location("ray_node", DEPLOY / "ray_node.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("spec", SPECS)
def test_every_pod_has_a_grace_period_and_workers_drain_within_it(spec: dict[str, Any]) -> None:
    assert spec["headGroupSpec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 0
    for group in spec["workerGroupSpecs"]:
        pod = group["template"]
        # KubeRay keeps the command below (else it puts its own `ray start` there, which never sees SIGTERM)
        assert pod["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
        command = container(group)["command"]
        assert command[:2] == ["python", str(POD_SCRIPTS / "ray_node.py")] and "args" not in container(group)
        drain_s = float(command[command.index("--grace-s") + 1])
        grace = pod["spec"]["terminationGracePeriodSeconds"]
        assert 0 < drain_s and drain_s + 10 <= grace, (group["groupName"], drain_s, grace)
        assert "lifecycle" not in container(group)  # the drain runs on SIGTERM, not in a preStop hook


# What KubeRay v1.4-v1.7 put in $KUBERAY_GEN_RAY_START_CMD for the two worker groups: `ray start` and the
# group's rayStartParams after setMissingRayStartParams and the container's limits, sorted, each ` --k=v `.
GENERATED_CPU = ("ray start  --address=rlvr-head-svc.default.svc.cluster.local:6379  --block  "
                 "--dashboard-agent-listen-port=52365  --memory=17179869184  --metrics-export-port=8080  "
                 "--num-cpus=8 ")
GENERATED_GPU = GENERATED_CPU.replace("--num-cpus=8 ", "--num-cpus=8  --num-gpus=1 ")


@pytest.mark.parametrize("generated", [GENERATED_CPU, GENERATED_GPU])
def test_a_worker_runs_rlvr_node_start_with_kuberays_flags(generated: str) -> None:
    import typer

    from rlvr.cli import app

    argv = ray_node().node_argv(generated, 100.0)
    assert argv[:3] == ["rlvr", "node", "start"]
    start = typer.main.get_command(app).commands["node"].commands["start"]
    ctx = start.make_context("start", argv[3:])  # the real command line parser of `rlvr node start`
    assert ctx.params == {"address": "rlvr-head-svc.default.svc.cluster.local:6379", "grace_s": 100.0,
                          "warm_image": (), "image_cache": None}
    expected = [w for w in generated.split() if w not in ("ray", "start", "--block") and "--address" not in w]
    assert ctx.args == expected  # every other flag goes on to `ray start`, in order


@pytest.mark.parametrize(("generated", "refusal"), [
    ("ray start --head --block --num-cpus=0", "not a Ray worker"),
    ("ray start --block --num-cpus=8", "no --address"),
    ("ray start --address=h:6379 --block --labels=a=b", "labels"),
    ("python -m something", "not a Ray worker"),
])
def test_a_worker_command_it_cannot_translate_is_refused(generated: str, refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        ray_node().node_argv(generated, 100.0)


def test_the_worker_command_keeps_shell_quoting_and_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_POD_IP", "10.0.0.7")
    argv = ray_node().node_argv("ray start --address h:6379 --block --node-ip-address=$MY_POD_IP "
                                """--resources='{"sandbox": 1}'""", 60.0)
    assert argv[-2:] == ["--node-ip-address=10.0.0.7", '--resources={"sandbox": 1}']


@pytest.mark.parametrize("spec", SPECS)
def test_worker_pods_can_run_the_sandbox(spec: dict[str, Any]) -> None:
    for group in spec["workerGroupSpecs"]:
        context = container(group)["securityContext"]
        assert context["privileged"] is False and context["runAsUser"] == 0
        assert set(context["capabilities"]["add"]) == {"SYS_ADMIN", "NET_ADMIN"}
        assert context["seccompProfile"] == {"type": "Unconfined"}
        assert context["appArmorProfile"] == {"type": "Unconfined"}
        assert "/dev/shm" in {m["mountPath"] for m in container(group)["volumeMounts"]}


def test_the_rayjob_cluster_is_the_raycluster() -> None:
    assert one("RayJob")["spec"]["rayClusterSpec"] == one("RayCluster")["spec"]


def test_the_rayjob_runs_the_config_it_mounts(tmp_path: Path) -> None:
    import typer

    from rlvr.cli import app
    from rlvr.config import load_config

    job = one("RayJob")["spec"]
    assert job["shutdownAfterJobFinishes"] is True and job["ttlSecondsAfterFinished"] >= 0
    argv = shlex.split(job["entrypoint"])
    assert argv[:2] == ["rlvr", "train"] and len(argv) == 3, argv
    assert "train" in typer.main.get_command(app).commands
    config = PurePosixPath(argv[2])
    head = job["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    mount = next(m for m in head["containers"][0]["volumeMounts"] if config.is_relative_to(m["mountPath"]))
    volume = next(v for v in head["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == one("ConfigMap")["metadata"]["name"]
    key = str(config.relative_to(mount["mountPath"]))
    key = next((i["key"] for i in volume["configMap"].get("items", []) if i["path"] == key), key)
    (tmp_path / "run.toml").write_text(one("ConfigMap")["data"][key], encoding="utf-8")
    cfg = load_config(tmp_path / "run.toml")
    assert cfg.cluster.address == "auto"


def test_the_config_fits_the_cluster(tmp_path: Path) -> None:
    from rlvr.config import load_config
    from rlvr.tasks import registry

    (tmp_path / "run.toml").write_text(run_toml(), encoding="utf-8")
    cfg = load_config(tmp_path / "run.toml")
    for domain, settings in cfg.tasks.domains.items():
        assert registry.make(domain, **settings).get(0).prompt  # the domain's own checks of its settings
    spec = one("RayCluster")["spec"]
    groups = spec["workerGroupSpecs"]
    # rlvr starts a run only if its engines fit the cluster as it is (a RayJob submits once every pod is up)
    engine_gpus = cfg.policy.engines * cfg.policy.engine_tp
    assert engine_gpus <= sum(g.get("replicas", g["minReplicas"]) * gpus(g) for g in groups)
    assert engine_gpus <= sum(g["maxReplicas"] * gpus(g) for g in groups)
    # and waits for a first sandbox node
    assert any(g.get("replicas", g["minReplicas"]) >= 1 for g in groups if not gpus(g))
    if cfg.policy.device.startswith("cuda"):  # the trainer runs in the driver, on the head pod
        assert gpus(spec["headGroupSpec"]) >= 1
    for group in groups:
        assert cfg.sandbox.workers <= cpus(container(group)["resources"]["limits"]["cpu"]), group["groupName"]
    head = spec["headGroupSpec"]["template"]["spec"]
    runs = next(m for m in head["containers"][0]["volumeMounts"]
                if PurePosixPath(cfg.output_dir).is_relative_to(m["mountPath"]))
    volume = next(v for v in head["volumes"] if v["name"] == runs["name"])
    assert volume["persistentVolumeClaim"]["claimName"] == one("PersistentVolumeClaim")["metadata"]["name"]


def test_the_image_is_the_one_the_dockerfile_builds() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.MULTILINE)
    assert re.search(r"apt-get install .*\bbubblewrap\b.*\bwget\b", dockerfile)  # wget: KubeRay's probes
    assert re.search(r"^ARG TORCH=torch==2\.13\.0$", dockerfile, re.MULTILINE)
    torch_alone = dockerfile.index('RUN pip install "$TORCH"\n')
    extras = re.search(r'RUN pip install "\$TORCH" "\.\[([a-z,]+)\]"', dockerfile)
    assert extras and torch_alone < extras.start()
    assert set(extras.group(1).split(",")) == {"ray", "train"}
    assert {"ray", "train"} <= set(pyproject["project"]["optional-dependencies"])
    ray_pin = re.search(r"^ARG RAY=ray\[default\]==(\S+)$", dockerfile, re.MULTILINE)
    for owner, spec in cluster_specs():
        assert ray_pin and spec["rayVersion"] == ray_pin.group(1), owner
        groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
        assert {c["image"] for g in groups for c in g["template"]["spec"]["containers"]} == {
            "ghcr.io/OWNER/rlvr:latest"}
    for script in ("cgroup_setup.sh", "ray_node.py"):  # what the worker pods run is in the image
        assert (DEPLOY / script).is_file()
        copied = rf"^COPY .*\bdeploy/{re.escape(script)}\b.* {POD_SCRIPTS}/$"
        assert re.search(copied, dockerfile, re.MULTILINE), script
    for path in MANIFESTS:
        if "ghcr.io/OWNER" in path.read_text(encoding="utf-8"):
            assert "deploy/Dockerfile" in path.read_text(encoding="utf-8"), path.name  # says how to build it


def test_the_cgroup_setup_parses() -> None:
    subprocess.run(["sh", "-n", str(DEPLOY / "cgroup_setup.sh")], check=True, timeout=30)
