"""Triton persistent TMA GEMM for Hopper: C (M x N) = A (M x K) @ B (K x N), row-major, fp32 accumulation.

One program per SM walks output tiles in grouped order; A, B and C move through TMA descriptors made on the
host (no device-side descriptor workspace, so no per-call allocation). `WARP_SPECIALIZE` asks Triton to split
the K loop into producer and consumer warps. A proposer may write kernels of this form too.
"""
import triton
import triton.language as tl


# (row, column) of output tile `tile_id` in grouped order: tiles that run together share rows of A and columns
# of B in L2. The tiled and split-K kernels use it too.
@triton.jit
def tile_coords(tile_id, num_pid_in_group, num_pid_m, GROUP_M: tl.constexpr):
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def matmul_tma_persistent(a_desc, b_desc, c_desc, M, N, K,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                          NUM_SMS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, FLATTEN: tl.constexpr,
                          ACC_FP16: tl.constexpr):
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_M * num_pid_n
    # ACC_FP16 exists only so that tests can show the correctness gate rejecting fp16 accumulation.
    acc_dtype = tl.float16 if ACC_FP16 else tl.float32
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_coords(tile_id, num_pid_in_group, num_pid_m, GROUP_M)
        offs_m = pid_m * BM
        offs_n = pid_n * BN
        acc = tl.zeros((BM, BN), dtype=acc_dtype)
        for ki in range(k_tiles):
            offs_k = ki * BK
            a = a_desc.load([offs_m, offs_k])
            b = b_desc.load([offs_k, offs_n])
            acc = tl.dot(a, b, acc, out_dtype=acc_dtype)
        c_desc.store([offs_m, offs_n], acc.to(c_desc.dtype))
