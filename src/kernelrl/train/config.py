"""Training settings: typed defaults in code, overridable by a TOML file; `smoke_config()` is the tiny preset.

Lengths are in tokens unless a name says otherwise; learning rates are per optimiser step.
"""
from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path

from kernelrl.task import check_policy
from kernelrl.train.model import TinySpec
from kernelrl.train.shaping import RewardShaping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

STAGES = ("sft", "self_training", "contrastive_rl")


class ConfigError(ValueError):
    """A training configuration that cannot be used, with what to change."""


@dataclass(frozen=True)
class ModelConfig:
    """The policy: a local model folder, or (path empty) a tiny random model of shape `tiny`."""

    path: str = ""                  # local folder with config.json, weights and tokenizer; "" = tiny model
    dtype: str = "auto"             # auto, float32, bfloat16, float16
    tiny: TinySpec = field(default_factory=TinySpec)
    gradient_checkpointing: bool = False


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapters via PEFT; off means full fine-tuning."""

    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | tuple[str, ...] = "all-linear"


@dataclass(frozen=True)
class TasksConfig:
    """Which tasks to train on and where seed candidates come from."""

    dir: str = "suite"              # a directory of KernelBench-format references (searched recursively)
    names: tuple[str, ...] = ()     # subset of task names; empty = all
    size: str = ""                  # exported as KERNELRL_SIZE for the evaluator's workers ("small" on CPU)
    seeds_dir: str = ""             # honest candidates to seed the store: SEEDS/<task>.py or SEEDS/<task>/*.py
    # Non-LLM proposers (kernelrl.search.proposers) evaluated per task to seed the store, e.g. "compile".
    seed_proposers: tuple[str, ...] = ("reference",)


@dataclass(frozen=True)
class SFTSettings:
    """Stage 1: supervised fine-tuning on verified-correct candidates from the store."""

    enabled: bool = True
    max_per_task: int = 2           # candidates per task, best first (CUDA-L1 keeps at most 2)
    min_speedup: float = 0.0        # leave out correct programs slower than this (× over the reference)
    augment: int = 0                # extra copies per pair with freshly sampled exemplars in the prompt
    epochs: float = 3.0
    max_steps: int = -1             # > 0 overrides epochs
    learning_rate: float = 1e-4
    batch_size: int = 1
    grad_accum: int = 8
    max_length: int = 8192
    save_steps: int = 100           # mid-stage checkpoints (0 = none)


@dataclass(frozen=True)
class SelfTrainingSettings:
    """Stage 2: generate, keep what the evaluator says is correct (reward 1/0), fine-tune; repeat."""

    enabled: bool = True
    rounds: int = 2
    samples_per_task: int = 8
    temperature: float = 1.0
    top_p: float = 1.0              # nucleus sampling (1 = off)
    max_new_tokens: int = 4096
    generation_batch: int = 8       # sequences generated together
    epochs: float = 1.0
    max_steps: int = -1
    learning_rate: float = 5e-5
    batch_size: int = 1
    grad_accum: int = 8
    max_length: int = 8192


@dataclass(frozen=True)
class RLSettings:
    """Stage 3: GRPO on contrastive prompts built from the store, rewarded by the evaluator."""

    enabled: bool = True
    steps: int = 200                # optimiser steps
    num_generations: int = 8        # rollouts per prompt (the GRPO group)
    prompts_per_step: int = 2       # distinct prompts per optimiser step
    micro_batch: int = 0            # completions per forward/backward pass (0 = num_generations)
    max_completion_length: int = 4096
    temperature: float = 1.0
    top_p: float = 1.0              # nucleus sampling (1 = off)
    learning_rate: float = 1e-6
    beta: float = 0.0               # KL coefficient (0 = no reference model)
    loss_type: str = "dapo"         # one of TRL's GRPO loss types
    exemplars: int = 2              # earlier variants shown per prompt
    exemplar_strategy: str = "bucket"
    tau: float = 1.0                # softmax temperature over score buckets
    max_failures: int = 3           # recent failures shown per prompt
    save_steps: int = 50


@dataclass(frozen=True)
class EvaluatorSettings:
    """The reward: one Evaluator per device; `eval` overrides EvalConfig fields (e.g. timing_rounds). With
    `service` (a `kernelrl serve` URL; token from $KERNELRL_API_TOKEN) that service judges instead, under its
    own devices and settings. With `ray` ("auto" or a cluster's address) one evaluator per GPU of that Ray
    cluster judges, with these `eval` settings."""

    devices: tuple[str, ...] = ("cpu",)
    eval: dict = field(default_factory=dict)
    service: str = ""
    ray: str = ""


@dataclass(frozen=True)
class TrainConfig:
    """Everything one `kernelrl train` run needs."""

    out: str = "runs/train"
    store: str = ""                 # SQLite store; "" = OUT/store.db
    seed: int = 0
    stages: tuple[str, ...] = STAGES
    policy_device: str = "auto"     # where the policy trains: auto (CUDA when present), cpu, cuda
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    sft: SFTSettings = field(default_factory=SFTSettings)
    self_training: SelfTrainingSettings = field(default_factory=SelfTrainingSettings)
    rl: RLSettings = field(default_factory=RLSettings)
    reward: RewardShaping = field(default_factory=RewardShaping)
    evaluator: EvaluatorSettings = field(default_factory=EvaluatorSettings)
    logging_steps: int = 1
    tensorboard: bool = True        # also log to TensorBoard when it is installed
    use_vllm: bool = False          # generate with vLLM (must be installed): stage 2 and TRL's GRPO (colocate)
    vllm_gpu_memory: float = 0.3    # share of the policy GPU's memory vLLM may take

    def __post_init__(self):
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown:
            raise ConfigError(f"unknown stages {unknown}; stages are {', '.join(STAGES)}")
        if self.rl.num_generations < 2:
            raise ConfigError(f"rl.num_generations = {self.rl.num_generations}: GRPO needs at least 2 rollouts "
                              "per prompt to compare them")
        if not self.evaluator.devices:
            raise ConfigError("evaluator.devices is empty; list at least one device, e.g. [\"cuda:0\"]")
        if "policy" in self.evaluator.eval:
            try:
                check_policy(self.evaluator.eval["policy"])
            except ValueError as e:
                raise ConfigError(f"evaluator.eval: {e}") from None

    @property
    def out_path(self) -> Path:
        return Path(self.out)

    @property
    def store_path(self) -> Path:
        return Path(self.store) if self.store else self.out_path / "store.db"

    def enabled(self, stage: str) -> bool:
        """Whether `stage` is listed in `stages` and switched on in its own section."""
        section = {"sft": self.sft, "self_training": self.self_training, "contrastive_rl": self.rl}[stage]
        return stage in self.stages and section.enabled

    def with_(self, **kw) -> "TrainConfig":
        return replace(self, **kw)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        return _build(cls, d, "")

    @classmethod
    def from_toml(cls, path: str | Path) -> "TrainConfig":
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{p}: no such config file (see configs/*.toml for examples)")
        try:
            data = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{p}: not valid TOML: {e}") from e
        try:
            return cls.from_dict(data)
        except ConfigError as e:
            raise ConfigError(f"{p}: {e}") from e


def smoke_config(out: str | Path, device: str = "cpu", tasks_dir: str | Path | None = None) -> TrainConfig:
    """The smoke preset: a tiny random model, a few tiny tasks, every stage for a few steps (minutes on CPU)."""
    here = Path(__file__).parent / "smoke"
    tasks = Path(tasks_dir) if tasks_dir else here / "tasks"
    return TrainConfig(
        out=str(out),
        policy_device="cpu" if device == "cpu" else "auto",
        model=ModelConfig(tiny=TinySpec(hidden_size=64, intermediate_size=256, num_layers=2, num_heads=4,
                                        num_kv_heads=2, vocab_size=2048, max_positions=8192)),
        lora=LoraSettings(enabled=True, r=16, alpha=32, dropout=0.0),
        tasks=TasksConfig(dir=str(tasks), size="small", seeds_dir=str(here / "seeds")),
        sft=SFTSettings(max_per_task=3, augment=2, max_steps=200, learning_rate=3e-3, batch_size=4,
                        grad_accum=1, max_length=4096, save_steps=0),
        self_training=SelfTrainingSettings(rounds=1, samples_per_task=4, temperature=1.0, top_p=0.8, max_new_tokens=256,
                                           generation_batch=4, max_steps=10, learning_rate=1e-3,
                                           batch_size=4, grad_accum=1, max_length=4096),
        # No failure feedback in the smoke's prompts: a tiny model only copes with prompts like those it
        # was fine-tuned on, and stage 1 sees the store before any failure exists. Nucleus sampling keeps its
        # rollouts varied but mostly well-formed, so GRPO groups get different rewards.
        rl=RLSettings(steps=3, num_generations=4, prompts_per_step=1, max_completion_length=256,
                      temperature=1.0, top_p=0.8, learning_rate=1e-3, save_steps=1, max_failures=0),
        evaluator=EvaluatorSettings(devices=(device,), eval=dict(
            correctness_trials=2, warmup=1, timing_rounds=2, timing_precision=0, calls_per_round=5, input_sets=2,
            timeout_s=120.0, build_timeout_s=100.0)),
    )


def _build(cls, d: dict, where: str):
    if not isinstance(d, dict):
        raise ConfigError(f"[{where or 'top level'}] must be a table, got {type(d).__name__}")
    by_name = {f.name: f for f in fields(cls)}
    unknown = sorted(set(d) - set(by_name))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in [{where or 'top level'}]; known keys: {sorted(by_name)}")
    defaults = cls()
    kw = {}
    for name, value in d.items():
        current = getattr(defaults, name)
        key = f"{where}.{name}" if where else name
        if is_dataclass(current):
            kw[name] = _build(type(current), value, key)
        elif isinstance(current, tuple):
            if isinstance(value, str) and name != "stages":
                kw[name] = value  # e.g. lora.target_modules = "all-linear"
            elif not isinstance(value, list):
                raise ConfigError(f"{key} must be a list, got {value!r}")
            else:
                kw[name] = tuple(value)
        elif isinstance(current, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"{key} must be true or false, got {value!r}")
            kw[name] = value
        elif isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
            kw[name] = float(value)
        elif current is not None and not isinstance(current, dict) and not isinstance(value, type(current)):
            raise ConfigError(f"{key} must be a {type(current).__name__}, got {value!r}")
        else:
            kw[name] = value
    try:
        return cls(**kw)
    except (TypeError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"[{where or 'top level'}]: {e}") from e
