// Split-K GEMM whose K splits are one thread-block cluster and reduce through distributed shared memory.
// C (M x N, row-major) = A (M x K, row-major) * B (K x N, row-major); fp16 or bf16 in, fp32 accumulation.
//
// A cluster of `splits` blocks (chosen at run time: a power of two up to 16, or 3, 5, 6, 7 or 9 to 13) computes
// one BM x BN output tile: block r of the cluster multiplies the tile over the r-th slice of K (cp.async pipeline, ldmatrix, mma.sync
// m16n8k16 with fragments double-buffered in registers), stores each of its fp32 partial rows into the shared
// memory of the block that owns that row (distributed shared memory), and after one cluster barrier every
// block sums the partials of its own rows in a fixed order (the result is the same on every run) and writes
// them to C. No workspace, no atomics, no second kernel: the partial sums never leave the GPC. For the
// latency-bound shapes (few output tiles, deep K) where one block per tile runs a long serial K loop and a
// split-K through global memory pays for a round trip and a fix-up.
// Where even 16 splits leave most SMs idle (one or a few output tiles, K in the thousands), `groups` clusters
// (run time) share each tile's K: each reduces its slices on chip as above, then the clusters of a tile meet
// once in a small fp32 workspace, and the last to arrive (an atomic counter per tile and rank, which it resets)
// adds the groups' sums in group order and writes C. Still one kernel, and the same bits on every run.
//
// Two main loops: ldmatrix and mma.sync (KR_WGMMA=0, warps in a KR_WM x KR_WN grid), or wgmma (KR_WGMMA=1: one
// warpgroup per 64 rows issues asynchronous warpgroup MMAs from 128-byte-swizzled shared memory; CuTe's layouts
// and MMA atoms, so those objects need the CUTLASS headers). Both push their partials the same way; the wgmma
// loops' clusters of 8 or more blocks instead stage their partial tile in their own shared memory and copy each
// owner's rows to it with the copy engine, one bulk copy per owner (KR_BULK_MIN_SPLITS below).
//
// Built once per configuration (-D KR_NAME, KR_BM, KR_BN, KR_BK, KR_STAGES, KR_WM, KR_WN, KR_WGMMA), both input
// types in one object; a C ABI so Python calls it through ctypes. Needs K and N to be multiples of 8 (16-byte
// rows).
// Variants kept for measurement (the defaults are what the search runs): KR_PUSH=1 (default) has every
// block store its partial rows straight into the shared memory of the block that owns them (one barrier,
// remote stores only); KR_PUSH=0 has each owner load its rows from every block after a barrier (remote
// loads, a second barrier). KR_L2_HINT=1 (default) asks L2 to fetch 128-byte lines for the 16-byte copies.
// KR_PROXY_FENCE=1 (default) fences the landed copies (generic proxy) before wgmma reads them (async proxy).
// KR_TMA=1 (with KR_WGMMA=1) fills the stages with the bulk tensor copy engine instead of cp.async: one thread
// issues each stage's two copies (tensor maps made per call on the host), which complete on an mbarrier; the
// copy engine swizzles, and zero-fills rows, columns and K past the edges.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

// Receive rows beyond the tile's BM: with a cluster size that does not divide BM (3, 5, 6, 7 or 9 to 13), each
// block owns ceil(BM / splits) rows and receives that many from every block of its cluster, up to 8 rows more than
// the tile in all (64-row tiles in clusters of 9 or 12). Those sizes fill a wave where a power of two does not: the
// GPU places 15 clusters of 8 at once, so 16 output tiles in clusters of 8 ran in two waves.
constexpr int kSpareRows = 8;

#ifndef KR_WGMMA
#define KR_WGMMA 0
#endif
// KR_PREFETCH_TMAP=1: thread 0 prefetches the two tensor maps at the top of the kernel, before the barriers are
// set up, so that the first copy need not fetch them. KR_PROBE_SKIP (measurements of the fixed cost only, wrong
// results): 1 leaves out the main loop, 2 the reduction (rank 0 writes its own partial tile), 3 returns at the
// top of the kernel, 4 returns once the barriers are set up and every block of the cluster has started; with the
// main loop left out, 5 also leaves out the pushes, 6 the owners' sums and stores, 7 the pushes and barriers.
#ifndef KR_PREFETCH_TMAP
#define KR_PREFETCH_TMAP 0
#endif
#ifndef KR_PROBE_SKIP
#define KR_PROBE_SKIP 0
#endif
// KR_SCALARS_FIRST=1 (tensor-map kernel): the pointer and integer parameters come before the two tensor maps, so
// that they sit at the start of the parameter space.
#ifndef KR_SCALARS_FIRST
#define KR_SCALARS_FIRST 0
#endif
#ifndef KR_TMA
#define KR_TMA 0
#endif
#if KR_TMA && !KR_WGMMA
#error "the bulk tensor copies (KR_TMA=1) feed the wgmma main loop (KR_WGMMA=1)"
#endif
#if KR_WGMMA
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>
#endif
#if KR_TMA
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>
#endif

#ifndef KR_PUSH
#define KR_PUSH 1
#endif
#ifndef KR_L2_HINT
#define KR_L2_HINT 1
#endif
#ifndef KR_PROXY_FENCE
#define KR_PROXY_FENCE 1
#endif
// KR_ST_ASYNC (wgmma loops): 0 pushes partials with plain stores to the owners' shared memory, then a cluster
// barrier (its release orders every earlier write, GPU-wide); 1 pushes them with asynchronous stores that count
// their bytes on the owner's receive mbarrier, and each owner waits for its own bytes only (no cluster barrier);
// 2 as 1, with a relaxed cluster barrier at the end.
#ifndef KR_ST_ASYNC
#define KR_ST_ASYNC 0
#endif
// The bulk exchange (wgmma loops), chosen at run time for clusters of KR_BULK_MIN_SPLITS blocks or more: each
// block writes its partial tile into its own shared memory (the pipeline's, free after the main loop), then one
// thread per owner copies the owner's rows to it with the copy engine (shared memory to another block's shared
// memory), counted on the owner's receive mbarrier; a relaxed cluster barrier at the end keeps every block until
// the copies out of it have been read. On the H200 it took 1-8% off in clusters of 8 and 16, was mixed in
// clusters of 7 (-4% to +2%) and up to 18% slower in smaller ones, the most with one block
// (benchmarks/results/gemm_h200_findings.md, "Cluster split-K").
#ifndef KR_BULK_MIN_SPLITS
#define KR_BULK_MIN_SPLITS 8
#endif
#if KR_WGMMA && !KR_PUSH
#error "the wgmma main loop pushes its partials (KR_PUSH=1)"
#endif

namespace cg = cooperative_groups;

namespace {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The receive mbarrier of the asynchronous push (KR_ST_ASYNC), thread 0 only: one arrival (its own, expecting
// `bytes`) and the bytes every block of the cluster stores into this block's receive region.
__device__ __forceinline__ void recv_barrier_init(uint64_t* bar, uint32_t bytes) {
  const uint32_t a = smem_addr(bar);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(a) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // before other blocks store against it
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(a), "r"(bytes) : "memory");
}

// Waits until every byte this block expects has landed (phase 0 of the receive mbarrier).
__device__ __forceinline__ void recv_barrier_wait(uint64_t* bar) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "KR_RECV_WAIT:\n"
      " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], 0;\n"
      " @!done bra KR_RECV_WAIT;\n}\n" ::"r"(smem_addr(bar))
      : "memory");
}

// This block's shared-memory address `a` as seen in block `rank` of the cluster.
__device__ __forceinline__ uint32_t cluster_addr(uint32_t a, int rank) {
  uint32_t d;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(rank));
  return d;
}

// Stores two floats into another block's shared memory and counts their 8 bytes on its mbarrier.
__device__ __forceinline__ void store_async2(uint32_t dst, float x, float y, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(dst),
               "f"(x), "f"(y), "r"(bar)
               : "memory");
}

// Copies `bytes` (a multiple of 16) from this block's shared memory to `dst` in another block's, with the copy
// engine; completes by counting the bytes on the mbarrier at `bar` (in the destination block).
__device__ __forceinline__ void bulk_copy_to_peer(uint32_t dst, uint32_t src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "r"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// Rows of a BM-row tile that block `rank` of `splits` owns: ceil(BM / splits), fewer (or none) for the last.
__device__ __forceinline__ int owned_rows(int bm, int splits, int rank) {
  const int rows_per = (bm + splits - 1) / splits;
  return rows_per * (rank + 1) <= bm ? rows_per : max(0, bm - rows_per * rank);
}

// 16 bytes global -> shared (address in the shared window), bypassing L1; zero-filled (nothing read) when
// `pred` is false.
__device__ __forceinline__ void cp_async16_to(uint32_t dst, const void* src, bool pred) {
#if KR_L2_HINT
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(pred ? 16 : 0));
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(pred ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred) {
  cp_async16_to(smem_addr(dst), src, pred);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four fp32 values rounded to T and stored as one 8-byte write.
template <typename T>
__device__ __forceinline__ void store4(T* dst, float4 v) {
  using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  T2 pair[2];
  if constexpr (std::is_same_v<T, __half>) {
    pair[0] = __floats2half2_rn(v.x, v.y);
    pair[1] = __floats2half2_rn(v.z, v.w);
  } else {
    pair[0] = __floats2bfloat162_rn(v.x, v.y);
    pair[1] = __floats2bfloat162_rn(v.z, v.w);
  }
  *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(pair);
}

// What one block of a cluster computes: its cluster's output tile (row m0, column n0) over K steps
// [kt0, kt0 + nk) of BK, one of splits x groups even slices of K (nk may be 0: the block then adds zeros). The
// grid's x holds `groups` clusters of `splits` blocks each for every output tile (y): cluster `group` takes
// slices [group * splits, (group + 1) * splits), its block `rank` the rank-th of those.
struct Share {
  int splits, rank, m0, n0, kt0, nk, group, groups;
};
template <int BM, int BN, int BK, bool kGrouped>
__device__ __forceinline__ Share block_share(const cg::cluster_group& cluster, int K, int tiles_n) {
  const int splits = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int groups = kGrouped ? static_cast<int>(gridDim.x) / splits : 1;
  const int group = kGrouped ? static_cast<int>(blockIdx.x) / splits : 0;
  const int k_tiles = (K + BK - 1) / BK;
  const int per_slice = (k_tiles + splits * groups - 1) / (splits * groups);
  const int kt0 = min(k_tiles, (group * splits + rank) * per_slice);
  return {splits, rank, int(blockIdx.y / tiles_n) * BM, int(blockIdx.y % tiles_n) * BN, kt0,
          min(k_tiles, kt0 + per_slice) - kt0, group, groups};
}

// KR_END_STORE (one cluster per tile): how an owner writes its rows' sums to C. 0: each thread sums 4 columns
// and stores them (8 bytes); 1: 8 columns, one 16-byte store; 3 (for timing only, wrong results): the sums are
// computed and nothing is stored. On the H200 the stores cost 0.2-0.7 us in clusters whichever way they are made:
// 1 saved up to 0.26 us in clusters of up to 7 blocks and lost up to 0.19 us in clusters of 8 and 16. Tried at
// commit 1a468ca and no better (2 there: rows staged in shared memory and written by bulk copies, slower
// everywhere; every sum first and the stores back to back; stores past L1): gemm_h200_findings.md, "Tried and
// not adopted".
#ifndef KR_END_STORE
#define KR_END_STORE 0
#endif
#if KR_END_STORE != 0 && KR_END_STORE != 1 && KR_END_STORE != 3
#error "KR_END_STORE is 0, 1 or 3"
#endif

// Eight fp32 values rounded to T and stored as one 16-byte write.
template <typename T>
__device__ __forceinline__ void store8(T* dst, float4 lo, float4 hi) {
  using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  T2 q[4];
  if constexpr (std::is_same_v<T, __half>) {
    q[0] = __floats2half2_rn(lo.x, lo.y);
    q[1] = __floats2half2_rn(lo.z, lo.w);
    q[2] = __floats2half2_rn(hi.x, hi.y);
    q[3] = __floats2half2_rn(hi.z, hi.w);
  } else {
    q[0] = __floats2bfloat162_rn(lo.x, lo.y);
    q[1] = __floats2bfloat162_rn(lo.z, lo.w);
    q[2] = __floats2bfloat162_rn(hi.x, hi.y);
    q[3] = __floats2bfloat162_rn(hi.z, hi.w);
  }
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(q);
}

__device__ __forceinline__ void add4(float4& sum, const float* p) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  sum.x += v.x;
  sum.y += v.y;
  sum.z += v.z;
  sum.w += v.w;
}

// The one-cluster-per-tile end of sum_own_rows for KR_END_STORE 1 and 3: the owned rows' sums over the slots, 8
// columns per thread and step, in slot order.
template <typename T, int BM, int BN, int kThreads, int kRStride>
__device__ __forceinline__ void sum_and_store(const float* recv, int rows_per, int own, const Share& sh, T* C, int M,
                                              int N, int tid) {
  static_assert(BN % 8 == 0, "8 columns per step");
  const int splits = sh.splits, m0 = sh.m0, n0 = sh.n0, row0 = sh.rank * rows_per;
  const int n8 = own * BN / 8;
  for (int g = tid; g < n8; g += kThreads) {
    const int rr = g / (BN / 8), c = (g % (BN / 8)) * 8;
    float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
    for (int s = 0; s < splits; ++s) {
      const float* p = recv + (s * rows_per + rr) * kRStride + c;
      add4(lo, p);
      add4(hi, p + 4);
    }
    if constexpr (KR_END_STORE == 1) {
      if (m0 + row0 + rr < M && n0 + c < N) store8<T>(C + size_t(m0 + row0 + rr) * N + n0 + c, lo, hi);  // N % 8 == 0
    } else {
      asm volatile("" ::"f"(lo.x), "f"(lo.y), "f"(lo.z), "f"(lo.w), "f"(hi.x), "f"(hi.y), "f"(hi.z), "f"(hi.w));
    }
  }
}

// After the partials have landed (KR_PUSH): block `rank` sums the rows it owns over the `splits` slots of its
// receive region, in slot order (the same bits on every run). With one cluster per tile (groups == 1) it writes
// them to C (KR_END_STORE above says how). With more, the clusters of a tile meet in global memory: each block
// stores its rows' sum in its group's slot of a workspace region (one region per tile and rank: groups x rows_per
// x BN fp32) and counts itself in on that region's counter; the block that arrives last sums the groups' slots in
// group order (the same bits whoever arrives last), writes C and sets the counter back to 0 for the next launch.
// No block waits for another, so no order of scheduling can deadlock.
template <typename T, int BM, int BN, int kThreads, int kRStride, bool kGrouped>
__device__ __forceinline__ void sum_own_rows(const float* recv, int rows_per, const Share& sh, T* C, int M, int N,
                                             float* ws, unsigned* counters, int tid) {
  const int splits = sh.splits, rank = sh.rank, m0 = sh.m0, n0 = sh.n0;
  // groups of 4 columns this block owns (rows_per rows, but fewer where splits does not divide BM; groups > 1
  // only with a power of two)
  const int own = rows_per * (rank + 1) <= BM ? rows_per : max(0, BM - rows_per * rank);
  if constexpr (!kGrouped && KR_END_STORE != 0) {
    sum_and_store<T, BM, BN, kThreads, kRStride>(recv, rows_per, own, sh, C, M, N, tid);
    return;
  }
  const int n4 = own * BN / 4;
  float4* region = reinterpret_cast<float4*>(ws) + (size_t(blockIdx.y) * splits + rank) * sh.groups * n4;
  for (int g = tid; g < n4; g += kThreads) {
    const int rr = g / (BN / 4), c = (g % (BN / 4)) * 4;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < splits; ++s) {
      const float4 v = *reinterpret_cast<const float4*>(recv + (s * rows_per + rr) * kRStride + c);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    const int r = rank * rows_per + rr;
    if constexpr (kGrouped) {
      __stcg(region + size_t(sh.group) * n4 + g, sum);  // to L2, where the last block reads it
    } else if (m0 + r < M && n0 + c < N) {
      store4<T>(C + size_t(m0 + r) * N + n0 + c, sum);  // N % 8 == 0
    }
  }
  if constexpr (kGrouped) {
    __syncthreads();  // every thread's stores to the slot come before thread 0 counts the block in
    int is_last = 0;
    if (tid == 0) {
      unsigned* counter = counters + size_t(blockIdx.y) * splits + rank;
      unsigned before;
      // acq_rel at GPU scope: releases this block's slot (ordered before by the barrier) and acquires the slots
      // of the groups counted before it
      asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(before) : "l"(counter) : "memory");
      is_last = before == unsigned(sh.groups - 1);
      if (is_last) *counter = 0u;  // every group has arrived: nothing else touches it in this launch
    }
    if (!__syncthreads_or(is_last)) return;
    for (int g = tid; g < n4; g += kThreads) {
      const int rr = g / (BN / 4), c = (g % (BN / 4)) * 4;
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int q = 0; q < sh.groups; ++q) {
        const float4 v = __ldcg(region + size_t(q) * n4 + g);  // from L2, past this SM's L1
        sum.x += v.x;
        sum.y += v.y;
        sum.z += v.z;
        sum.w += v.w;
      }
      const int r = rank * rows_per + rr;
      if (m0 + r < M && n0 + c < N) store4<T>(C + size_t(m0 + r) * N + n0 + c, sum);
    }
  }
}

#if !KR_WGMMA  // the ldmatrix and mma.sync main loop
// D (fp32) += A (16x16) * B (16x8) on the tensor cores; T is __half or __nv_bfloat16.
#define KR_MMA16816(AB)                                                                                    \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." AB "." AB ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "    \
               "{%8,%9}, {%0,%1,%2,%3};\n"                                                               \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                            \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
template <typename T>
__device__ __forceinline__ void mma16816(float* d, const uint32_t* a, const uint32_t* b) {
  if constexpr (std::is_same_v<T, __half>) {
    KR_MMA16816("f16");
  } else {
    KR_MMA16816("bf16");
  }
}
#undef KR_MMA16816

__device__ __forceinline__ void ldsm_x4(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

template <int BM, int BN, int BK, int STAGES, int WM, int WN>
struct Geometry {
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kAStride = BK + 8;  // padded rows (elements): ldmatrix reads without bank conflicts
  static constexpr int kBStride = BN + 8;
  static constexpr int kATile = BM * kAStride;
  static constexpr int kBTile = BK * kBStride;
  static constexpr int kRStride = BN + 4;  // fp32 partial tile rows, 16-byte aligned
  static constexpr size_t kPipeBytes = size_t(STAGES) * (kATile + kBTile) * 2;
  static constexpr size_t kReduceBytes = size_t(BM + kSpareRows) * kRStride * 4;
  // Pushed partials may arrive while this block still reads its pipeline: they get their own region.
  static constexpr size_t kSmemBytes = KR_PUSH ? kPipeBytes + kReduceBytes
                                               : (kPipeBytes > kReduceBytes ? kPipeBytes : kReduceBytes);
  static constexpr int kWarpM = BM / WM, kWarpN = BN / WN;  // one warp's share of the tile
  static constexpr int kMT = kWarpM / 16, kNT = kWarpN / 8;  // mma tiles per warp
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "a warp's share must be whole 16x16 mma pairs");
  static_assert(BK % 16 == 0 && BN % 8 == 0, "tile sizes");
  static constexpr int kALoads = BM * BK / 8 / kThreads, kBLoads = BK * BN / 8 / kThreads;  // per thread
  static_assert(kALoads * kThreads * 8 == BM * BK && kBLoads * kThreads * 8 == BK * BN, "whole 16-byte copies");
};

// The mma fragments of one 16-deep K step of a warp's share: A by ldmatrix, B by ldmatrix.trans.
template <class G, typename T>
__device__ __forceinline__ void load_fragments(uint32_t (&af)[G::kMT][4], uint32_t (&bf)[G::kNT][2], const T* a_s,
                                               const T* b_s, int kk, int wm, int wn, int lane) {
#pragma unroll
  for (int mt = 0; mt < G::kMT; ++mt)
    ldsm_x4(af[mt], a_s + (wm * G::kWarpM + mt * 16 + (lane & 15)) * G::kAStride + kk + (lane >> 4) * 8);
#pragma unroll
  for (int nt = 0; nt < G::kNT; nt += 2) {
    uint32_t r[4];
    ldsm_x4_trans(r, b_s + (kk + (lane & 15)) * G::kBStride + wn * G::kWarpN + nt * 8 + (lane >> 4) * 8);
    bf[nt][0] = r[0];
    bf[nt][1] = r[1];
    bf[nt + 1][0] = r[2];
    bf[nt + 1][1] = r[3];
  }
}

template <typename T, int BM, int BN, int BK, int STAGES, int WM, int WN, bool kGrouped>
__global__ void __launch_bounds__(WM* WN * 32)
    cluster_splitk(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K,
                   int tiles_n, float* __restrict__ ws, unsigned* __restrict__ counters) {
  using G = Geometry<BM, BN, BK, STAGES, WM, WN>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sA = reinterpret_cast<T*>(smem);
  T* sB = sA + STAGES * G::kATile;

  cg::cluster_group cluster = cg::this_cluster();
  const Share sh = block_share<BM, BN, BK, kGrouped>(cluster, K, tiles_n);
  const int splits = sh.splits, rank = sh.rank, m0 = sh.m0, n0 = sh.n0, kt0 = sh.kt0, nk = sh.nk;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
#if KR_PUSH
  // Shared memory of another block may be written only once that block runs: arrive now, wait before pushing.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
  float acc[G::kMT][G::kNT][4];
#pragma unroll
  for (int i = 0; i < G::kMT; ++i)
#pragma unroll
    for (int j = 0; j < G::kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  auto load_stage = [&](int stage, int kt) {
    const int kb = kt * BK;
    T* a_s = sA + stage * G::kATile;
    T* b_s = sB + stage * G::kBTile;
#pragma unroll
    for (int j = 0; j < G::kALoads; ++j) {
      const int c = tid + j * G::kThreads, r = c / (BK / 8), col = (c % (BK / 8)) * 8;
      const bool ok = m0 + r < M && kb + col < K;  // K % 8 == 0: a 16-byte chunk is all in or all out
      cp_async16(a_s + r * G::kAStride + col, ok ? A + size_t(m0 + r) * K + kb + col : A, ok);
    }
#pragma unroll
    for (int j = 0; j < G::kBLoads; ++j) {
      const int c = tid + j * G::kThreads, r = c / (BN / 8), col = (c % (BN / 8)) * 8;
      const bool ok = kb + r < K && n0 + col < N;
      cp_async16(b_s + r * G::kBStride + col, ok ? B + size_t(kb + r) * N + n0 + col : B, ok);
    }
  };

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nk) load_stage(s, kt0 + s);
    cp_async_commit();
  }
  for (int i = 0; i < nk; ++i) {
    cp_async_wait<STAGES - 2>();  // k-tile i has landed
    __syncthreads();              // ... for every thread, and every thread is done with k-tile i - 1
    if (i + STAGES - 1 < nk) load_stage((i + STAGES - 1) % STAGES, kt0 + i + STAGES - 1);
    cp_async_commit();
    const T* a_s = sA + (i % STAGES) * G::kATile;
    const T* b_s = sB + (i % STAGES) * G::kBTile;
    // Fragments double-buffered in registers: the next K step's ldmatrix overlaps this step's mma.
    uint32_t af[2][G::kMT][4], bf[2][G::kNT][2];
    load_fragments<G>(af[0], bf[0], a_s, b_s, 0, wm, wn, lane);
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      if (ks + 1 < BK / 16) load_fragments<G>(af[(ks + 1) & 1], bf[(ks + 1) & 1], a_s, b_s, (ks + 1) * 16, wm, wn, lane);
#pragma unroll
      for (int mt = 0; mt < G::kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < G::kNT; ++nt) mma16816<T>(acc[mt][nt], af[ks & 1][mt], bf[ks & 1][nt]);
    }
  }
#if KR_PUSH
  // Rows [o * rows_per, (o + 1) * rows_per) of the tile belong to block o (the last blocks may own fewer, or none).
  // Every block stores its partial of those rows into block o's receive region, slot `rank`: splits slots of
  // rows_per rows, one tile where splits divides BM.
  float* recv = reinterpret_cast<float*>(smem + G::kPipeBytes);
  const int rows_per = (BM + splits - 1) / splits;
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");  // every block of the cluster has started
#pragma unroll
  for (int mt = 0; mt < G::kMT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wm * G::kWarpM + mt * 16 + (lane >> 2) + half * 8;
      const int owner = r / rows_per;
      float* slot = cluster.map_shared_rank(recv, owner) + (rank * rows_per + r % rows_per) * G::kRStride;
#pragma unroll
      for (int nt = 0; nt < G::kNT; ++nt) {
        const int c = wn * G::kWarpN + nt * 8 + (lane & 3) * 2;
        *reinterpret_cast<float2*>(slot + c) = make_float2(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
      }
    }
  cluster.sync();  // every partial has landed in its owner's shared memory; nothing remote is touched after

  sum_own_rows<T, BM, BN, G::kThreads, G::kRStride, kGrouped>(recv, rows_per, sh, C, M, N, ws, counters, tid);
#else
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory now holds the partial tile instead

  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int mt = 0; mt < G::kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < G::kNT; ++nt) {
      const int r = wm * G::kWarpM + mt * 16 + (lane >> 2), c = wn * G::kWarpN + nt * 8 + (lane & 3) * 2;
      *reinterpret_cast<float2*>(red + r * G::kRStride + c) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
      *reinterpret_cast<float2*>(red + (r + 8) * G::kRStride + c) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
    }
  cluster.sync();  // every block's partial tile is written and visible to the cluster

  // Block `rank` sums every splits-th group of 4 columns over the cluster, in rank order, and writes it.
  for (int g = rank * G::kThreads + tid; g < BM * BN / 4; g += splits * G::kThreads) {
    const int r = g / (BN / 4), c = (g % (BN / 4)) * 4;
    float* mine = red + r * G::kRStride + c;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int s = 0; s < splits; ++s) {
      const float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(mine, s));
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    if (m0 + r < M && n0 + c < N) store4<T>(C + size_t(m0 + r) * N + n0 + c, sum);  // N % 8 == 0
  }
  cluster.sync();  // no block leaves while another may still read its shared memory
#endif
}

#else  // KR_WGMMA
// The same cluster split-K with a wgmma main loop (KR_WGMMA=1): one warpgroup per 64 rows of the tile issues
// asynchronous m64nBNk16 wgmma straight from shared memory, which the cp.async pipeline fills in the 128-byte
// swizzled layouts wgmma reads (A K-major, B N-major; CuTe's layouts and MMA atoms). No ldmatrix, no register
// fragments of A and B: the tensor cores run at their Hopper rate, and one batch of wgmma stays in flight
// while the next K step's copies are issued.
template <typename T, int BM, int BN, int BK, int STAGES>
struct WgGeometry {
  using E = std::conditional_t<std::is_same_v<T, __half>, cute::half_t, cute::bfloat16_t>;
  static constexpr int kBM = BM, kBN = BN;
  static constexpr int kWarpgroups = BM / 64;
  static constexpr int kThreads = kWarpgroups * 128;
  static_assert(BM % 64 == 0 && BN % 64 == 0 && BK % 64 == 0, "whole 128-byte swizzle atoms");
  static_assert(STAGES >= 3, "a K step in flight on the tensor cores and at least one being copied");
  using SmemA = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<E>{},
                                             cute::make_shape(cute::Int<BM>{}, cute::Int<BK>{}, cute::Int<STAGES>{})));
  // B's atoms (64 columns x 8 K rows) run along K first: each 64-column half of the tile is one contiguous block,
  // which one tensor-map copy fills (along N first, a copy could fill only one 1 KiB atom).
  using SmemB = decltype(cute::tile_to_shape(cute::GMMA::Layout_MN_SW128_Atom<E>{},
                                             cute::make_shape(cute::Int<BN>{}, cute::Int<BK>{}, cute::Int<STAGES>{}),
                                             cute::Step<cute::_2, cute::_1, cute::_3>{}));
  using Mma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<E, E, float, cute::Shape<cute::Int<64>, cute::Int<BN>, cute::Int<16>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      cute::Layout<cute::Shape<cute::Int<kWarpgroups>, cute::_1, cute::_1>>{}));
  static constexpr int kRStride = BN + 4;
  static constexpr uint32_t kAStage = BM * BK * 2, kBStage = BK * BN * 2;  // bytes of one stage
  static constexpr size_t kABytes = size_t(STAGES) * kAStage, kPipeBytes = kABytes + size_t(STAGES) * kBStage;
  static constexpr size_t kAlign = 1024;  // a 128-byte swizzle repeats every 1024 bytes: its atoms start there
  static constexpr size_t kRecvBytes = size_t(BM + kSpareRows) * kRStride * 4;  // partial sums received (fp32 rows)
  // after the receive region: KR_TMA's full and empty mbarrier per stage, then the receive mbarrier of the
  // asynchronous exchanges (the bulk one, KR_ST_ASYNC)
  static constexpr size_t kStageBarBytes = KR_TMA ? 2 * STAGES * sizeof(uint64_t) : 0;
  static constexpr size_t kBarBytes = kStageBarBytes + sizeof(uint64_t);
  static constexpr size_t kSmemBytes = kAlign + kPipeBytes + kRecvBytes + kBarBytes;
  static constexpr int kALoads = BM * BK / 8 / kThreads, kBLoads = BK * BN / 8 / kThreads;  // per thread
  static_assert(kALoads * kThreads * 8 == BM * BK && kBLoads * kThreads * 8 == BK * BN, "whole 16-byte copies");
};

// One K step of the wgmma kernels: the batch of warpgroup MMAs over `stage` is issued, then the batch before it
// is waited for (this one may still run).
template <class Mma, class FA, class FB, class Acc>
__device__ __forceinline__ void wg_step(Mma& mma, const FA& tCrA, const FB& tCrB, Acc& acc, int stage) {
  using namespace cute;
  warpgroup_fence_operand(acc);
  warpgroup_arrive();
  gemm(mma, tCrA(_, _, _, stage), tCrB(_, _, _, stage), acc);
  warpgroup_commit_batch();
  warpgroup_wait<1>();
  warpgroup_fence_operand(acc);
}

// The end of both wgmma kernels: each block pushes its partial rows to the blocks that own them (as the mma.sync
// kernel does), then each owner sums its rows and writes them to C (or, with several clusters per tile, meets
// the other clusters' sums in the workspace).
// The receive mbarrier of KR_ST_ASYNC, after the stage barriers.
template <typename G>
__device__ __forceinline__ uint64_t* recv_barrier(unsigned char* smem) {
  return reinterpret_cast<uint64_t*>(smem + G::kPipeBytes + G::kRecvBytes + G::kStageBarBytes);
}

// Thread 0, before the cluster's first barrier: the receive mbarrier, expecting every block's partial of this
// block's rows (the asynchronous exchanges only).
template <typename G, bool kBulk>
__device__ __forceinline__ void init_receive(unsigned char* smem, const Share& sh) {
  if constexpr (kBulk || KR_ST_ASYNC != 0) {
    // the bulk exchange copies whole padded rows (kRStride floats); KR_ST_ASYNC stores the BN values of each row
    const uint32_t row_bytes = (kBulk ? G::kRStride : G::kBN) * 4;
    const uint32_t bytes = uint32_t(owned_rows(G::kBM, sh.splits, sh.rank)) * row_bytes * sh.splits;
    recv_barrier_init(recv_barrier<G>(smem), bytes);
  }
}

template <typename T, typename G, bool kGrouped, bool kBulk, class Acc, class Thr>
__device__ __forceinline__ void wg_push_and_sum(const Acc& acc, const Thr& thr, cg::cluster_group& cluster,
                                                unsigned char* smem, const Share& sh, T* C, int M, int N,
                                                float* ws, unsigned* counters, int tid) {
  using namespace cute;
  constexpr int BM = G::kBM, BN = G::kBN;
  float* recv = reinterpret_cast<float*>(smem + G::kPipeBytes);
  const int rows_per = (BM + sh.splits - 1) / sh.splits;  // as the mma.sync kernel: the last may own fewer
  Tensor coord = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));  // (row, column) of each value
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");  // every block of the cluster has started
  if constexpr (kBulk) {
    static_assert(G::kPipeBytes >= size_t(BM) * G::kRStride * 4, "the partial tile is staged in the pipeline");
    float* mine = reinterpret_cast<float*>(smem);  // this block's partial tile, rows of kRStride floats
    __syncthreads();  // every warpgroup's tensor-core reads of the pipeline are done
#pragma unroll
    for (int v = 0; v < size(acc); v += 2) {
      const int r = get<0>(coord(v)), c = get<1>(coord(v));
      *reinterpret_cast<float2*>(mine + r * G::kRStride + c) = make_float2(acc(v), acc(v + 1));
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the copy engine sees these writes
    __syncthreads();
    if (tid < sh.splits) {  // thread o copies owner o's rows to it
      const int owner = tid, rows = owned_rows(BM, sh.splits, owner);
      if (rows > 0) {
        const uint32_t row_bytes = G::kRStride * 4;
        const uint32_t src = smem_addr(mine) + uint32_t(owner * rows_per) * row_bytes;
        const uint32_t dst = cluster_addr(smem_addr(recv) + uint32_t(sh.rank * rows_per) * row_bytes, owner);
        bulk_copy_to_peer(dst, src, uint32_t(rows) * row_bytes, cluster_addr(smem_addr(recv_barrier<G>(smem)), owner));
      }
    }
    recv_barrier_wait(recv_barrier<G>(smem));  // every block's partial of this block's rows has landed
    sum_own_rows<T, BM, BN, G::kThreads, G::kRStride, kGrouped>(recv, rows_per, sh, C, M, N, ws, counters, tid);
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");  // this block's copies are all read
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    return;
  }
  if constexpr (KR_ST_ASYNC != 0) {
    const uint32_t recv_at = smem_addr(recv), bar_at = smem_addr(recv_barrier<G>(smem));
#pragma unroll
    for (int v = 0; v < size(acc); v += 2) {  // values 2j and 2j + 1 are neighbours in one row
      const int r = get<0>(coord(v)), c = get<1>(coord(v)), owner = r / rows_per;
      const uint32_t slot = recv_at + uint32_t(((sh.rank * rows_per + r % rows_per) * G::kRStride + c) * 4);
      store_async2(cluster_addr(slot, owner), acc(v), acc(v + 1), cluster_addr(bar_at, owner));
    }
    recv_barrier_wait(recv_barrier<G>(smem));  // every block's partial of this block's rows has landed
    sum_own_rows<T, BM, BN, G::kThreads, G::kRStride, kGrouped>(recv, rows_per, sh, C, M, N, ws, counters, tid);
    if constexpr (KR_ST_ASYNC == 2) {
      asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
      asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    }
    return;
  }
  if constexpr (KR_PROBE_SKIP != 5 && KR_PROBE_SKIP != 7) {
#pragma unroll
    for (int v = 0; v < size(acc); v += 2) {  // values 2j and 2j + 1 are neighbours in one row
      const int r = get<0>(coord(v)), c = get<1>(coord(v));
      float* slot = cluster.map_shared_rank(recv, r / rows_per) + (sh.rank * rows_per + r % rows_per) * G::kRStride;
      *reinterpret_cast<float2*>(slot + c) = make_float2(acc(v), acc(v + 1));
    }
  }
  if constexpr (KR_PROBE_SKIP != 7) cluster.sync();  // every partial has landed in its owner's shared memory
  if constexpr (KR_PROBE_SKIP != 6)
    sum_own_rows<T, BM, BN, G::kThreads, G::kRStride, kGrouped>(recv, rows_per, sh, C, M, N, ws, counters, tid);
}

template <typename T, int BM, int BN, int BK, int STAGES, bool kGrouped, bool kBulk>
__global__ void __launch_bounds__(BM / 64 * 128)
    cluster_splitk_wg(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K,
                      int tiles_n, float* __restrict__ ws, unsigned* __restrict__ counters) {
  using namespace cute;
  using G = WgGeometry<T, BM, BN, BK, STAGES>;
  using E = typename G::E;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((G::kAlign - smem_addr(smem_raw) % G::kAlign) % G::kAlign);
  E* a_base = reinterpret_cast<E*>(smem);
  E* b_base = reinterpret_cast<E*>(smem + G::kABytes);
  Tensor sA = make_tensor(make_smem_ptr(a_base), typename G::SmemA{});  // (BM, BK, STAGES)
  Tensor sB = make_tensor(make_smem_ptr(b_base), typename G::SmemB{});  // (BN, BK, STAGES)

  cg::cluster_group cluster = cg::this_cluster();
  const Share sh = block_share<BM, BN, BK, kGrouped>(cluster, K, tiles_n);
  const int m0 = sh.m0, n0 = sh.n0, kt0 = sh.kt0, nk = sh.nk;
  const int tid = threadIdx.x;
  if constexpr (kBulk || KR_ST_ASYNC != 0) {
    if (tid == 0) init_receive<G, kBulk>(smem, sh);
    __syncthreads();
  }
  // Shared memory of another block may be written only once that block runs: arrive now, wait before pushing.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");

  typename G::Mma mma;
  ThrMMA thr = mma.get_thread_slice(tid);
  Tensor tCrA = thr.make_fragment_A(thr.partition_A(sA));  // shared memory descriptors, (MMA, MMA_M, MMA_K, STAGES)
  Tensor tCrB = thr.make_fragment_B(thr.partition_B(sB));
  Tensor acc = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});
  clear(acc);

  // The copies of one K step: 16-byte chunks (8 elements along K for A, along N for B, which the swizzle keeps
  // together) placed where the swizzled layouts put them. A thread copies the same column chunk of the same
  // rows in every K step, so its shared-memory offsets (stage 0; a stage is a whole number of swizzle
  // repeats further) and its row checks are worked out once, and its global pointers only advance.
  constexpr int kAStep = G::kThreads / (BK / 8), kBStep = G::kThreads / (BN / 8);  // rows between its chunks
  static_assert(G::kThreads % (BK / 8) == 0 && G::kThreads % (BN / 8) == 0, "a fixed column per thread");
  constexpr uint32_t kAStage = G::kAStage, kBStage = G::kBStage;
  static_assert(kAStage % G::kAlign == 0 && kBStage % G::kAlign == 0, "stages keep the swizzle phase");
  const int a_r0 = tid / (BK / 8), a_col = (tid % (BK / 8)) * 8;
  const int b_r0 = tid / (BN / 8), b_col = (tid % (BN / 8)) * 8;
  uint32_t a_dst[G::kALoads], b_dst[G::kBLoads], a_rows = 0;  // bit j of a_rows: chunk j's row is inside A
#pragma unroll
  for (int j = 0; j < G::kALoads; ++j) {
    a_dst[j] = smem_addr(&sA(a_r0 + j * kAStep, a_col, 0));
    a_rows |= uint32_t(m0 + a_r0 + j * kAStep < M) << j;
  }
#pragma unroll
  for (int j = 0; j < G::kBLoads; ++j) b_dst[j] = smem_addr(&sB(b_col, b_r0 + j * kBStep, 0));
  const bool b_col_ok = n0 + b_col < N;
  const T* a_src = A + size_t(m0 + a_r0) * K + size_t(kt0) * BK + a_col;  // chunk 0 of K step 0
  const T* b_src = B + (size_t(kt0) * BK + b_r0) * N + n0 + b_col;
  const size_t a_jump = size_t(kAStep) * K, b_jump = size_t(kBStep) * N;  // between a thread's chunks

  auto load_stage = [&](int stage, int i) {  // K step i of this block's slice
    const int kb = (kt0 + i) * BK;
    const bool a_k_ok = kb + a_col < K;  // K % 8 == 0: a 16-byte chunk is all in or all out
    const T* a_i = a_src + size_t(i) * BK;
    const T* b_i = b_src + size_t(i) * BK * N;
#pragma unroll
    for (int j = 0; j < G::kALoads; ++j) {
      const bool ok = a_k_ok && ((a_rows >> j) & 1);
      cp_async16_to(a_dst[j] + stage * kAStage, ok ? a_i + j * a_jump : A, ok);
    }
#pragma unroll
    for (int j = 0; j < G::kBLoads; ++j) {
      const bool ok = b_col_ok && kb + b_r0 + j * kBStep < K;
      cp_async16_to(b_dst[j] + stage * kBStage, ok ? b_i + j * b_jump : B, ok);
    }
  };

  // Copies run STAGES - 2 K steps ahead: the stage being refilled was read by the wgmma batch two steps back,
  // which every warpgroup has waited for before the barrier that precedes the refill.
#pragma unroll
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < nk) load_stage(s, s);
    cp_async_commit();
  }
  for (int i = 0; i < nk; ++i) {
    cp_async_wait<STAGES - 3>();  // this thread's copies of K step i have landed
#if KR_PROXY_FENCE
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // ... and are visible to the tensor cores
#endif
    __syncthreads();  // ... every thread's; and every warpgroup is done with K step i - 2
    if (i + STAGES - 2 < nk) load_stage((i + STAGES - 2) % STAGES, i + STAGES - 2);
    cp_async_commit();
    wg_step(mma, tCrA, tCrB, acc, i % STAGES);  // K step i - 1 is done; step i may still run
  }
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc);

  wg_push_and_sum<T, G, kGrouped, kBulk>(acc, thr, cluster, smem, sh, C, M, N, ws, counters, tid);
}

#if KR_TMA
// The same kernel with its stages filled by the bulk tensor copy engine (KR_TMA=1). Thread 0 issues a stage's
// copy of the A tile and of the B tile (their tensor maps are kernel parameters), which complete on the
// stage's full mbarrier; the copy engine writes the swizzled layouts wgmma reads and fills what lies past M,
// N or K with zeros. A stage is refilled once every thread has arrived on its empty mbarrier, which each does
// after the wgmma batch that read it is done: STAGES - 1 K steps are copied ahead.
template <typename T, int BM, int BN, int BK, int STAGES>
struct TmaMaps {
  using G = WgGeometry<T, BM, BN, BK, STAGES>;
  using E = typename G::E;
  // A is K-major (M, K), stride (K, 1); B is seen as N-major (N, K), stride (1, N): row-major K x N.
  static auto a_map(const void* a, int m, int k) {
    using namespace cute;
    auto g = make_tensor(make_gmem_ptr(static_cast<const E*>(a)), make_shape(m, k), make_stride(k, Int<1>{}));
    return make_tma_atom(SM90_TMA_LOAD{}, g, typename G::SmemA{}(_, _, 0), make_shape(Int<BM>{}, Int<BK>{}));
  }
  static auto b_map(const void* b, int n, int k) {
    using namespace cute;
    auto g = make_tensor(make_gmem_ptr(static_cast<const E*>(b)), make_shape(n, k), make_stride(Int<1>{}, n));
    return make_tma_atom(SM90_TMA_LOAD{}, g, typename G::SmemB{}(_, _, 0), make_shape(Int<BN>{}, Int<BK>{}));
  }
  using A = decltype(a_map(nullptr, 0, 0));
  using B = decltype(b_map(nullptr, 0, 0));
};

template <typename T, int BM, int BN, int BK, int STAGES, bool kGrouped, bool kBulk>
__global__ void __launch_bounds__(BM / 64 * 128)
    cluster_splitk_tma(
#if KR_SCALARS_FIRST
                       T* __restrict__ C, int M, int N, int K, int tiles_n,
                       float* __restrict__ ws, unsigned* __restrict__ counters,
                       CUTE_GRID_CONSTANT typename TmaMaps<T, BM, BN, BK, STAGES>::A const tma_a,
                       CUTE_GRID_CONSTANT typename TmaMaps<T, BM, BN, BK, STAGES>::B const tma_b) {
#else
                       CUTE_GRID_CONSTANT typename TmaMaps<T, BM, BN, BK, STAGES>::A const tma_a,
                       CUTE_GRID_CONSTANT typename TmaMaps<T, BM, BN, BK, STAGES>::B const tma_b,
                       T* __restrict__ C, int M, int N, int K, int tiles_n,
                       float* __restrict__ ws, unsigned* __restrict__ counters) {
#endif
  using namespace cute;
  using G = WgGeometry<T, BM, BN, BK, STAGES>;
  using E = typename G::E;
  using Full = cutlass::arch::ClusterTransactionBarrier;
  using Empty = cutlass::arch::ClusterBarrier;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((G::kAlign - smem_addr(smem_raw) % G::kAlign) % G::kAlign);
  Tensor sA = make_tensor(make_smem_ptr(reinterpret_cast<E*>(smem)), typename G::SmemA{});  // (BM, BK, STAGES)
  Tensor sB = make_tensor(make_smem_ptr(reinterpret_cast<E*>(smem + G::kABytes)), typename G::SmemB{});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + G::kPipeBytes + G::kRecvBytes);
  uint64_t* empty = full + STAGES;

  cg::cluster_group cluster = cg::this_cluster();
  const Share sh = block_share<BM, BN, BK, kGrouped>(cluster, K, tiles_n);
  const int m0 = sh.m0, n0 = sh.n0, kt0 = sh.kt0;
  const int nk = KR_PROBE_SKIP == 1 || KR_PROBE_SKIP >= 5 ? 0 : sh.nk;
  const int tid = threadIdx.x;
  if constexpr (KR_PROBE_SKIP == 3) return;
#if KR_PREFETCH_TMAP
  if (tid == 0) {
    cute::prefetch_tma_descriptor(tma_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(tma_b.get_tma_descriptor());
  }
#endif
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      Full::init(&full[s], 1);
      Empty::init(&empty[s], G::kThreads);
    }
    cutlass::arch::fence_barrier_init();  // the barriers are initialised before the copy engine signals them
    init_receive<G, kBulk>(smem, sh);
  }
  __syncthreads();
  // Shared memory of another block may be written only once that block runs: arrive now, wait before pushing.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  if constexpr (KR_PROBE_SKIP == 4) {
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    return;
  }

  // This block's tiles of A and B along K: (BM, BK, K steps) and (BN, BK, K steps) in the tensor maps'
  // coordinates; a stage takes one copy of each.
  Tensor gA = local_tile(tma_a.get_tma_tensor(make_shape(M, K)), Shape<Int<BM>, Int<BK>>{}, make_coord(m0 / BM, _));
  Tensor gB = local_tile(tma_b.get_tma_tensor(make_shape(N, K)), Shape<Int<BN>, Int<BK>>{}, make_coord(n0 / BN, _));
  auto [tAg, tAs] = tma_partition(tma_a, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sA), group_modes<0, 2>(gA));
  auto [tBg, tBs] = tma_partition(tma_b, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sB), group_modes<0, 2>(gB));
  auto issue = [&](int stage, int i) {  // thread 0: K step i of this block's slice into `stage`
    Full::arrive_and_expect_tx(&full[stage], G::kAStage + G::kBStage);
    copy(tma_a.with(full[stage]), tAg(_, kt0 + i), tAs(_, stage));
    copy(tma_b.with(full[stage]), tBg(_, kt0 + i), tBs(_, stage));
  };
  if (tid == 0) {
    for (int s = 0; s < STAGES && s < nk; ++s) issue(s, s);
  }

  typename G::Mma mma;
  ThrMMA thr = mma.get_thread_slice(tid);
  Tensor tCrA = thr.make_fragment_A(thr.partition_A(sA));  // shared memory descriptors, (MMA, MMA_M, MMA_K, STAGES)
  Tensor tCrB = thr.make_fragment_B(thr.partition_B(sB));
  Tensor acc = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});
  clear(acc);

  for (int i = 0; i < nk; ++i) {
    const int stage = i % STAGES;
    Full::wait(&full[stage], (i / STAGES) & 1);  // K step i has landed
    wg_step(mma, tCrA, tCrB, acc, stage);  // K step i - 1 is done; step i may still run
    if (i > 0) {
      const int prev = (i - 1) % STAGES;
      Empty::arrive(&empty[prev]);  // this thread is done with step i - 1's stage
      if (tid == 0 && i - 1 + STAGES < nk) {
        Empty::wait(&empty[prev], ((i - 1) / STAGES) & 1);  // ... and so is every thread: refill it
        issue(prev, i - 1 + STAGES);
      }
      __syncwarp();
    }
  }
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc);
#if KR_PROBE_SKIP == 2
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  if (sh.rank == 0) {
    Tensor coord = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    for (int v = 0; v < size(acc); ++v) {
      const int r = get<0>(coord(v)), c = get<1>(coord(v));
      if (m0 + r < M && n0 + c < N) C[size_t(m0 + r) * N + n0 + c] = static_cast<T>(acc(v));
    }
  }
#else
  wg_push_and_sum<T, G, kGrouped, kBulk>(acc, thr, cluster, smem, sh, C, M, N, ws, counters, tid);
#endif
}
#endif  // KR_TMA
#endif  // KR_WGMMA

template <typename T>
struct Config {
#if KR_TMA
  template <bool kGrouped, bool kBulk>
  static constexpr auto kernel = cluster_splitk_tma<T, KR_BM, KR_BN, KR_BK, KR_STAGES, kGrouped, kBulk>;
  using G = WgGeometry<T, KR_BM, KR_BN, KR_BK, KR_STAGES>;
#elif KR_WGMMA
  template <bool kGrouped, bool kBulk>
  static constexpr auto kernel = cluster_splitk_wg<T, KR_BM, KR_BN, KR_BK, KR_STAGES, kGrouped, kBulk>;
  using G = WgGeometry<T, KR_BM, KR_BN, KR_BK, KR_STAGES>;
#else
  template <bool kGrouped, bool kBulk>  // the mma.sync loop has the plain exchange only
  static constexpr auto kernel = cluster_splitk<T, KR_BM, KR_BN, KR_BK, KR_STAGES, KR_WM, KR_WN, kGrouped>;
  using G = Geometry<KR_BM, KR_BN, KR_BK, KR_STAGES, KR_WM, KR_WN>;
#endif

  static cudaError_t prepare() {  // per device: shared memory above 48 KiB, clusters above 8
    int dev = 0;
    cudaGetDevice(&dev);
    static unsigned long long ready = 0;  // one bit per device
    if (dev < 64 && (ready >> dev) & 1) return cudaSuccess;
    cudaError_t err = cudaSuccess;
    for (auto fn : {kernel<false, false>, kernel<true, false>, kernel<false, true>, kernel<true, true>}) {
      if (err == cudaSuccess)
        err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(G::kSmemBytes));
      if (err == cudaSuccess) err = cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    }
    if (err == cudaSuccess && dev < 64) ready |= 1ull << dev;
    return err;
  }

  static void launch_config(cudaLaunchConfig_t& cfg, cudaLaunchAttribute* attr, int m, int n, int splits,
                            int groups, cudaStream_t stream) {
    cfg = cudaLaunchConfig_t{};
    cfg.gridDim = dim3(splits * groups, tiles(m, n), 1);
    cfg.blockDim = dim3(G::kThreads, 1, 1);
    cfg.dynamicSmemBytes = G::kSmemBytes;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = splits;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }

  static long long tiles(int m, int n) {
    return static_cast<long long>((m + KR_BM - 1) / KR_BM) * ((n + KR_BN - 1) / KR_BN);
  }

  // The workspace of `groups` > 1 clusters per tile: fp32 elements (each tile's sum from every group) and
  // counters (one per tile and rank; all 0 before the first launch, and every launch leaves them 0).
  static void workspace(int m, int n, int splits, int groups, long long* floats, long long* counters) {
    *floats = groups > 1 ? tiles(m, n) * groups * KR_BM * KR_BN : 0;
    *counters = groups > 1 ? tiles(m, n) * splits : 0;
  }

  // 0 when the problem can run: 1 shape or alignment, 2 split count, 3 too many tiles, 4 a cluster of this
  // size with this much shared memory cannot be placed on the GPU, 5 group count, 100 + cudaError otherwise.
  static int can_implement(int m, int n, int k, int splits, int groups) {
    if (m <= 0 || n <= 0 || k <= 0 || k % 8 || n % 8) return 1;
    // a power of two up to 16, or (one cluster per tile) 3, 5, 6, 7 or 9 to 13, whose rows_per x splits receive
    // rows fit
    if (splits < 1 || splits > 16) return 2;
    if ((splits & (splits - 1)) && (splits > 13 || groups != 1)) return 2;
    if ((KR_BM + splits - 1) / splits * splits > KR_BM + kSpareRows) return 2;
    if (tiles(m, n) > 65535) return 3;
    if (groups < 1 || groups > 1024 || (groups > 1 && !KR_PUSH)) return 5;  // the pulled reduction has no groups
    const int clusters = max_clusters(splits, groups);
    return clusters < 0 ? 100 - clusters : clusters > 0 ? 0 : 4;
  }

  // How many clusters of `splits` blocks the current device holds at once (its cluster placement: a cluster
  // stays within one GPC), or -cudaError.
  static int max_clusters(int splits, int groups) {
    cudaError_t err = prepare();
    if (err != cudaSuccess) return -static_cast<int>(err);
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[1];
    launch_config(cfg, attr, 1, 1, splits, groups, nullptr);
    int clusters = 0;
    err = groups > 1 ? cudaOccupancyMaxActiveClusters(&clusters, kernel<true, false>, &cfg)
                     : cudaOccupancyMaxActiveClusters(&clusters, kernel<false, false>, &cfg);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return -static_cast<int>(err);
    }
    return clusters;
  }

  static int run(const void* a, const void* b, void* c, int m, int n, int k, int splits, int groups, void* ws,
                 void* counters, cudaStream_t stream) {
    if (groups > 1 && (ws == nullptr || counters == nullptr)) return 6;
    cudaError_t err = prepare();
    if (err != cudaSuccess) return 100 + static_cast<int>(err);
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[1];
    launch_config(cfg, attr, m, n, splits, groups, stream);
    const int tiles_n = (n + KR_BN - 1) / KR_BN;
    float* w = static_cast<float*>(ws);
    unsigned* cnt = static_cast<unsigned*>(counters);
    // one cluster per tile: the kernel without the workspace round (the same as before groups existed)
    const bool bulk = splits >= KR_BULK_MIN_SPLITS;  // the exchange of partials (KR_BULK_MIN_SPLITS above)
    const auto fn = groups > 1 ? (bulk ? kernel<true, true> : kernel<true, false>)
                               : (bulk ? kernel<false, true> : kernel<false, false>);
#if KR_TMA
    using Maps = TmaMaps<T, KR_BM, KR_BN, KR_BK, KR_STAGES>;  // tensor maps of this call's A and B
#if KR_SCALARS_FIRST
    err = cudaLaunchKernelEx(&cfg, fn, static_cast<T*>(c), m, n, k, tiles_n, w, cnt, Maps::a_map(a, m, k),
                             Maps::b_map(b, n, k));
#else
    err = cudaLaunchKernelEx(&cfg, fn, Maps::a_map(a, m, k), Maps::b_map(b, n, k), static_cast<T*>(c), m, n, k,
                             tiles_n, w, cnt);
#endif
#else
    err = cudaLaunchKernelEx(&cfg, fn, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c), m, n,
                             k, tiles_n, w, cnt);
#endif
    return err == cudaSuccess ? 0 : 100 + static_cast<int>(err);
  }
};

}  // namespace

#define KR_CAT2(a, b) a##b
#define KR_CAT(a, b) KR_CAT2(a, b)
#define KR_FN(suffix) KR_CAT(KR_NAME, suffix)

extern "C" {

int KR_FN(_can_implement)(int m, int n, int k, int splits, int groups, int bf16) {
  return bf16 ? Config<__nv_bfloat16>::can_implement(m, n, k, splits, groups)
              : Config<__half>::can_implement(m, n, k, splits, groups);
}

// Clusters of `splits` blocks (one output tile's K) that the current device holds at once, or -cudaError.
int KR_FN(_max_clusters)(int splits, int groups, int bf16) {
  return bf16 ? Config<__nv_bfloat16>::max_clusters(splits, groups) : Config<__half>::max_clusters(splits, groups);
}

void KR_FN(_workspace)(int m, int n, int splits, int groups, long long* floats, long long* counters) {
  Config<__half>::workspace(m, n, splits, groups, floats, counters);
}

// Launches on `stream`; 0 on success, 6 without the workspace that groups > 1 needs, else 100 + the cudaError
// of the launch.
int KR_FN(_run)(const void* a, const void* b, void* c, int m, int n, int k, int splits, int groups, void* ws,
                void* counters, int bf16, cudaStream_t stream) {
  return bf16 ? Config<__nv_bfloat16>::run(a, b, c, m, n, k, splits, groups, ws, counters, stream)
              : Config<__half>::run(a, b, c, m, n, k, splits, groups, ws, counters, stream);
}

}  // extern "C"
