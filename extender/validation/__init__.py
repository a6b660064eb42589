"""API-server-exact decoding and validation of the annotation channel: the pod is judged
by what the API server would have stored, so a text it would refuse is refused here too.

* `gojson`, `goschema`: Go/`sigs.k8s.io/json` parsing and typed decoding of the annotation texts;
* `field`: apimachinery `field.Error` formatting;
* `rules`: the API validation rules (tolerations, node affinity);
* `annotations`: the validator (`check_pod`) used by scheduling, explain, the webhook
  and the CLI;
* `workloads`: finds the pod templates in Deployments, Jobs, CronJobs, ...;
* `limits`: the per-pod limits next to the KEP ones.
"""

from extender.validation.annotations import PodCheck, check_pod
from extender.validation.field import FieldError, aggregate

__all__ = ["FieldError", "PodCheck", "aggregate", "check_pod"]
