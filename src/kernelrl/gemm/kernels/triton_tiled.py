"""Triton tiled GEMM: one program per output tile, pointer loads software-pipelined by Triton, fp32 accumulation.

C (M x N) = A (M x K) @ B (K x N), all row-major and contiguous. No TMA descriptors, no persistent loop and no
workspace: the least set-up per launch of the Triton kernels here, for shapes whose time is mostly launch and
memory latency. `EVEN_K` (K a multiple of BK) drops the K masks; `EVEN_MN` (the tiles cover the output exactly)
drops the wrap of edge rows and columns and the store's mask. `matmul_tiled_fixed` is the same kernel with the
sizes and strides compiled in (one binary per shape): its index arithmetic folds to constants. `tiled_product` is
the kernel without its store, for variants that write C another way. A proposer may write kernels of this form too.
"""
import triton
import triton.language as tl

from kernelrl.gemm.kernels.triton_tma import tile_coords


@triton.jit
def tiled_product(a_ptr, b_ptr, M, N, K, stride_am, stride_bk,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                  EVEN_K: tl.constexpr, EVEN_MN: tl.constexpr = False):
    """This program's output tile, accumulated in fp32: (acc, its rows rm, its columns rn, pid_m, pid_n). Rows
    and columns past the matrix edge are included; the caller masks or clips them at the store."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    pid_m, pid_n = tile_coords(pid, GROUP_M * num_pid_n, num_pid_m, GROUP_M)

    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    if EVEN_MN:
        ram = rm
        rbn = rn
    else:
        # rows and columns past the edge read row/column 0 again (in bounds); their results are masked at the store
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BM), BM)
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BN), BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + ram[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rbn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for ki in range(0, tl.cdiv(K, BK)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - ki * BK
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    return acc, rm, rn, pid_m, pid_n


@triton.jit
def tiled_store(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                EVEN_K: tl.constexpr, EVEN_MN: tl.constexpr):
    acc, rm, rn, pid_m, pid_n = tiled_product(a_ptr, b_ptr, M, N, K, stride_am, stride_bk, BM, BN, BK, GROUP_M,
                                              EVEN_K, EVEN_MN)
    # each branch written as the code that was measured (the same machine code: `kernelrl gemm sass`)
    if EVEN_MN:
        c = acc.to(c_ptr.dtype.element_ty)
        c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :]
        tl.store(c_ptrs, c)
    else:
        mask = (rm < M)[:, None] & (rn < N)[None, :]
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def matmul_tiled(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                 EVEN_K: tl.constexpr, EVEN_MN: tl.constexpr):
    tiled_store(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM, BN, BK, GROUP_M, EVEN_K, EVEN_MN)


@triton.jit
def matmul_tiled_fixed(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                       stride_am: tl.constexpr, stride_bk: tl.constexpr, stride_cm: tl.constexpr,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                       EVEN_K: tl.constexpr, EVEN_MN: tl.constexpr):
    tiled_store(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM, BN, BK, GROUP_M, EVEN_K, EVEN_MN)
