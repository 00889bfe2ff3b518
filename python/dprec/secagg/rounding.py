"""Placeholder (issue 16 in progress)."""

from __future__ import annotations

__all__: list[str] = []
