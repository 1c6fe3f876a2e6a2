"""The version of the probe result's shape (its JSON keys are documented in helpers.machine.probe).

A live probe (`helpers.machine.probe.probe`) and the original machine rebuilt from its recorded facts
(`helpers.machine.recorded_machine.from_recorded`) both write it, so neither imports the other for it.
"""
from __future__ import annotations

SCHEMA_VERSION = 1
