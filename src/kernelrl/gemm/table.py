"""The tuned table: which kernel each (m, n, k, dtype) uses, as committed data with its provenance."""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

DATA = Path(__file__).parent / "data"
# The committed table of each GPU model it was tuned on (matched as a word in the device's name, on sm_90: the
# kernels are built for sm_90a). `kernelrl gemm tune` writes the table of the GPU it runs on.
TABLES = {"H200": "tuned_h200.json", "H100": "tuned_h100.json"}
DEFAULT_TABLE = DATA / TABLES["H200"]
# `Table.relaid_layers`: a layer's weight is laid out for the tuned kernels when, against F.linear on the weight
# as nn.Linear keeps it, no tuned token count is slower than RELAY_FLOOR and their geometric mean gains RELAY_GAIN.
RELAY_FLOOR = 0.98
RELAY_GAIN = 1.01


def table_path_for(device_name: str, capability: tuple[int, int]) -> Path | None:
    """The committed table for a GPU (named as `torch.cuda.get_device_name` names it), or None when kernelrl has
    none for it: another architecture, or a Hopper part it was not tuned on (a GH200 is not an H200)."""
    if tuple(capability) != (9, 0):
        return None
    for model, name in TABLES.items():
        if re.search(rf"(?<![A-Za-z0-9]){model}(?![A-Za-z0-9])", device_name):
            return DATA / name
    return None


@dataclass(frozen=True)
class Entry:
    """One shape's winner and the times that chose it (device time by graph replay, microseconds)."""

    m: int
    n: int
    k: int
    dtype: str
    kernel: str
    us: float
    torch_us: float
    vs_linear: float | None = None  # F.linear's time on the (n, k) weight over this entry's on the relaid weight

    @property
    def key(self) -> tuple[int, int, int, str]:
        return (self.m, self.n, self.k, self.dtype)

    @classmethod
    def from_dict(cls, d: dict) -> "Entry":
        return cls(int(d["m"]), int(d["n"]), int(d["k"]), str(d["dtype"]), str(d["kernel"]),
                   float(d["us"]), float(d["torch_us"]),
                   None if d.get("vs_linear") is None else float(d["vs_linear"]))


@dataclass(frozen=True)
class Table:
    """Winners per shape plus where they were measured (device, library versions)."""

    entries: tuple[Entry, ...] = ()
    meta: dict = field(default_factory=dict)

    def lookup(self) -> dict[tuple[int, int, int, str], str]:
        """(m, n, k, dtype) -> kernel name, for shapes whose winner is not torch.matmul."""
        return {e.key: e.kernel for e in self.entries if e.kernel != "torch"}

    def relaid_layers(self, floor: float = RELAY_FLOOR, gain: float = RELAY_GAIN) -> set[tuple[int, int, str]]:
        """The (n, k, dtype) layers whose weight `gemm.patch` lays out as (k, n) storage for the dispatch. Where
        every entry of a layer was timed against F.linear (`tune.against_linear`): those whose every token count
        reads at least `floor` and whose geometric mean reaches `gain`; the others keep nn.Linear's weight and
        F.linear. Where the table holds no such times for a layer: the layers with a tuned kernel."""
        layers: dict[tuple[int, int, str], list[Entry]] = {}
        for e in self.entries:
            layers.setdefault((e.n, e.k, e.dtype), []).append(e)
        out = set()
        for key, entries in layers.items():
            ratios = [e.vs_linear for e in entries]
            if None not in ratios:
                if min(ratios) >= floor and math.exp(sum(map(math.log, ratios)) / len(ratios)) >= gain:
                    out.add(key)
            elif any(e.kernel != "torch" for e in entries):
                out.add(key)
        return out

    def to_dict(self) -> dict:
        return {"meta": self.meta, "entries": [asdict(e) for e in sorted(self.entries, key=lambda e: e.key)]}

    @classmethod
    def from_dict(cls, d: dict) -> "Table":
        if "entries" not in d:
            raise ValueError("not a tuned GEMM table: no 'entries' key")
        return cls(tuple(Entry.from_dict(e) for e in d["entries"]), dict(d.get("meta", {})))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path = DEFAULT_TABLE) -> "Table":
        if not Path(path).is_file():
            return cls()
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (json.JSONDecodeError, KeyError, ValueError, TypeError) as e:
            raise ValueError(f"tuned table {path} is unreadable ({e}): re-run `kernelrl gemm tune`") from e

    def without_family(self, family: str) -> "Table":
        """The table with every entry of `family` replaced by torch (e.g. cuBLASLt blobs of another version)."""
        ents = tuple(Entry(e.m, e.n, e.k, e.dtype, "torch", e.torch_us, e.torch_us, None)
                     if e.kernel.split(":", 1)[0] == family else e for e in self.entries)
        return Table(ents, self.meta)


def from_records(records: list[dict], meta: dict) -> Table:
    """A table from the tuner's per-shape records (the last record of a shape wins)."""
    by_key: dict[tuple, Entry] = {}
    for r in records:
        e = Entry(r["m"], r["n"], r["k"], r["dtype"], r["best"], r["best_us"], r["torch_us"], r.get("vs_linear"))
        by_key[e.key] = e
    return Table(tuple(by_key.values()), meta)


PACKED = (".gz", ".xz")  # records kept packed: gzip, or xz (the tuner's records: a third smaller than gzip)


def open_packed(path: Path, mode: str = "rt"):
    """`path` opened in `mode`, through gzip (`.gz`) or xz (`.xz`) where its name says so."""
    import gzip
    import lzma

    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, mode)
    if path.suffix == ".xz":
        return lzma.open(path, mode, **({"preset": 9 | lzma.PRESET_EXTREME} if "w" in mode else {}))
    return path.open(mode)


def read_records(path: Path) -> list[dict]:
    """The tuner's JSONL records, plain or packed (`open_packed`; lines cut short by a stopped run are skipped)."""
    with open_packed(path) as f:
        text = f.read()
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
