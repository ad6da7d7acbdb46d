"""The pod-grouper's throughput: pods grouped per second, one kind and a mix of kinds.

Two figures per workload mix, each min / median of ``--runs`` runs (default 3):

- rules: ``group_pod`` alone over each pod and its owner chain (the pure decision);
- service: ``PodGrouperService.handle`` for each pod, in process, against an
  in-memory API that answers at once (discovery, owner GETs cached for the run as
  in the operator, the PodGroup's create, the pod's patch), so the figure is the
  grouper's own CPU per pod, without HTTP.

Pods/s are counted in this process's CPU time, not wall time: on a shared machine
the figure is then what the grouper costs, not how busy the neighbours were.

Mixes: ``one`` is the one-kind figure (batch Jobs of 8 pods each); ``mixed`` cycles
through the kinds of docs/operator.md, "The kinds it groups" (Job, Deployment,
PyTorchJob, JobSet, LeaderWorkerSet, RayCluster, RayJob, Knative Service, Grove
PodCliqueSet, Argo Workflow, TrainJob, Notebook, SparkApplication, an unknown kind),
8 pods per workload.

    python bench/grouper.py                 # 4,000 pods, both mixes
    python bench/grouper.py --pods 20000 --mix one
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from kai_py.api import keys
from kai_py.apiclient.kube import KubeError, path_of
from kai_py.podgrouper.rules import Grouped, group_pod
from kai_py.podgrouper.service import OwnerResolver, PodGrouperService

try:  # the code before the kinds had no related objects; its one-kind figure still runs
    from kai_py.podgrouper.rules import related_objects
except ImportError:  # pragma: no cover - only for comparing with older code
    related_objects = None  # type: ignore[assignment]

Json = dict[str, Any]
NS = "bench"
PODS_PER_WORKLOAD = 8


def plural(kind: str) -> str:
    return kind.lower() + ("es" if kind.endswith("s") else "s")


class World:
    """The objects of the run, and an in-memory API over them."""

    def __init__(self) -> None:
        self.objects: dict[str, Json] = {}
        self.discovery: dict[str, dict[str, Json]] = {}
        self.pods: list[tuple[Json, list[Json]]] = []
        self._n = 0

    def add(
        self, api_version: str, kind: str, name: str, owner: Json | None = None, **rest: Any
    ) -> Json:
        self._n += 1
        meta: Json = {"name": name, "namespace": NS, "uid": f"u{self._n}"}
        if owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ]
        for key in ("labels", "annotations"):
            if key in rest:
                meta[key] = rest.pop(key)
        obj: Json = {"apiVersion": api_version, "kind": kind, "metadata": meta, **rest}
        group, _, version = api_version.rpartition("/")
        where = f"/apis/{group}/{version}" if group else f"/api/{version}"
        self.discovery.setdefault(where, {})[kind] = {
            "name": plural(kind),
            "kind": kind,
            "namespaced": True,
        }
        self.objects[path_of(group, version, plural(kind), NS, name)] = obj
        return obj

    def pod(self, name: str, owner: Json, chain: list[Json], labels: Json | None = None) -> None:
        pod = self.add("v1", "Pod", name, owner, labels=labels or {})
        pod["spec"] = {"schedulerName": keys.DEFAULT_SCHEDULER_NAME, "containers": []}
        self.pods.append((pod, chain))

    async def arequest(self, method: str, path: str, body: Any = None, **_: Any) -> Json:
        if method == "GET":
            if path in self.discovery:
                return {"resources": list(self.discovery[path].values())}
            if path in self.objects:
                return self.objects[path]
            raise KubeError(404, "NotFound", path)
        if method == "POST":
            if "/events" not in path:
                key = f"{path}/{body['metadata']['name']}"
                if key in self.objects:
                    raise KubeError(409, "AlreadyExists", key)
                self.objects[key] = body
            return body
        if method == "PATCH":
            return self.objects[path]
        raise AssertionError(method)


def _job(w: World, i: int) -> None:
    job = w.add("batch/v1", "Job", f"job-{i}", annotations={keys.BATCH_MIN_MEMBER_ANNOTATION: "8"})
    for k in range(PODS_PER_WORKLOAD):
        w.pod(f"job-{i}-{k}", job, [job])


def _deployment(w: World, i: int) -> None:
    deploy = w.add("apps/v1", "Deployment", f"web-{i}")
    rs = w.add("apps/v1", "ReplicaSet", f"web-{i}-abc", deploy)
    for k in range(PODS_PER_WORKLOAD):
        w.pod(f"web-{i}-{k}", rs, [rs, deploy])


def _pytorch(w: World, i: int) -> None:
    spec = {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 7}}}
    job = w.add("kubeflow.org/v1", "PyTorchJob", f"pt-{i}", spec=spec)
    for k in range(PODS_PER_WORKLOAD):
        w.pod(f"pt-{i}-{k}", job, [job])


def _jobset(w: World, i: int, owner: Json | None = None, name: str = "") -> None:
    name = name or f"js-{i}"
    spec = {
        "replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 4}}}]
    }
    js = w.add("jobset.x-k8s.io/v1alpha2", "JobSet", name, owner, spec=spec)
    for r in range(2):
        job = w.add("batch/v1", "Job", f"{name}-w-{r}", js)
        for k in range(4):
            labels = {
                "jobset.sigs.k8s.io/replicatedjob-name": "w",
                "jobset.sigs.k8s.io/job-index": str(r),
            }
            chain = [job, js] + ([owner] if owner else [])
            w.pod(f"{name}-w-{r}-{k}", job, chain, labels)


def _lws(w: World, i: int) -> None:
    lws = w.add(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        f"lws-{i}",
        spec={"leaderWorkerTemplate": {"size": 8}},
    )
    sts = w.add("apps/v1", "StatefulSet", f"lws-{i}", lws)
    leader_labels = {
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
    }
    w.pod(f"lws-{i}-0", sts, [sts, lws], leader_labels)
    leader = w.pods[-1][0]
    workers = w.add("apps/v1", "StatefulSet", f"lws-{i}-0", leader)
    for k in range(1, PODS_PER_WORKLOAD):
        labels = {
            "leaderworkerset.sigs.k8s.io/worker-index": str(k),
            "leaderworkerset.sigs.k8s.io/group-index": "0",
        }
        w.pod(f"lws-{i}-0-{k}", workers, [workers, leader, sts, lws], labels)


def _raycluster(w: World, i: int, owner: Json | None = None) -> Json:
    spec = {
        "headGroupSpec": {},
        "workerGroupSpecs": [{"groupName": "gpu", "replicas": 7, "minReplicas": 7}],
    }
    rc = w.add("ray.io/v1", "RayCluster", f"rc-{i}", owner, spec=spec)
    chain = [rc] + ([owner] if owner else [])
    w.pod(f"rc-{i}-head", rc, chain, {"ray.io/group": "headgroup"})
    for k in range(1, PODS_PER_WORKLOAD):
        w.pod(f"rc-{i}-w-{k}", rc, chain, {"ray.io/group": "gpu"})
    return rc


def _rayjob(w: World, i: int) -> None:
    rayjob = w.add("ray.io/v1", "RayJob", f"rj-{i}", status={"rayClusterName": f"rc-rj{i}"})
    _raycluster(w, f"rj{i}", rayjob)  # type: ignore[arg-type]


def _knative(w: World, i: int) -> None:
    svc = w.add("serving.knative.dev/v1", "Service", f"ks-{i}")
    conf = w.add("serving.knative.dev/v1", "Configuration", f"ks-{i}", svc)
    rev = w.add(
        "serving.knative.dev/v1",
        "Revision",
        f"ks-{i}-001",
        conf,
        annotations={"autoscaling.knative.dev/min-scale": "2"},
    )
    deploy = w.add("apps/v1", "Deployment", f"ks-{i}-001-deployment", rev)
    rs = w.add("apps/v1", "ReplicaSet", f"ks-{i}-001-deployment-abc", deploy)
    for k in range(PODS_PER_WORKLOAD):
        labels = {"serving.knative.dev/revision": f"ks-{i}-001"}
        w.pod(f"ks-{i}-{k}", rs, [rs, deploy, rev, conf, svc], labels)


def _grove(w: World, i: int) -> None:
    pcs = w.add("grove.io/v1alpha1", "PodCliqueSet", f"pcs-{i}")
    names = [f"pcs-{i}-0-{role}-{k}" for role in ("p", "d") for k in range(4)]
    w.add(
        "scheduler.grove.io/v1alpha1",
        "PodGang",
        f"pcs-{i}-0",
        pcs,
        spec={
            "podgroups": [
                {
                    "name": f"pcs-{i}-0-{role}",
                    "minReplicas": 4,
                    "podReferences": [
                        {"namespace": NS, "name": n} for n in names if f"-{role}-" in n
                    ],
                }
                for role in ("p", "d")
            ]
        },
    )
    for role in ("p", "d"):
        clique = w.add("grove.io/v1alpha1", "PodClique", f"pcs-{i}-0-{role}", pcs)
        for k in range(4):
            w.pod(
                f"pcs-{i}-0-{role}-{k}", clique, [clique, pcs], {"grove.io/podgang": f"pcs-{i}-0"}
            )


def _argo(w: World, i: int) -> None:
    wf = w.add("argoproj.io/v1alpha1", "Workflow", f"wf-{i}")
    for k in range(PODS_PER_WORKLOAD):
        w.pod(f"wf-{i}-{k}", wf, [wf])


def _trainjob(w: World, i: int) -> None:
    tj = w.add("trainer.kubeflow.org/v1alpha1", "TrainJob", f"tj-{i}")
    _jobset(w, i, tj, f"tj-{i}")


def _notebook(w: World, i: int) -> None:
    nb = w.add("kubeflow.org/v1beta1", "Notebook", f"nb-{i}")
    sts = w.add("apps/v1", "StatefulSet", f"nb-{i}", nb)
    for k in range(PODS_PER_WORKLOAD):
        w.pod(f"nb-{i}-{k}", sts, [sts, nb])


def _spark(w: World, i: int) -> None:
    app = w.add("sparkoperator.k8s.io/v1beta2", "SparkApplication", f"sp-{i}")
    labels = {"spark-app-name": f"sp-{i}", "spark-app-selector": f"spark-{i}"}
    w.pod(f"sp-{i}-driver", app, [app], labels)
    driver = w.pods[-1][0]
    for k in range(1, PODS_PER_WORKLOAD):
        w.pod(f"sp-{i}-exec-{k}", driver, [driver], labels)


def _unknown(w: World, i: int) -> None:
    widget = w.add("example.com/v1", "Widget", f"wd-{i}")
    for k in range(PODS_PER_WORKLOAD):
        w.pod(f"wd-{i}-{k}", widget, [widget])


MIXED: list[Callable[[World, int], None]] = [
    _job,
    _deployment,
    _pytorch,
    _jobset,
    _lws,
    _raycluster,
    _rayjob,
    _knative,  # type: ignore[list-item]
    _grove,
    _argo,
    _trainjob,
    _notebook,
    _spark,
    _unknown,
]


def build(mix: str, pods: int) -> World:
    world = World()
    makers = [_job] if mix == "one" else MIXED
    i = 0
    while len(world.pods) < pods:
        makers[i % len(makers)](world, i)
        i += 1
    del world.pods[pods:]
    return world


def _related(world: World) -> Iterator[Callable[[str, str, str], Json | None]]:
    for pod, chain in world.pods:
        if related_objects is None:
            yield lambda _v, _k, _n: None
            continue
        found = {
            (kind, name): world.objects.get(
                path_of(v.rpartition("/")[0], v.rpartition("/")[2], plural(kind), NS, name)
            )
            for v, kind, name in related_objects(pod, chain)
        }
        yield lambda _v, kind, name, found=found: found.get((kind, name))


def time_rules(world: World) -> float:
    lookups = list(_related(world))
    start = time.process_time()
    for (pod, chain), related in zip(world.pods, lookups, strict=True):
        if related_objects is None:
            result = group_pod(pod, chain)
        else:
            result = group_pod(pod, chain, related=related)
        assert isinstance(result, Grouped), result
    return len(world.pods) / (time.process_time() - start)


def time_service(world: World) -> float:
    async def run() -> float:
        # Owners cached for the whole run, as the operator's 10 s cache keeps them in a burst.
        grouper = PodGrouperService(world, owners=OwnerResolver(world, ttl=1e9))  # type: ignore[arg-type]
        pods = [copy.deepcopy(pod) for pod, _chain in world.pods]
        start = time.process_time()
        for pod in pods:
            outcome = await grouper.handle(pod)
            assert outcome.group and not outcome.skipped, outcome
        return len(pods) / (time.process_time() - start)

    return asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mix", choices=("one", "mixed", "both"), default="both")
    args = parser.parse_args()
    mixes = ("one", "mixed") if args.mix == "both" else (args.mix,)
    for mix in mixes:
        for name, measure in (("rules", time_rules), ("service", time_service)):
            figures = [measure(build(mix, args.pods)) for _ in range(args.runs)]
            print(
                f"{mix:>5} {name:>7}: {args.pods} pods, pods/s min {min(figures):,.0f} "
                f"median {statistics.median(figures):,.0f} (of {args.runs})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
