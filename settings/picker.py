"""The endpoint picker's whole configuration for a model, from the same settings on both
implementations: the HyperPod controller renders it from `weights` inside the cluster, and
the llm-d router is given it by this stack. The routing toolkit builds its picker model
from exactly this document, so a prediction runs the plugins that run."""

from __future__ import annotations

from typing import Any

import yaml

from settings.picker_config import (endpoint_picker_config_yaml, render_endpoint_picker_config,
                                    render_sticky_picker_config)

from .model import ModelSettings


def endpoint_picker_config(model: ModelSettings) -> dict[str, Any] | None:
    """The EndpointPickerConfig as a document; None when a ConfigMap already in the cluster decides."""
    if model.picker_config_map is not None:
        text = model.picker_config_map.text
        return yaml.safe_load(text) if text is not None else None
    return rendered_picker_config(model)


def rendered_picker_config(model: ModelSettings) -> dict[str, Any]:
    """The configuration the stack renders for a model without a picker file: its recipe's, on
    the precise prefix index when the model runs it."""
    if model.routing.recipe == "sticky":
        return render_sticky_picker_config(model.routing.parameters, model.routing.precise)
    return render_endpoint_picker_config(model.effective_weights, model.routing.precise)


def endpoint_picker_config_text(model: ModelSettings) -> str | None:
    """The document as the picker reads it: the user's file verbatim, or the rendered config as
    stable YAML (its hash decides when the picker restarts)."""
    if model.picker_config_map is not None:
        return model.picker_config_map.text
    return endpoint_picker_config_yaml(rendered_picker_config(model))
