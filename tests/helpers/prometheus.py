"""A ``/metrics`` scrape, parsed: sample values by name and labels, and who answered."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

LATENCY = "normwatch_http_request_duration_seconds"


class Scrape:
    """One parsed scrape: sample values by name and labels, and who answered."""

    def __init__(self, response: httpx.Response) -> None:
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        self.text = response.text
        self.worker = response.headers["x-normwatch-worker"]
        self.samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples
        }

    def value(self, name: str, **labels: str) -> float:
        """The sample's value; 0 for a labelled series not created yet."""
        key = (name, tuple(sorted(labels.items())))
        if key not in self.samples:
            assert labels, f"{name} is missing from the scrape"
            return 0.0
        return self.samples[key]

    def label_values(self, name: str, label: str) -> set[str]:
        return {dict(labels)[label] for (n, labels) in self.samples if n == name}


def scrape(client: httpx.Client, **headers: str) -> Scrape:
    return Scrape(client.get("/metrics", headers=headers))
