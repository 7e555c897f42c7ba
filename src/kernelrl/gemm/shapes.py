"""GEMM problem shapes: the 1000-shape grid and user lists (`MxNxK` strings or CSV files)."""
from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass
from pathlib import Path

GRID_SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)
DTYPES = ("fp16", "bf16")


@dataclass(frozen=True, order=True)
class Shape:
    """C (m x n) = A (m x k) @ B (k x n), all row-major."""

    m: int
    n: int
    k: int

    def __post_init__(self):
        for name in ("m", "n", "k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"shape dimension {name}={v!r} must be a positive integer")

    @property
    def flops(self) -> int:
        """Floating-point operations of one product (2·m·n·k)."""
        return 2 * self.m * self.n * self.k

    def bytes(self, elem: int = 2) -> int:
        """Fewest bytes one product moves: A and B read once, C written once."""
        return elem * (self.m * self.k + self.k * self.n + self.m * self.n)

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @classmethod
    def parse(cls, text: str) -> "Shape":
        """Parse `MxNxK` (e.g. `4096x4096x1024`)."""
        parts = text.strip().lower().split("x")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"bad shape {text!r}: write it as MxNxK, e.g. 4096x4096x1024")
        return cls(*(int(p) for p in parts))

    def to_dict(self) -> dict:
        return {"m": self.m, "n": self.n, "k": self.k}

    @classmethod
    def from_dict(cls, d: dict) -> "Shape":
        return cls(int(d["m"]), int(d["n"]), int(d["k"]))


def grid(sizes: tuple[int, ...] = GRID_SIZES) -> list[Shape]:
    """Every (m, n, k) over `sizes`: 1000 shapes for the default sizes, in m, n, k order."""
    return [Shape(m, n, k) for m, n, k in itertools.product(sizes, sizes, sizes)]


@dataclass(frozen=True)
class ModelConfig:
    """The widths of a decoder's linear layers (from the model's published config)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int

    def linears(self) -> dict[str, tuple[int, int]]:
        """Each linear layer's (out_features, in_features): q/k/v/o with the GQA widths, gate/up, down."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q_proj": (q, self.hidden), "k_proj": (kv, self.hidden), "v_proj": (kv, self.hidden),
                "o_proj": (self.hidden, q), "gate_proj": (self.intermediate, self.hidden),
                "up_proj": (self.intermediate, self.hidden), "down_proj": (self.hidden, self.intermediate)}


MODELS = {
    "Llama-3.1-8B": ModelConfig(4096, 32, 8, 128, 14336),
    "Llama-3.1-70B": ModelConfig(8192, 64, 8, 128, 28672),
    "Qwen2.5-7B": ModelConfig(3584, 28, 4, 128, 18944),
    "Qwen2.5-32B": ModelConfig(5120, 40, 8, 128, 27648),
    "Mistral-7B-v0.3": ModelConfig(4096, 32, 8, 128, 14336),
}
# Tokens per call, from decode (a few sequences) to long prefill.
MODEL_TOKENS = (1, 8, 16, 32, 64, 128, 512, 1024, 2048, 4096, 8192, 16384)


def model_layers(tokens: tuple[int, ...] = MODEL_TOKENS) -> dict[Shape, list[str]]:
    """The products of `MODELS`' linear layers, `x @ W.T` with x (tokens, in) and W (out, in) as a Shape
    (m = tokens, n = out, k = in), each with the `model/layer` names that run it."""
    found: dict[Shape, list[str]] = {}
    for model, cfg in MODELS.items():
        for layer, (out_f, in_f) in cfg.linears().items():
            for t in tokens:
                found.setdefault(Shape(t, out_f, in_f), []).append(f"{model}/{layer}")
    return dict(sorted(found.items()))


def read_shapes(spec: str) -> list[Shape]:
    """Shapes from `grid`, `models` (`model_layers`), a comma-separated `MxNxK` list, or a CSV file with m,n,k
    columns."""
    if spec == "grid":
        return grid()
    if spec == "models":
        return list(model_layers())
    path = Path(spec)
    if path.suffix == ".csv" or ("," not in spec and len(spec) < 256 and path.is_file()):
        if not path.is_file():
            raise FileNotFoundError(f"shape list {spec!r} not found: give a CSV with m,n,k columns")
        with path.open() as f:
            rows = list(csv.DictReader(f))
        if not rows or not {"m", "n", "k"} <= set(rows[0]):
            raise ValueError(f"{spec}: a shape CSV needs a header with columns m,n,k")
        return [Shape.from_dict(r) for r in rows]
    return [Shape.parse(s) for s in spec.split(",") if s.strip()]
