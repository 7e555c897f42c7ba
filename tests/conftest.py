"""Shared test setup: GPU tests are skipped where there is no CUDA device."""
import os

import pytest
import torch

os.environ.setdefault("KERNELRL_SIZE", "small")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
