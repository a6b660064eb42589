"""Issue #28 through the real kube-scheduler: a burst is scheduled correctly while
attackers hold the health listener (70 idle connections) and stall large bodies on the
verbs port past the in-flight budget; the probes keep answering, the stalled bodies are
shed (503 + Retry-After), and the scheduler's own calls are never shed."""

from __future__ import annotations

import socket
import threading
import time

from testing.harness import HOST, ZONE, node, pod, request, spread, wait_for

MIB = 1 << 20


def test_a_burst_is_scheduled_while_the_listeners_are_attacked(start_cluster):
    cluster = start_cluster([node(f"n-{z}{i}", z, cpu="64") for z in "abc" for i in range(3)])
    stop = threading.Event()
    held: list[socket.socket] = []
    probes: list[int | str] = []  # each probe's status (the request's timeout is a hang guard)

    def attack() -> None:
        for _ in range(70):  # idle connections on the health listener, 10 ms apart
            held.append(socket.create_connection(("127.0.0.1", cluster.metrics_port)))
            time.sleep(0.01)
        while not stop.is_set():  # 30 MB bodies that stop 1 MiB short, on the verbs port
            sock = socket.create_connection(("127.0.0.1", cluster.extender_port), timeout=5)
            sock.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (30 * MIB))
            try:
                for _ in range(29):
                    sock.sendall(b" " * MIB)
            except OSError:
                pass  # shed while sending
            held.append(sock)
            stop.wait(0.2)

    def probe() -> None:
        while not stop.is_set():
            try:
                probes.append(request(cluster.metrics_port, "GET", "/readyz")[0])
            except OSError as exc:  # never answered
                probes.append(repr(exc))
            stop.wait(0.1)

    def shed() -> float:
        try:
            return cluster.extender_metric("extender_requests_shed_total", 'listener="verbs"')
        except AssertionError:  # not exported before the first one
            return 0.0

    assert request(cluster.metrics_port, "GET", "/readyz")[0] == 200
    threads = [threading.Thread(target=attack, daemon=True), threading.Thread(target=probe, daemon=True)]
    for t in threads:
        t.start()
    try:
        # the attack in place: every idle connection held and a stalled body shed
        assert wait_for(lambda: len(held) >= 70 and shed() > 0, timeout=60), "the attack never took hold"
        labels = {"app": "web"}
        pods = [pod(f"web-{i}", labels, spread=[spread(ZONE, labels), spread(HOST, labels)]) for i in range(45)]
        cluster.create(*pods)
        outcome = cluster.wait_settled(pods, timeout=120)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        for sock in held:
            sock.close()
    assert len(outcome.bound) == 45, (outcome.unschedulable, outcome.pending)
    assert cluster.replay().violations == []
    assert probes and set(probes) == {200}, probes  # answered throughout: "answers", not "is fast"
    assert cluster.extender_metric("extender_requests_shed_total", 'listener="verbs"') > 0
    verbs = [line for line in request(cluster.metrics_port, "GET", "/metrics")[1].decode().splitlines()
             if line.startswith("extender_http_requests_total{")]
    assert verbs and not [line for line in verbs if 'code="5' in line]  # no scheduler call shed or failed
