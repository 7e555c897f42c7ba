"""`kernelrl train` where the `train` extra is not installed: one line naming the extra, exit code 2."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "train-qwen2.5-coder-7b.toml"


def run_without(module: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`kernelrl ARGS` in a fresh interpreter in which importing `module` fails as if it were not installed."""
    shim = tmp_path / "shim"
    (shim / module).mkdir(parents=True)
    (shim / module / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{module}'\", "
                                               f"name='{module}')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "kernelrl.cli", *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)


@pytest.mark.parametrize("module, args", [
    ("trl", ["train", "--smoke", "--device", "cpu"]),
    ("transformers", ["train", "--config", str(CONFIG)]),
    ("accelerate", ["train", "--config", str(CONFIG), "--out", "elsewhere"]),  # missing under peft's import
])
def test_without_the_train_extra_train_says_which_extra_to_install(module, args, tmp_path):
    r = run_without(module, args, tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and 'pip install "kernelrl[train]"' in lines[0] and module in lines[0], r.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "elsewhere").exists()  # nothing was started
