"""The pod layer's label index under copy-on-write: a label value held by many pods keeps
its ids in chunks (`ChunkedIds`), and every published bucket keeps answering as it did
when it was published, whatever later buckets do."""

from __future__ import annotations

import random

from extender.plugins.podtopologyspread.selector import LabelSelector, Requirement
from extender.state import Store
from extender.state.podindex import LARGE_IDS, ChunkedIds

SELECTORS = [
    LabelSelector((Requirement("app", "In", ("web",)),)),
    LabelSelector((Requirement("app", "In", ("web", "db")), Requirement("tier", "Exists"))),
    LabelSelector((Requirement("app", "NotIn", ("db",)),)),
    LabelSelector((Requirement("tier", "DoesNotExist"),)),
]


def _pod(rng: random.Random, name: str) -> dict:
    labels = {"app": rng.choice(["web", "web", "web", "db"])}
    if rng.random() < 0.5:
        labels["tier"] = "front"
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"nodeName": f"n{rng.randrange(8)}"}, "status": {"phase": "Running"}}


def _expected(objects: dict[str, dict], selector: LabelSelector) -> set[str]:
    return {name for name, obj in objects.items() if selector.matches(obj["metadata"]["labels"])}


def _matching_names(bucket, selector: LabelSelector) -> set[str]:
    ids = bucket.matching_ids(selector)
    return {pod.name for pod, pid in bucket.entries.values() if pid in ids}


def test_large_label_groups_stay_exact_and_published_buckets_never_change():
    rng = random.Random(5)
    store = Store()
    objects: dict[str, dict] = {}
    for i in range(3 * LARGE_IDS):  # one generation: plain sets
        objects[f"p{i}"] = _pod(rng, f"p{i}")
        store.upsert("Pod", objects[f"p{i}"])
    store.publish()
    kept = []  # (bucket, what it answered when published)
    for step in range(300):
        name = f"p{rng.randrange(4 * LARGE_IDS)}"
        if name in objects and rng.random() < 0.4:
            store.delete("Pod", "ns", name)
            del objects[name]
        else:
            objects[name] = _pod(rng, name)
            store.upsert("Pod", objects[name])
        if step % 3 == 0:
            store.publish()
            bucket = store.snapshot().pod_layer.namespaces["ns"]
            answers = [_matching_names(bucket, s) for s in SELECTORS]
            assert answers == [_expected(objects, s) for s in SELECTORS], step
            if step % 30 == 0:
                kept.append((bucket, answers))
    for bucket, answers in kept:  # later buckets copied, changed and dropped ids: not these
        assert [_matching_names(bucket, s) for s in SELECTORS] == answers
    web = store.snapshot().pod_layer.namespaces["ns"].by_label["app"].get("web")
    assert isinstance(web, ChunkedIds) and len(web) == sum(
        o["metadata"]["labels"]["app"] == "web" for o in objects.values())


def test_chunked_ids_copy_on_write():
    ids = ChunkedIds.of(set(range(1000)))
    copy = ids.copy()
    copy.discard(5)
    copy.add(5000)
    copy.discard(123456)  # absent: nothing
    assert 5 in ids and 5000 not in ids and len(ids) == 1000
    assert 5 not in copy and 5000 in copy and len(copy) == 1000
    assert set(copy) == (set(range(1000)) - {5}) | {5000}
    assert sum(a is b for a, b in zip(ids.chunks, copy.chunks, strict=True)) == len(ids.chunks) - 2
