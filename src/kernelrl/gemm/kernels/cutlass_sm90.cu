// One CUTLASS 3.x SM90 GEMM configuration (TMA + wgmma, warp-specialised), built once per configuration
// with runtime M, N, K.  C (M x N, row-major) = A (M x K, row-major) * B (K x N, row-major), fp32 accumulation.
// The configuration comes from -D macros: KR_NAME, KR_TM, KR_TN, KR_TK, KR_CM, KR_CN, KR_PINGPONG, KR_STREAMK,
// KR_EPI_N, KR_BF16.  Exposes a C ABI (no C++ types cross the boundary) so Python can call it through ctypes.
// KR_EPI_N (0: CUTLASS's choice, 64 x 32 for ping-pong and 128 x 32 for cooperative kernels): the columns of the
// epilogue's subtile, each written to shared memory and stored by the copy engine in turn (its rows: 64 for
// ping-pong, 128 for cooperative kernels). Fewer, larger subtiles mean fewer waits on the stores in flight.
#include <cuda_runtime.h>
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/util/packed_stride.hpp"

using namespace cute;

#if KR_BF16
using Element = cutlass::bfloat16_t;
#else
using Element = cutlass::half_t;
#endif
using RowMajor = cutlass::layout::RowMajor;
constexpr int kAlign = 8;  // 16 bytes of 16-bit elements: TMA's alignment
using TileShape = Shape<Int<KR_TM>, Int<KR_TN>, Int<KR_TK>>;
using ClusterShape = Shape<Int<KR_CM>, Int<KR_CN>, _1>;
#if KR_PINGPONG
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#else
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#endif
#if KR_STREAMK
using Scheduler = cutlass::gemm::StreamKScheduler;
#else
using Scheduler = cutlass::gemm::PersistentScheduler;
#endif

#ifndef KR_EPI_N
#define KR_EPI_N 0
#endif
#if KR_EPI_N
using EpilogueTile = Shape<Int<KR_PINGPONG ? 64 : 128>, Int<KR_EPI_N>>;
#else
using EpilogueTile = cutlass::epilogue::collective::EpilogueTileAuto;
#endif

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    EpilogueTile, float, float,
    void, RowMajor, kAlign, Element, RowMajor, kAlign, EpilogueSchedule>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, RowMajor, kAlign, Element, RowMajor, kAlign, float,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                        CollectiveEpilogue, Scheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

namespace {

int sm_count() {
  static int count = 0;
  if (count == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
  }
  return count;
}

// raster: 0 heuristic, 1 along M, 2 along N.  decomposition (stream-K scheduler only): 0 heuristic,
// 1 data-parallel, 2 split-K (with `splits`), 3 stream-K.
typename Gemm::Arguments make_args(const void* a, const void* b, void* c, int m, int n, int k, int splits,
                                   int raster, int swizzle, int decomposition) {
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideC = typename Gemm::GemmKernel::StrideC;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  auto sa = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(m, k, 1));
  auto sb = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(n, k, 1));
  auto sc = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(m, n, 1));
  auto sd = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(m, n, 1));
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {m, n, k, 1},
      {static_cast<const Element*>(a), sa, static_cast<const Element*>(b), sb},
      {{1.0f, 0.0f}, nullptr, sc, static_cast<Element*>(c), sd}};
  args.hw_info.device_id = 0;
  args.hw_info.sm_count = sm_count();
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.raster_order = raster == 1 ? Raster::AlongM : (raster == 2 ? Raster::AlongN : Raster::Heuristic);
  args.scheduler.max_swizzle_size = swizzle;
#if KR_STREAMK
  using Decomp = cutlass::gemm::kernel::detail::DecompositionMode;
  args.scheduler.splits = splits;
  args.scheduler.decomposition_mode = decomposition == 1   ? Decomp::DataParallel
                                      : decomposition == 2 ? Decomp::SplitK
                                      : decomposition == 3 ? Decomp::StreamK
                                                           : Decomp::Heuristic;
#else
  (void)splits;
  (void)decomposition;
#endif
  return args;
}

}  // namespace

#define KR_CAT2(a, b) a##b
#define KR_CAT(a, b) KR_CAT2(a, b)
#define KR_FN(suffix) KR_CAT(KR_NAME, suffix)

extern "C" {

// Bytes of workspace this configuration needs for the problem; 0 when none.
size_t KR_FN(_workspace)(int m, int n, int k, int splits, int raster, int swizzle, int decomposition) {
  auto args = make_args(nullptr, nullptr, nullptr, m, n, k, splits, raster, swizzle, decomposition);
  return Gemm::get_workspace_size(args);
}

// 0 when the configuration can run the problem, else a cutlass::Status code.
int KR_FN(_can_implement)(int m, int n, int k, int splits, int raster, int swizzle, int decomposition) {
  auto args = make_args(nullptr, nullptr, nullptr, m, n, k, splits, raster, swizzle, decomposition);
  return static_cast<int>(Gemm::can_implement(args));
}

// Launches the GEMM on `stream`; 0 on success, else a cutlass::Status code (100 + cudaError for launch errors).
int KR_FN(_run)(const void* a, const void* b, void* c, int m, int n, int k, int splits, int raster, int swizzle,
                int decomposition, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  auto args = make_args(a, b, c, m, n, k, splits, raster, swizzle, decomposition);
  if (Gemm::get_workspace_size(args) > workspace_bytes) return 1000;
  Gemm gemm;
  cutlass::Status st = gemm.initialize(args, workspace, stream);
  if (st != cutlass::Status::kSuccess) return static_cast<int>(st);
  st = gemm.run(stream);
  if (st != cutlass::Status::kSuccess) return static_cast<int>(st);
  cudaError_t err = cudaPeekAtLastError();
  return err == cudaSuccess ? 0 : 100 + static_cast<int>(err);
}

// A prepared call: the arguments built once, so a launch only swaps in the pointers and the stream.
struct KR_FN(_Plan) {
  typename Gemm::Arguments args;
  void* workspace;
};

void* KR_FN(_plan)(int m, int n, int k, int splits, int raster, int swizzle, int decomposition, void* workspace,
                   size_t workspace_bytes) {
  auto args = make_args(nullptr, nullptr, nullptr, m, n, k, splits, raster, swizzle, decomposition);
  if (Gemm::get_workspace_size(args) > workspace_bytes) return nullptr;
  if (Gemm::can_implement(args) != cutlass::Status::kSuccess) return nullptr;
  return new KR_FN(_Plan){args, workspace};
}

int KR_FN(_plan_run)(void* plan_, const void* a, const void* b, void* c, cudaStream_t stream) {
  auto* plan = static_cast<KR_FN(_Plan)*>(plan_);
  plan->args.mainloop.ptr_A = static_cast<const Element*>(a);
  plan->args.mainloop.ptr_B = static_cast<const Element*>(b);
  plan->args.epilogue.ptr_D = static_cast<Element*>(c);
  Gemm gemm;
  cutlass::Status st = gemm.initialize(plan->args, plan->workspace, stream);
  if (st != cutlass::Status::kSuccess) return static_cast<int>(st);
  st = gemm.run(stream);
  if (st != cutlass::Status::kSuccess) return static_cast<int>(st);
  cudaError_t err = cudaPeekAtLastError();
  return err == cudaSuccess ? 0 : 100 + static_cast<int>(err);
}

void KR_FN(_plan_free)(void* plan) { delete static_cast<KR_FN(_Plan)*>(plan); }

}  // extern "C"
