"""The honest corpus's manifest, read into records (used by the corpus tests)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Honest:
    """One honest candidate, its reference task, where it runs and the precision policy it is honest under."""

    file: Path
    task: Path
    device: str
    policy: str = "strict"

    @property
    def name(self) -> str:
        return self.file.stem


def load() -> list[Honest]:
    """Every entry of MANIFEST.toml, paths resolved."""
    data = tomllib.loads((HERE / "MANIFEST.toml").read_text())
    return [Honest(file=HERE / e["file"], task=HERE / e["task"], device=e["device"],
                   policy=e.get("policy", "strict")) for e in data["honest"]]
