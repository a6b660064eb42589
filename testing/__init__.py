"""What the tests and the benchmarks share: doubles that speak the real wire protocols on
127.0.0.1 (the API server, its service proxy), a real `extender serve` process, the
end-to-end harness around the real kube-scheduler, and the independent truth every
placement is checked against. Nothing here is part of the extender; `tests/` and `perf/`
import it, it imports neither."""
