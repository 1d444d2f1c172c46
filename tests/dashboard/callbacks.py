"""Dash callback requests as the browser sends them, for tests that post them to a real server."""

from __future__ import annotations

from typing import Any

CALLBACK = "/_dash-update-component"


def callback_request(
    outputs: list[str], inputs: dict[str, Any], state: dict[str, Any], changed: list[str]
) -> dict[str, Any]:
    """The JSON a browser posts to run the callback of ``outputs`` (``id.property`` each)."""

    def spec(key: str, value: Any = None, with_value: bool = False) -> dict[str, Any]:
        component, _, prop = key.rpartition(".")
        return {"id": component, "property": prop, **({"value": value} if with_value else {})}

    return {
        "output": (".." + "...".join(outputs) + "..") if len(outputs) > 1 else outputs[0],
        "outputs": [spec(o) for o in outputs] if len(outputs) > 1 else spec(outputs[0]),
        "inputs": [spec(k, v, True) for k, v in inputs.items()],
        "state": [spec(k, v, True) for k, v in state.items()],
        "changedPropIds": changed,
    }
