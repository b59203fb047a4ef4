"""Example catalog entries of the demo shop (autodiscovered by ``workflows.definitions``).

Documents may name these instead of writing CEL: a named schema, a contract, and callbacks
of several categories. Each callback receives, by parameter name, the variables its field
provides (``payload``, ``state``, ``input`` ...).
"""

from __future__ import annotations

from typing import Any

from workflows.definitions import callbacks, contracts, types

types.register(
    "purchase.Request",
    {
        "type": "object",
        "required": ["number", "total", "requester"],
        "properties": {
            "number": {"type": "string", "minLength": 1, "maxLength": 32},
            "total": {"type": "number", "minimum": 0},
            "requester": {"type": "string", "maxLength": 150},
        },
    },
)
types.register(
    "purchase.State",
    {
        "type": "object",
        "required": ["number", "total"],
        "properties": {"number": {"type": "string"}, "total": {"type": "number"}, "status": {"type": "string"}},
    },
)
types.register("purchase.Approve", {"type": "object", "properties": {"comment": {"type": "string", "maxLength": 1000}}})
contracts.register(
    "purchase.orders.v1",
    signals={"goods.received": {"type": "object", "properties": {"note": {"type": "string"}}}},
    start_schema="purchase.Request",
)


@callbacks.register("purchase.from_request", category="initial_state")
def from_request(payload: dict[str, Any]) -> dict[str, Any]:
    return {"number": payload["number"], "total": payload["total"], "status": "submitted"}


@callbacks.register("purchase.subject", category="subject_resolver")
def subject(state: dict[str, Any]) -> dict[str, Any]:
    return {"type": "purchase", "id": state["number"]}


@callbacks.register("purchase.small", category="condition")
def small(state: dict[str, Any]) -> bool:
    return float(state.get("total", 0)) <= 100


@callbacks.register("purchase.apply_approve", category="state_reducer")
def apply_approve(state: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    return {**state, "status": "approved", "comment": (payload or {}).get("comment", "")}


@callbacks.register("purchase.rejection_message", category="fail_message")
def rejection_message(state: dict[str, Any]) -> str:
    return f"Purchase {state.get('number', '')} was rejected"


@callbacks.register("shop.order_goods", category="service")
def order_goods(payload: dict[str, Any]) -> None:
    """A service handler: the engine dispatches the step's payload to it after commit (at
    least once). Its return value is not used: an answer goes back to the run as a signal."""


@callbacks.register("shop.cancel_order", category="service")
def cancel_order(payload: dict[str, Any]) -> None:
    return None


@callbacks.register("shop.classify", category="agent")
def classify(input: dict[str, Any]) -> dict[str, Any]:
    """A stand-in agent: a real one would call a model; this one looks at the description."""
    text = str((input or {}).get("description", "")).lower()
    return {"category": "it" if "laptop" in text or "monitor" in text else "general"}


@callbacks.register("shop.tax", category="script")
def tax(input: dict[str, Any]) -> dict[str, Any]:
    total = float((input or {}).get("total", 0))
    return {"tax": round(total * 0.24, 2)}
