"""Metric-name aliases: canonical names (``grad/norm/total``) that other trainers log
under names of their own (``optim/total grad norm``), resolved on read, never renamed.

`presets` holds the mappings of known trainers, `resolution` the checked map of one
project and how a canonical name finds the stored series that stands for it.
"""

from __future__ import annotations

from .presets import PRESETS, Preset
from .resolution import EMPTY, AliasError, AliasMap, build

__all__ = ["EMPTY", "PRESETS", "AliasError", "AliasMap", "Preset", "build"]
