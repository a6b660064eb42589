"""HTTP serving: the verbs' port (`app`, `verbs`), one event-loop server for every port (`listener`), the gunicorn launcher and worker, the side listener's `/explain`, the webhook."""
