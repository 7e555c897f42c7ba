// The dispatch's hot path in C++ (`kernelrl.gemm.fastpath`): one hash lookup keyed on the two matrices' sizes,
// dtypes and devices, then what the Python dispatcher decided for that signature on its first call:
//   MM       torch.mm (at::mm: the same kernel torch.matmul runs for two matrices);
//   PLAN     a prepared native call, plan_run(plan, a, b, c, stream), one plan per stream (cuBLASLt, CUTLASS);
//   CLUSTERK the cluster split-K entry point with its fixed arguments and per-stream workspace pointers;
//   PYTHON   the Python launcher fn(a, b, c) (Triton), with C allocated here.
// Anything else (a first call, a tensor subclass, a torch function mode, more than two dimensions, keyword
// arguments) goes to the Python dispatcher, which decides and adds the signature to the table. A stream a
// native entry has not seen goes once through the Python launcher, which prepares that stream's plan or
// workspace; the entry then reads it from the launcher.
#include <torch/extension.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

struct Key {
  int64_t am, ak, bk, bn;
  int16_t adt, bdt, adev, bdev;  // dtypes; devices as type * 256 + index
  bool operator==(const Key& o) const {
    return am == o.am && ak == o.ak && bk == o.bk && bn == o.bn && adt == o.adt && bdt == o.bdt &&
           adev == o.adev && bdev == o.bdev;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t v : {uint64_t(k.am), uint64_t(k.ak), uint64_t(k.bk), uint64_t(k.bn),
                       uint64_t(k.adt) << 48 | uint64_t(k.bdt) << 32 | uint64_t(uint16_t(k.adev)) << 16 |
                           uint64_t(uint16_t(k.bdev))}) {
      h = (h ^ v) * 1099511628211ull;
      h ^= h >> 29;
    }
    return h;
  }
};

int16_t device_code(const at::Tensor& t) {
  return int16_t(int(t.device().type()) * 256 + (t.device().index() + 1));
}

Key key_of(const at::Tensor& a, const at::Tensor& b) {
  return Key{a.size(0), a.size(1), b.size(0), b.size(1), int16_t(a.scalar_type()), int16_t(b.scalar_type()),
             device_code(a), device_code(b)};
}

enum class Kind { MM, PLAN, CLUSTERK, PYTHON };

using PlanRun = int (*)(void*, const void*, const void*, void*, void*);
using ClusterRun = int (*)(const void*, const void*, void*, int, int, int, int, int, void*, void*, int, void*);

struct Entry {
  Kind kind = Kind::MM;
  int64_t m = 0, n = 0;
  py::object fn;         // the Python launcher (every kind but MM)
  void* run = nullptr;   // PLAN: plan_run; CLUSTERK: the run entry point
  py::object state;      // the launcher's per-stream dict (stream -> (plan or workspace, ...)); None: none needed
  int ints[4] = {0, 0, 0, 0};  // CLUSTERK: k, splits, groups, bf16
  std::vector<std::pair<void*, std::pair<void*, void*>>> streams;  // stream -> (plan or workspace, counters)
  std::string what;
};

struct Table {
  std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash> map;

  void put(const at::Tensor& a, const at::Tensor& b, std::shared_ptr<Entry> e) { map[key_of(a, b)] = std::move(e); }
};

// What the capsule behind a caller holds: the table and the Python dispatcher's own call.
struct Caller {
  std::shared_ptr<Table> table;
  py::object fallback;
};

const at::Tensor& unpack(py::handle t) {
  if (!THPVariable_Check(t.ptr())) throw py::type_error("expected a torch.Tensor");
  return THPVariable_Unpack(t.ptr());
}

bool launchable(const at::Tensor& a, const at::Tensor& b) {
  return a.is_contiguous() && b.is_contiguous() && !(reinterpret_cast<uintptr_t>(a.data_ptr()) & 15) &&
         !(reinterpret_cast<uintptr_t>(b.data_ptr()) & 15) &&
         !((a.requires_grad() || b.requires_grad()) && at::GradMode::is_enabled());
}

// The raw stream of a's device (CUDA's current stream; none for the CPU, where the native kinds are only tested).
void* current_stream(const at::Tensor& a) {
  if (!a.is_cuda()) return nullptr;
  return c10::impl::getDeviceGuardImpl(a.device().type())->getStream(a.device()).native_handle();
}

// The per-stream pointers a native entry needs, read from the launcher's dict after it served `stream`.
bool learn_stream(Entry& e, void* stream) {
  if (e.state.is_none()) return true;
  py::dict d = e.state;
  py::int_ s(reinterpret_cast<uintptr_t>(stream));
  if (!d.contains(s)) return false;
  py::tuple t = d[s];
  void* first = reinterpret_cast<void*>(t[0].cast<uintptr_t>());
  void* second = e.kind == Kind::CLUSTERK ? reinterpret_cast<void*>(t[1].cast<uintptr_t>()) : nullptr;
  e.streams.emplace_back(stream, std::make_pair(first, second));
  return true;
}

PyObject* wrap(at::Tensor&& t) { return THPVariable_Wrap(std::move(t)); }

PyObject* torch_mm(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor c;
  {
    py::gil_scoped_release no_gil;  // as torch.mm does
    c = at::mm(a, b);
  }
  return wrap(std::move(c));
}

// The entry's Python launcher fn(a, b, c) into c; C as a new reference, or nullptr with the launcher's error set.
PyObject* through_python(const Entry& e, PyObject* a, PyObject* b, at::Tensor&& c) {
  PyObject* pc = wrap(std::move(c));
  PyObject* call_args[3] = {a, b, pc};
  PyObject* r = PyObject_Vectorcall(e.fn.ptr(), call_args, 3, nullptr);
  if (r == nullptr) {
    Py_DECREF(pc);
    return nullptr;
  }
  Py_DECREF(r);
  return pc;
}

// The hot path: `self` is a capsule holding a Caller.
PyObject* call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  HANDLE_TH_ERRORS
  auto* caller = static_cast<Caller*>(PyCapsule_GetPointer(self, "kernelrl.gemm.fastpath"));
  if (caller == nullptr) return nullptr;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs != 2 || kwnames != nullptr || !THPVariable_CheckExact(args[0]) || !THPVariable_CheckExact(args[1]) ||
      at::impl::torch_function_mode_enabled())
    return PyObject_Vectorcall(caller->fallback.ptr(), args, nargsf, kwnames);
  const at::Tensor& a = THPVariable_Unpack(args[0]);
  const at::Tensor& b = THPVariable_Unpack(args[1]);
  if (a.dim() != 2 || b.dim() != 2) return PyObject_Vectorcall(caller->fallback.ptr(), args, nargsf, kwnames);
  auto it = caller->table->map.find(key_of(a, b));
  if (it == caller->table->map.end()) return PyObject_Vectorcall(caller->fallback.ptr(), args, nargsf, kwnames);
  std::shared_ptr<Entry> e = it->second;  // kept alive even if Python code clears the table below
  if (e->kind == Kind::MM || !launchable(a, b)) return torch_mm(a, b);
  at::Tensor c = at::empty({e->m, e->n}, a.options());
  if (e->kind == Kind::PLAN || e->kind == Kind::CLUSTERK) {
    void* stream = current_stream(a);
    const std::pair<void*, void*>* ptrs = nullptr;
    static const std::pair<void*, void*> none{nullptr, nullptr};
    if (e->state.is_none()) {
      ptrs = &none;
    } else {
      for (auto& s : e->streams)
        if (s.first == stream) ptrs = &s.second;
    }
    if (ptrs != nullptr) {
      const std::pair<void*, void*> p = *ptrs;  // copied under the GIL (another thread may add streams)
      int st;
      {
        py::gil_scoped_release no_gil;  // as ctypes releases it around a foreign call
        if (e->kind == Kind::PLAN) {
          st = reinterpret_cast<PlanRun>(e->run)(p.first, a.data_ptr(), b.data_ptr(), c.data_ptr(), stream);
        } else {
          st = reinterpret_cast<ClusterRun>(e->run)(a.data_ptr(), b.data_ptr(), c.data_ptr(), int(e->m),
                                                    int(e->n), e->ints[0], e->ints[1], e->ints[2], p.first, p.second,
                                                    e->ints[3], stream);
        }
      }
      if (st != 0) {
        PyErr_Format(PyExc_RuntimeError, "%s failed with status %d", e->what.c_str(), st);
        return nullptr;
      }
      return wrap(std::move(c));
    }
    // A stream this entry has not seen: the Python launcher prepares it, then the entry learns it.
    PyObject* pc = through_python(*e, args[0], args[1], std::move(c));
    if (pc != nullptr) learn_stream(*e, stream);
    return pc;
  }
  return through_python(*e, args[0], args[1], std::move(c));
  END_HANDLE_TH_ERRORS
}

PyMethodDef call_def = {"matmul", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call)),
                        METH_FASTCALL | METH_KEYWORDS, "A @ B: through the table, or the Python dispatcher."};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
  py::class_<Table, std::shared_ptr<Table>>(mod, "Table",
                                            "Call signatures of two matrices -> what the dispatcher runs for them.")
      .def(py::init<>())
      .def("__len__", [](const Table& t) { return t.map.size(); })
      .def("clear", [](Table& t) { t.map.clear(); })
      .def(
          "add_mm",
          [](Table& t, py::handle a, py::handle b) {
            auto e = std::make_shared<Entry>();
            t.put(unpack(a), unpack(b), e);
          },
          "This signature runs torch.mm.")
      .def(
          "add_python",
          [](Table& t, py::handle a, py::handle b, py::object fn, int64_t m, int64_t n) {
            auto e = std::make_shared<Entry>();
            e->kind = Kind::PYTHON;
            e->fn = std::move(fn);
            e->m = m;
            e->n = n;
            t.put(unpack(a), unpack(b), e);
          },
          "This signature runs the Python launcher fn(a, b, c) into a new m x n C.")
      .def(
          "add_native",
          [](Table& t, py::handle a, py::handle b, py::object fn, int64_t m, int64_t n, const std::string& kind,
             uintptr_t run, py::object state, std::vector<int> ints, const std::string& what) {
            auto e = std::make_shared<Entry>();
            if (kind == "plan") {
              e->kind = Kind::PLAN;
            } else if (kind == "clusterk") {
              e->kind = Kind::CLUSTERK;
              if (ints.size() != 4) throw py::value_error("clusterk takes (k, splits, groups, bf16)");
            } else {
              throw py::value_error("native kind is 'plan' or 'clusterk', not '" + kind + "'");
            }
            if (run == 0) throw py::value_error("null entry point");
            if (!state.is_none() && !py::isinstance<py::dict>(state))
              throw py::type_error("state is a dict (stream -> pointers) or None");
            e->fn = std::move(fn);
            e->m = m;
            e->n = n;
            e->run = reinterpret_cast<void*>(run);
            e->state = std::move(state);
            for (size_t i = 0; i < ints.size() && i < 4; ++i) e->ints[i] = ints[i];
            e->what = what;
            // Streams the launcher has already prepared.
            if (!e->state.is_none())
              for (auto item : py::dict(e->state))
                learn_stream(*e, reinterpret_cast<void*>(item.first.cast<uintptr_t>()));
            t.put(unpack(a), unpack(b), e);
          },
          "This signature calls a native entry point directly (see the module's source for the kinds).")
      .def(
          "kind_of",
          [](const Table& t, py::handle a, py::handle b) -> py::object {
            auto it = t.map.find(key_of(unpack(a), unpack(b)));
            if (it == t.map.end()) return py::none();
            static const char* names[] = {"mm", "plan", "clusterk", "python"};
            return py::str(names[int(it->second->kind)]);
          },
          "What the table runs for this signature (None: not in it).")
      .def(
          "streams_of",
          [](const Table& t, py::handle a, py::handle b) -> size_t {
            auto it = t.map.find(key_of(unpack(a), unpack(b)));
            return it == t.map.end() ? 0 : it->second->streams.size();
          },
          "How many streams a native entry has learned.");
  mod.def(
      "caller",
      [](std::shared_ptr<Table> t, py::object fallback) {
        auto* holder = new Caller{std::move(t), std::move(fallback)};
        PyObject* cap = PyCapsule_New(holder, "kernelrl.gemm.fastpath", [](PyObject* c) {
          delete static_cast<Caller*>(PyCapsule_GetPointer(c, "kernelrl.gemm.fastpath"));
        });
        if (cap == nullptr) {
          delete holder;
          throw py::error_already_set();
        }
        PyObject* f = PyCFunction_New(&call_def, cap);
        Py_DECREF(cap);
        if (f == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(f);
      },
      "A callable (a, b) -> A @ B over the table; signatures not in it go to fallback(a, b), which should add "
      "them. The callable keeps the table and the fallback alive.");
}
