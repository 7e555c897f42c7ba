"""`kernelrl gemm sass`: SASS listings reduced to comparable lines, without a GPU."""
from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from kernelrl.gemm import sass
from kernelrl.gemm.cli import app

LISTING = """
	code for sm_90a
		Function : _ZN45_GLOBAL__N__7c1e2f3a_17_cluster_splitk_cu_{path_hash}6kernelILi64ELi64EEEvv
	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90"
        /*{a0}*/                   LDC R1, c[0x0][0x28] ;                          /* 0x00000a00ff017b82 */
                                                                                   /* 0x000fe40000000800 */
        /*{a1}*/                   S2R {reg}, SR_TID.X ;                           /* 0x0000000000007919 */
                                                                                   /* 0x000e220000002100 */
        /*{a2}*/                   EXIT ;                                          /* 0x000000000000794d */
"""


def listing(path_hash="1a2b3c4d", reg="R0", addresses=("0000", "0010", "0020")) -> str:
    a0, a1, a2 = addresses
    return LISTING.format(path_hash=path_hash, reg=reg, a0=a0, a1=a1, a2=a2)


def test_instructions_drop_addresses_and_encodings():
    assert sass.instructions(listing()) == ["LDC R1, c[0x0][0x28]", "S2R R0, SR_TID.X", "EXIT"]


def test_same_code_at_other_addresses_and_paths_hashes_the_same():
    a = sass.functions(listing())
    b = sass.functions(listing(path_hash="9f9f9f9f", addresses=("0100", "0110", "0120")))
    assert list(a) == list(b) == ["_ZN6kernelILi64ELi64EEEvv"]
    assert sass.digest(a["_ZN6kernelILi64ELi64EEEvv"]) == sass.digest(b["_ZN6kernelILi64ELi64EEEvv"])


def test_another_register_changes_the_hash():
    same = sass.digest(sass.instructions(listing()))
    assert sass.digest(sass.instructions(listing(reg="R2"))) != same
    assert len(same) == 16


def test_sass_command_is_listed():
    result = CliRunner().invoke(app, ["sass", "--help"])
    assert result.exit_code == 0 and "SASS" in result.output


@pytest.mark.skipif(importlib.util.find_spec("triton") is not None, reason="Triton is installed here")
def test_sass_without_triton_says_what_to_install():
    result = CliRunner().invoke(app, ["sass", "--only", "tiled:"])
    assert result.exit_code == 2
    assert "pip install triton" in result.output and "Traceback" not in result.output


def test_sass_of_a_missing_clusterk_source_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["sass", "--clusterk", str(tmp_path / "none.cu"), "--cuobjdump", "cuobjdump"])
    assert result.exit_code == 2
    assert "none.cu" in result.output
