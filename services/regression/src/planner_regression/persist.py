"""Fitted models in the ``planner_state`` KV bucket, so that a restarted service keeps them."""

from __future__ import annotations

import msgspec
from nats.js.kv import KeyValue

from planner_core.regression import (
    OnlineRegression,
    RegressionConfig,
    RegressionState,
    export_state,
    import_state,
)
from planner_proto import DecodeError
from planner_runtime.bus import kv_get, kv_put


def adopt(saved: OnlineRegression, config: RegressionConfig) -> OnlineRegression:
    """The saved model under the current settings: its samples (oldest first) and recent pass shapes
    are replayed into a model built from ``config`` when the settings changed since it was saved."""
    if saved.config == config:
        return saved
    model = OnlineRegression(config)
    order = saved.samples.seq.argsort()
    for x, y in zip(saved.samples.x[order], saved.samples.y[order], strict=True):
        model.add_sample([float(v) for v in x], float(y))
    for row in saved.averages.rows():
        model.averages.add_row(row)
    return model


async def load_model(kv: KeyValue, key: str, config: RegressionConfig) -> OnlineRegression | None:
    """The model saved at ``key``; None when there is none. Raises ValueError (with the reason) for a
    saved state that cannot be used."""
    try:
        state = await kv_get(kv, key, RegressionState)
    except DecodeError as exc:
        raise ValueError(f"undecodable regression state: {exc}") from None
    if state is None:
        return None
    if state.component != config.component:
        raise ValueError(f"state at {key} is for component {state.component}, not {config.component}")
    try:
        return adopt(import_state(state), config)
    except (ValueError, msgspec.ValidationError) as exc:
        raise ValueError(f"inconsistent regression state: {exc}") from None


async def save_model(kv: KeyValue, key: str, model: OnlineRegression) -> int:
    return await kv_put(kv, key, export_state(model))
