"""The alert rule routes against a real server: scopes, validation, masking, conflicts."""

from __future__ import annotations

from normwatch.testing import ServerProcess
from tests.helpers.api import client_for
from tests.helpers.tenants import make_tenant


def test_rule_api_guards(alerting_server: ServerProcess) -> None:
    tenant = make_tenant(alerting_server.database_url)
    rule = {"name": "x", "metric": "g", "condition": {"kind": "non_finite"}, "channels": []}
    with client_for(alerting_server, tenant, "read") as reader:
        assert reader.post("/api/v1/alert-rules", json=rule).status_code == 403
    with client_for(alerting_server, tenant) as api:
        private = {**rule, "channels": [{"type": "webhook", "url": "http://10.1.2.3/x"}]}
        r = api.post("/api/v1/alert-rules", json=private)
        assert r.status_code == 422 and "channels[0]" in r.text
        bad = {**rule, "condition": {"kind": "threshold", "op": "=>", "value": 1}}
        assert api.post("/api/v1/alert-rules", json=bad).status_code == 422
        slack = {
            **rule,
            "channels": [
                {"type": "slack", "url": "https://hooks.slack.com/services/T/B/XYZSECRET"}
            ],
        }
        created = api.post("/api/v1/alert-rules", json=slack)
        assert created.status_code == 201, created.text
        assert "XYZSECRET" not in created.text
        assert "XYZSECRET" not in api.get("/api/v1/alert-rules").text
        assert api.post("/api/v1/alert-rules", json=slack).status_code == 409
        rid = created.json()["id"]
        other = make_tenant(alerting_server.database_url)
        with client_for(alerting_server, other) as stranger:
            assert stranger.get(f"/api/v1/alert-rules/{rid}").status_code == 403
            assert stranger.delete(f"/api/v1/alert-rules/{rid}").status_code == 403
        assert (
            api.patch(f"/api/v1/alert-rules/{rid}", json={"enabled": False}).json()["enabled"]
            is False
        )
        assert api.delete(f"/api/v1/alert-rules/{rid}").status_code == 204
        assert api.get(f"/api/v1/alert-rules/{rid}").status_code == 404
