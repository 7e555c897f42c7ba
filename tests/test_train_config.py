"""Training configuration: TOML files over typed defaults, with errors that name the offending key."""
from pathlib import Path

import pytest

from kernelrl.train.config import STAGES, ConfigError, TrainConfig, smoke_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def write(tmp_path, text):
    p = tmp_path / "train.toml"
    p.write_text(text)
    return p


def test_a_toml_file_overrides_the_defaults_section_by_section(tmp_path):
    cfg = TrainConfig.from_toml(write(tmp_path, """
out = "runs/x"
stages = ["sft", "contrastive_rl"]
[model]
path = "/models/coder"
[lora]
r = 8
[rl]
num_generations = 4
learning_rate = 1
[evaluator]
devices = ["cuda:1", "cuda:2"]
[evaluator.eval]
timing_rounds = 3
"""))
    assert cfg.out == "runs/x" and cfg.model.path == "/models/coder"
    assert cfg.lora.r == 8 and cfg.lora.alpha == TrainConfig().lora.alpha
    assert cfg.rl.num_generations == 4 and cfg.rl.learning_rate == 1.0
    assert cfg.evaluator.devices == ("cuda:1", "cuda:2") and cfg.evaluator.eval == {"timing_rounds": 3}
    assert cfg.enabled("sft") and not cfg.enabled("self_training") and cfg.enabled("contrastive_rl")


def test_a_stage_can_be_switched_off_in_its_own_section(tmp_path):
    cfg = TrainConfig.from_toml(write(tmp_path, "[self_training]\nenabled = false\n"))
    assert [s for s in STAGES if cfg.enabled(s)] == ["sft", "contrastive_rl"]


def test_an_unknown_key_is_named_with_its_section(tmp_path):
    with pytest.raises(ConfigError, match=r"num_generation.*\[rl\]"):
        TrainConfig.from_toml(write(tmp_path, "[rl]\nnum_generation = 4\n"))


def test_a_value_of_the_wrong_type_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="rl.steps"):
        TrainConfig.from_toml(write(tmp_path, '[rl]\nsteps = "many"\n'))


def test_an_unknown_stage_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="unknown stages"):
        TrainConfig.from_toml(write(tmp_path, 'stages = ["sft", "dpo"]\n'))


def test_grpo_needs_at_least_two_rollouts_per_prompt(tmp_path):
    with pytest.raises(ConfigError, match="num_generations"):
        TrainConfig.from_toml(write(tmp_path, "[rl]\nnum_generations = 1\n"))


def test_reward_shaping_is_validated_when_the_file_is_read(tmp_path):
    with pytest.raises(ConfigError, match="failure"):
        TrainConfig.from_toml(write(tmp_path, "[reward]\nfailure = 0.0\n"))


def test_a_missing_file_says_where_examples_are(tmp_path):
    with pytest.raises(ConfigError, match="configs"):
        TrainConfig.from_toml(tmp_path / "nope.toml")


def test_the_defaults_train_with_lora_and_run_every_stage():
    cfg = TrainConfig()
    assert cfg.lora.enabled and all(cfg.enabled(s) for s in STAGES)


def test_the_smoke_preset_runs_every_stage_on_a_tiny_model_with_the_shipped_tasks(tmp_path):
    cfg = smoke_config(tmp_path, device="cpu")
    assert cfg.model.path == "" and all(cfg.enabled(s) for s in STAGES)
    assert cfg.evaluator.devices == ("cpu",) and cfg.policy_device == "cpu"
    assert sorted(p.stem for p in Path(cfg.tasks.dir).glob("*.py")) == ["add_mul", "relu"]


def test_a_config_round_trips_through_its_dict(tmp_path):
    cfg = smoke_config(tmp_path)
    assert TrainConfig.from_dict(_tomlish(cfg.to_dict())) == cfg


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("train*.toml")), ids=lambda p: p.name)
def test_every_shipped_training_config_parses(path):
    TrainConfig.from_toml(path)


def _tomlish(d):
    """What a TOML file would hold: lists where the dataclasses hold tuples."""
    if isinstance(d, dict):
        return {k: _tomlish(v) for k, v in d.items()}
    if isinstance(d, tuple):
        return [_tomlish(v) for v in d]
    return d
