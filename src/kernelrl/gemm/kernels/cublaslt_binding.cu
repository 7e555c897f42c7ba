// A thin C ABI over cuBLASLt for row-major half/bfloat16 GEMM with fp32 compute: heuristic queries, algorithm
// checks and launches.  Row-major C (M x N) = A (M x K) B (K x N) is computed as the column-major product
// C^T = B^T A^T, so cuBLASLt sees m' = N, n' = M with A' = B and B' = A, as torch does.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace {

cublasLtHandle_t g_handle = nullptr;
std::mutex g_mutex;

struct Problem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // column-major views: a = B^T, b = A^T, c = C^T
};
std::map<std::tuple<int, int, int, int>, Problem> g_problems;

cudaDataType_t dtype_of(int dtype) { return dtype == 1 ? CUDA_R_16BF : CUDA_R_16F; }

int handle() {
  if (g_handle) return 0;
  return static_cast<int>(cublasLtCreate(&g_handle));
}

// dtype: 0 fp16, 1 bf16.  Returns nullptr on failure.
Problem* problem(int dtype, int m, int n, int k) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto key = std::make_tuple(dtype, m, n, k);
  auto it = g_problems.find(key);
  if (it != g_problems.end()) return &it->second;
  Problem p;
  cudaDataType_t t = dtype_of(dtype);
  if (cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return nullptr;
  cublasOperation_t no = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &no, sizeof(no));
  cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &no, sizeof(no));
  if (cublasLtMatrixLayoutCreate(&p.a, t, n, k, n) != CUBLAS_STATUS_SUCCESS) return nullptr;
  if (cublasLtMatrixLayoutCreate(&p.b, t, k, m, k) != CUBLAS_STATUS_SUCCESS) return nullptr;
  if (cublasLtMatrixLayoutCreate(&p.c, t, n, m, n) != CUBLAS_STATUS_SUCCESS) return nullptr;
  return &(g_problems[key] = p);
}

// The values of a list-valued capability of `a` (empty where it has none).
std::vector<uint32_t> cap_list(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  cublasLtMatmulAlgoCapGetAttribute(&a, attr, nullptr, 0, &bytes);
  std::vector<uint32_t> out(bytes / sizeof(uint32_t));
  if (!out.empty()) cublasLtMatmulAlgoCapGetAttribute(&a, attr, out.data(), bytes, &bytes);
  return out;
}

// The configuration attributes of an algorithm (what kr_lt_algo_info reports).
struct Config {
  int32_t id = 0, splitk = 0;
  uint32_t tile = 0, stages = 0, reduction = 0, swizzle = 0, custom = 0;
  uint16_t cluster = 0;
};

Config config_of(const cublasLtMatmulAlgo_t& a) {
  Config c;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_ID, &c.id, sizeof(c.id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &c.tile, sizeof(c.tile), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &c.stages, sizeof(c.stages), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c.splitk, sizeof(c.splitk), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &c.reduction, sizeof(c.reduction),
                                       &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &c.swizzle, sizeof(c.swizzle), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c.custom, sizeof(c.custom), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c.cluster, sizeof(c.cluster), &w);
  return c;
}

// Sets `a`'s split-K factor: fp32 reduction in workspace for more than one split, none for one.
cublasStatus_t set_splits(cublasLtMatmulAlgo_t& a, int32_t splits) {
  uint32_t scheme = splits > 1 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_NONE;
  cublasStatus_t st =
      cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits));
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  return cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme));
}

// Configurations that cublasLtMatmulAlgoCheck accepts for a problem, written to the caller's arrays (64 bytes
// each, their workspace needs and, where asked, the check's wave counts) up to `max_out`; counts every check.
struct Checked {
  const Problem* p;
  size_t workspace_cap;
  int max_out;
  void* algos_out;
  size_t* workspace_out;
  float* waves_out;  // may be null
  int kept = 0, checked = 0;

  bool full() const { return kept >= max_out; }
  // Whether `a` was kept.
  bool add(const cublasLtMatmulAlgo_t& a) {
    if (full()) return false;
    cublasLtMatmulHeuristicResult_t result;
    ++checked;
    if (cublasLtMatmulAlgoCheck(g_handle, p->op, p->a, p->b, p->c, p->c, &a, &result) != CUBLAS_STATUS_SUCCESS ||
        result.workspaceSize > workspace_cap)
      return false;
    std::memcpy(static_cast<char*>(algos_out) + 64 * kept, &a, sizeof(a));
    workspace_out[kept] = result.workspaceSize;
    if (waves_out) waves_out[kept] = result.wavesCount;
    ++kept;
    return true;
  }
};

}  // namespace

extern "C" {

size_t kr_lt_version() { return cublasLtGetVersion(); }

// Fills up to `requested` algorithms (64 bytes each) that cuBLASLt's heuristic suggests, best first, within
// `workspace_cap` bytes.  `workspace_out[i]` gets each one's workspace need.  Returns a cublasStatus_t.
int kr_lt_heuristics(int dtype, int m, int n, int k, size_t workspace_cap, int requested, void* algos_out,
                     size_t* workspace_out, int* count_out) {
  *count_out = 0;
  if (int st = handle()) return st;
  Problem* p = problem(dtype, m, n, k);
  if (!p) return -1;
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_cap,
                                       sizeof(workspace_cap));
  auto* results = new cublasLtMatmulHeuristicResult_t[requested];
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_handle, p->op, p->a, p->b, p->c, p->c, pref, requested,
                                                     results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  int kept = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    for (int i = 0; i < found; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      std::memcpy(static_cast<char*>(algos_out) + 64 * kept, &results[i].algo, sizeof(cublasLtMatmulAlgo_t));
      workspace_out[kept] = results[i].workspaceSize;
      ++kept;
    }
  }
  delete[] results;
  *count_out = kept;
  return static_cast<int>(st);
}

// Copies `algo` with its split-K factor set (fp32 reduction in workspace) into `algo_out` and checks it for
// the problem; `workspace_out` gets its workspace need.  Returns a cublasStatus_t (0 when it can run).
int kr_lt_with_splitk(int dtype, int m, int n, int k, const void* algo, int splits, void* algo_out,
                      size_t* workspace_out) {
  if (int st = handle()) return st;
  Problem* p = problem(dtype, m, n, k);
  if (!p) return -1;
  cublasLtMatmulAlgo_t a;
  std::memcpy(&a, algo, sizeof(a));
  cublasStatus_t st = set_splits(a, splits);
  if (st != CUBLAS_STATUS_SUCCESS) return static_cast<int>(st);
  cublasLtMatmulHeuristicResult_t result;
  st = cublasLtMatmulAlgoCheck(g_handle, p->op, p->a, p->b, p->c, p->c, &a, &result);
  if (st != CUBLAS_STATUS_SUCCESS) return static_cast<int>(st);
  std::memcpy(algo_out, &a, sizeof(a));
  *workspace_out = result.workspaceSize;
  return 0;
}

// Enumerates cuBLASLt's algorithm space for the problem, beyond what its heuristic lists: every algorithm id
// for the data types, each tile the algorithm offers, each cluster shape in `clusters`, CTA swizzling off and (where
// supported) on.  For each of those it keeps the first stage count (undefined first, then the algorithm's list)
// that cublasLtMatmulAlgoCheck accepts within `workspace_cap`.  Stops after `max_checks` checks or `max_out` kept
// configurations.  Fills `algos_out` (64 bytes each), `workspace_out` and `waves_out` (the check's wave count);
// `count_out` = configurations kept, `checked_out` = checks made.  Returns a cublasStatus_t.
int kr_lt_enumerate(int dtype, int m, int n, int k, size_t workspace_cap, const int* clusters, int n_clusters,
                    int max_checks, int max_out, void* algos_out, size_t* workspace_out, float* waves_out,
                    int* count_out, int* checked_out) {
  *count_out = 0;
  *checked_out = 0;
  if (int st = handle()) return st;
  Problem* p = problem(dtype, m, n, k);
  if (!p) return -1;
  cudaDataType_t t = dtype_of(dtype);
  std::vector<int> ids(512);
  int n_ids = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetIds(g_handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, t, t, t, t,
                                               static_cast<int>(ids.size()), ids.data(), &n_ids);
  if (st != CUBLAS_STATUS_SUCCESS) return static_cast<int>(st);
  Checked out{p, workspace_cap, max_out, algos_out, workspace_out, waves_out};
  for (int i = 0; i < n_ids && !out.full() && out.checked < max_checks; ++i) {
    cublasLtMatmulAlgo_t base;
    if (cublasLtMatmulAlgoInit(g_handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, t, t, t, t, ids[i], &base) !=
        CUBLAS_STATUS_SUCCESS)
      continue;
    std::vector<uint32_t> tiles = cap_list(base, CUBLASLT_ALGO_CAP_TILE_IDS);
    if (tiles.empty()) tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
    std::vector<uint32_t> stages = cap_list(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    stages.insert(stages.begin(), CUBLASLT_MATMUL_STAGES_UNDEFINED);
    uint32_t swizzle_support = 0;
    size_t w = 0;
    cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle_support,
                                      sizeof(swizzle_support), &w);
    for (uint32_t tile : tiles) {
      for (int c = 0; c < n_clusters; ++c) {
        for (uint32_t swz = 0; swz <= (swizzle_support ? 1u : 0u); ++swz) {
          for (uint32_t stage : stages) {
            if (out.full() || out.checked >= max_checks) break;
            cublasLtMatmulAlgo_t a = base;
            uint16_t cluster = static_cast<uint16_t>(clusters[c]);
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stage, sizeof(stage));
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof(swz));
            if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                                     sizeof(cluster)) != CUBLAS_STATUS_SUCCESS)
              break;
            if (out.add(a)) break;  // one stage count per (tile, cluster, swizzle)
          }
        }
      }
    }
  }
  *count_out = out.kept;
  *checked_out = out.checked;
  return 0;
}

// The neighbours of `algo` for the problem: copies that differ from it in one configuration attribute each, the
// ones cublasLtMatmulAlgoCheck accepts within `workspace_cap`: every other stage count the algorithm lists, every
// other cluster shape in `clusters`, CTA swizzling toggled (where supported), every other custom option, every
// other tile in `tiles` (with the base's stage count, else the first of the algorithm's that checks) and, where
// the algorithm splits K, every other split count in `splits` (fp32 reduction in workspace; 1 = no split).
// Fills up to `max_out` of them into `algos_out` (64 bytes each) and `workspace_out`; `count_out` = neighbours
// kept, `checked_out` = checks made.  Returns a cublasStatus_t.
int kr_lt_neighbours(int dtype, int m, int n, int k, size_t workspace_cap, const void* algo, const int* clusters,
                     int n_clusters, const int* tiles, int n_tiles, const int* splits, int n_splits, int max_out,
                     void* algos_out, size_t* workspace_out, int* count_out, int* checked_out) {
  *count_out = 0;
  *checked_out = 0;
  if (int st = handle()) return st;
  Problem* p = problem(dtype, m, n, k);
  if (!p) return -1;
  cublasLtMatmulAlgo_t base;
  std::memcpy(&base, algo, sizeof(base));
  const Config c0 = config_of(base);
  size_t w = 0;
  uint32_t swizzle_support = 0;
  int32_t splitk_support = 0, custom_max = 0;
  cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle_support,
                                    sizeof(swizzle_support), &w);
  cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max, sizeof(custom_max), &w);
  cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_support, sizeof(splitk_support),
                                    &w);
  Checked out{p, workspace_cap, max_out, algos_out, workspace_out, nullptr};
  std::vector<uint32_t> stages = cap_list(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
  for (uint32_t stage : stages) {
    if (stage == c0.stages) continue;
    cublasLtMatmulAlgo_t a = base;
    cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stage, sizeof(stage));
    out.add(a);
  }
  for (int c = 0; c < n_clusters; ++c) {
    uint16_t cluster = static_cast<uint16_t>(clusters[c]);
    if (cluster == c0.cluster) continue;
    cublasLtMatmulAlgo_t a = base;
    if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                             sizeof(cluster)) == CUBLAS_STATUS_SUCCESS)
      out.add(a);
  }
  if (swizzle_support) {
    uint32_t swz = c0.swizzle ? 0u : 1u;
    cublasLtMatmulAlgo_t a = base;
    cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof(swz));
    out.add(a);
  }
  for (int32_t custom = 0; custom <= custom_max; ++custom) {
    if (uint32_t(custom) == c0.custom) continue;
    cublasLtMatmulAlgo_t a = base;
    uint32_t value = uint32_t(custom);
    cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &value, sizeof(value));
    out.add(a);
  }
  std::vector<uint32_t> tile_stages{c0.stages};  // a new tile takes the base's stage count where it can
  for (uint32_t stage : stages)
    if (stage != c0.stages) tile_stages.push_back(stage);
  for (int t = 0; t < n_tiles; ++t) {
    uint32_t tile = static_cast<uint32_t>(tiles[t]);
    if (tile == c0.tile) continue;
    for (uint32_t stage : tile_stages) {
      cublasLtMatmulAlgo_t a = base;
      cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
      cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stage, sizeof(stage));
      if (out.full() || out.add(a)) break;
    }
  }
  for (int i = 0; splitk_support && i < n_splits; ++i) {
    int32_t split = splits[i];
    if (split < 1 || split == c0.splitk) continue;
    cublasLtMatmulAlgo_t a = base;
    if (set_splits(a, split) == CUBLAS_STATUS_SUCCESS) out.add(a);
  }
  *count_out = out.kept;
  *checked_out = out.checked;
  return 0;
}

// info: algo id, tile id, stages id, split-K, reduction scheme, CTA swizzling, custom option, cluster shape id.
int kr_lt_algo_info(const void* algo, int* info) {
  cublasLtMatmulAlgo_t a;
  std::memcpy(&a, algo, sizeof(a));
  const Config c = config_of(a);
  int vals[8] = {c.id, (int)c.tile, (int)c.stages, c.splitk, (int)c.reduction, (int)c.swizzle, (int)c.custom,
                 (int)c.cluster};
  std::memcpy(info, vals, sizeof(vals));
  return 0;
}

// Runs C = A B with `algo` (or cuBLASLt's own choice when algo is null) on `stream`.  Returns a cublasStatus_t.
int kr_lt_matmul(int dtype, const void* algo, const void* a, const void* b, void* c, int m, int n, int k,
                 void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (int st = handle()) return st;
  Problem* p = problem(dtype, m, n, k);
  if (!p) return -1;
  const float alpha = 1.0f, beta = 0.0f;
  return static_cast<int>(cublasLtMatmul(g_handle, p->op, &alpha, b, p->a, a, p->b, &beta, c, p->c, c, p->c,
                                         static_cast<const cublasLtMatmulAlgo_t*>(algo), workspace,
                                         workspace_bytes, stream));
}

// A prepared call: problem, algorithm and workspace fixed, so a launch passes only the pointers and stream.
struct LtPlan {
  Problem* problem;
  cublasLtMatmulAlgo_t algo;
  bool has_algo;
  void* workspace;
  size_t workspace_bytes;
};

void* kr_lt_plan(int dtype, int m, int n, int k, const void* algo, void* workspace, size_t workspace_bytes) {
  if (handle()) return nullptr;
  Problem* p = problem(dtype, m, n, k);
  if (!p) return nullptr;
  auto* plan = new LtPlan{p, {}, algo != nullptr, workspace, workspace_bytes};
  if (algo) std::memcpy(&plan->algo, algo, sizeof(plan->algo));
  return plan;
}

int kr_lt_plan_run(void* plan_, const void* a, const void* b, void* c, cudaStream_t stream) {
  auto* plan = static_cast<LtPlan*>(plan_);
  const float alpha = 1.0f, beta = 0.0f;
  Problem* p = plan->problem;
  return static_cast<int>(cublasLtMatmul(g_handle, p->op, &alpha, b, p->a, a, p->b, &beta, c, p->c, c, p->c,
                                         plan->has_algo ? &plan->algo : nullptr, plan->workspace,
                                         plan->workspace_bytes, stream));
}

void kr_lt_plan_free(void* plan) { delete static_cast<LtPlan*>(plan); }

}  // extern "C"
