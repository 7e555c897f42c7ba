"""Triton split-K GEMM with the reduction inside the kernel: C (M x N) = A (M x K) @ B (K x N), row-major,
fp32 accumulation, one launch per product.

Program (tile, split) multiplies one BM x BN output tile over one K chunk. With SPLITS > 1 every program adds
its fp32 partial tile into a workspace (atomic adds, resolved in L2), then counts itself done on the tile's
counter; the program that arrives last reads the finished sum, writes C, and zeroes the workspace tile and
its counter again, so the workspace is all zeros between launches and no memset is needed. Summation order
across splits is not fixed: results may differ in the last bits from run to run (the dispatch does not use
these kernels when torch's deterministic mode is on). A proposer may write kernels of this form too.
"""
import triton
import triton.language as tl

from kernelrl.gemm.kernels.triton_tma import tile_coords


@triton.jit(do_not_specialize=["k_chunk", "splits"])
def matmul_splitk(a_ptr, b_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K, k_chunk, splits,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                  REDUCE: tl.constexpr):
    pid = tl.program_id(axis=0)
    pid_k = tl.program_id(axis=1)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    pid_m, pid_n = tile_coords(pid, GROUP_M * num_pid_n, num_pid_m, GROUP_M)

    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    k0 = pid_k * k_chunk
    k_end = tl.minimum(K, k0 + k_chunk)
    a_ptrs = a_ptr + rm[:, None] * K + (k0 + rk)[None, :]
    b_ptrs = b_ptr + (k0 + rk)[:, None] * N + rn[None, :]
    mask_m = rm < M
    mask_n = rn < N
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for i in range(0, tl.cdiv(k_chunk, BK)):  # k_chunk is a multiple of BK; the last chunk is masked at K
        mask_k = (k0 + i * BK + rk) < k_end
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, out_dtype=tl.float32)
        a_ptrs += BK
        b_ptrs += BK * N

    mask_c = mask_m[:, None] & mask_n[None, :]
    c_ptrs = c_ptr + rm[:, None] * N + rn[None, :]
    if REDUCE:
        ws_ptrs = ws_ptr + rm[:, None] * N + rn[None, :]
        tl.atomic_add(ws_ptrs, acc, mask=mask_c, sem="relaxed")
        tl.debug_barrier()  # every thread's adds happen before the release below
        tile = pid_m * num_pid_n + pid_n
        arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
        if arrived == splits - 1:
            total = tl.load(ws_ptrs, mask=mask_c, other=0.0, cache_modifier=".cg")
            tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=mask_c)
            tl.store(ws_ptrs, tl.zeros((BM, BN), dtype=tl.float32), mask=mask_c)
            tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed")
    else:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_c)
