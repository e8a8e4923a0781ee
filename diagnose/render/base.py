from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from diagnose.model import Analysis


class Renderer(ABC):
    format: str = ""
    extension: str = ""

    @abstractmethod
    def render(self, analysis: Analysis, manifest: dict[str, Any]) -> str:
        """Return the whole document as text."""
