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


def pytest_runtest_logreport(report):
    """With KERNELRL_INSTAFAIL=1, print a failure as it happens (a run cut short by a time limit keeps it)."""
    if report.failed and os.environ.get("KERNELRL_INSTAFAIL"):
        print(f"\n--- FAILED {report.nodeid} ({report.when})\n{report.longreprtext[-4000:]}\n", flush=True)


@pytest.fixture(scope="session")
def fastpath_module(tmp_path_factory):
    """The dispatch's C++ hot path for the installed torch: the one already built, or built once per session."""
    from kernelrl.gemm import fastpath

    return fastpath.load() or fastpath.build(tmp_path_factory.mktemp("fastpath"), log=lambda *_: None)
