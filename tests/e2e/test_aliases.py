"""Aliases end to end: a trainer logging OLMo-core's names to a real server on Postgres,
read and alerted on under normwatch's canonical names, delivered to a real local receiver."""

from __future__ import annotations

from normwatch.server.alerts.signing import verify
from normwatch.testing import ServerProcess
from tests.helpers.api import WEBHOOK_SECRET, client_for, create_rule, create_run, post_metrics
from tests.helpers.receivers import WebhookReceiver
from tests.helpers.tenants import make_tenant


def test_olmo_core_names_answer_and_alert_as_grad_norm_total(
    alerting_server: ServerProcess, receiver: WebhookReceiver
) -> None:
    tenant = make_tenant(alerting_server.database_url)
    with client_for(alerting_server, tenant) as api:
        r = api.put(f"/api/v1/projects/{tenant.project}/aliases", json={"presets": ["olmo-core"]})
        assert r.status_code == 200, r.text
        create_rule(
            api,
            receiver.url(),
            name="grad norm 5+",
            metric="grad/norm/total",
            condition={"kind": "threshold", "op": ">=", "value": 5.0},
        )
        run = create_run(api, name="olmo-32b", start_step=0)
        grad = [0.5 + 0.1 * s for s in range(10)] + [6.5, 2.0]
        post_metrics(
            api,
            run,
            list(range(12)),
            **{"optim/total grad norm": grad, "train/CE loss": [3.0] * 12},
        )
        [firing, resolved] = receiver.wait_for(2)
        assert (firing["state"], firing["step"], firing["value"], firing["threshold"]) == (
            "firing",
            10,
            6.5,
            5.0,
        )
        # The rule's metric and the stored one, both named.
        assert firing["rule"]["metric"] == "grad/norm/total"
        assert firing["metric"] == "optim/total grad norm"
        assert (resolved["state"], resolved["step"]) == ("resolved", 11)
        delivered = receiver.delivered[0]
        assert verify(
            WEBHOOK_SECRET,
            delivered.headers["x-normwatch-timestamp"],
            delivered.headers["x-normwatch-signature"],
            delivered.body,
        )
        [series] = api.get(
            f"/api/v1/runs/{run}/series", params={"metric": "grad/norm/total"}
        ).json()["series"]
        assert series == {
            "metric": "grad/norm/total",
            "source": "optim/total grad norm",
            "steps": list(range(12)),
            "values": grad,
            "downsampled": False,
            "total_points": 12,
        }
