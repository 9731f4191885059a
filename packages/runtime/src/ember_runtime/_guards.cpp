// ember_runtime._guards: the tensor half of a guard check, in C++.
//
// A Checker holds the expected metadata of each guarded tensor plus the Python
// callables from the GuardSpec (read: locals -> tensors, other: the non-tensor
// guards, first: those the reads depend on, or None). Calling it answers
// exactly what ember_runtime.guards' pure-Python check answers; see
// docs/runtime.md. Tensor metadata is read through the Python C API
// (no torch headers), so the package builds without torch in the build env.

#include <pybind11/pybind11.h>

#include <vector>

namespace py = pybind11;

namespace {

// Metadata readers resolved once per tensor type: the getters behind ``dtype``,
// ``requires_grad``, ``shape``, ``device`` and the C function behind ``stride()``.
// Calling them directly skips generic attribute lookup (about a fifth of a check).
// They are used only while the type's version tag is unchanged (any assignment to
// the type or its bases changes it) and the type uses generic attribute lookup, so
// the answer is always what ``getattr`` would give.
struct Readers {
    PyTypeObject *type = nullptr;
    unsigned int version = 0;
    PyGetSetDef *get[4] = {nullptr, nullptr, nullptr, nullptr};
    PyCFunctionWithKeywords stride = nullptr;
};

enum Attr { DTYPE, REQUIRES_GRAD, SHAPE, DEVICE };

struct TensorExpect {
    py::object type;
    py::object dtype;
    py::object device;
    py::object shape;
    py::object stride;
    py::object requires_grad;
    Readers readers;
};

struct Names {
    py::object attr[4];
    py::object stride;
    py::object empty;  // the () passed to stride()
};

py::object intern(const char *s) {
    return py::reinterpret_steal<py::object>(PyUnicode_InternFromString(s));
}

Names &names() {
    static Names n{{intern("dtype"), intern("requires_grad"), intern("shape"),
                    intern("device")},
                   intern("stride"),
                   py::reinterpret_steal<py::object>(PyTuple_New(0))};
    return n;
}

Readers resolve(PyObject *type_obj) {
    Readers r;
    if (!PyType_Check(type_obj)) return r;
    auto *type = reinterpret_cast<PyTypeObject *>(type_obj);
    if (type->tp_getattro != PyObject_GenericGetAttr) return r;
    const Names &n = names();
    for (int i = 0; i < 4; ++i) {
        PyObject *d = _PyType_Lookup(type, n.attr[i].ptr());
        if (d == nullptr || !Py_IS_TYPE(d, &PyGetSetDescr_Type)) return Readers{};
        PyGetSetDef *def = reinterpret_cast<PyGetSetDescrObject *>(d)->d_getset;
        if (def->get == nullptr) return Readers{};
        r.get[i] = def;
    }
    PyObject *m = _PyType_Lookup(type, n.stride.ptr());
    if (m == nullptr || !Py_IS_TYPE(m, &PyMethodDescr_Type)) return Readers{};
    PyMethodDef *def = reinterpret_cast<PyMethodDescrObject *>(m)->d_method;
    if (def->ml_flags != (METH_VARARGS | METH_KEYWORDS)) return Readers{};
    r.stride = reinterpret_cast<PyCFunctionWithKeywords>(
        reinterpret_cast<void (*)(void)>(def->ml_meth));
    if (!(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) return Readers{};
    r.version = type->tp_version_tag;
    r.type = type;
    return r;
}

bool readers_valid(const Readers &r) {
    return r.type != nullptr && (r.type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) &&
           r.type->tp_version_tag == r.version;
}

PyObject *read_attr(PyObject *value, const Readers &r, bool fast, Attr a) {
    if (fast) return r.get[a]->get(value, r.get[a]->closure);
    return PyObject_GetAttr(value, names().attr[a].ptr());
}

PyObject *read_stride(PyObject *value, const Readers &r, bool fast) {
    if (fast) return r.stride(value, names().empty.ptr(), nullptr);
    return PyObject_CallMethodNoArgs(value, names().stride.ptr());
}

// 1 when they match, 0 when not, -1 with a Python error set. Both take ``got``.
int same(PyObject *got, PyObject *expected) {
    if (got == nullptr) return -1;
    int is = got == expected;
    Py_DECREF(got);
    return is;
}

int equal(PyObject *got, PyObject *expected) {
    if (got == nullptr) return -1;
    int eq = PyObject_RichCompareBool(got, expected, Py_EQ);
    Py_DECREF(got);
    return eq;
}

int tensor_matches(PyObject *value, const TensorExpect &e) {
    if (reinterpret_cast<PyObject *>(Py_TYPE(value)) != e.type.ptr()) return 0;
    const Readers &r = e.readers;
    bool fast = readers_valid(r);
    int ok = same(read_attr(value, r, fast, DTYPE), e.dtype.ptr());
    if (ok != 1) return ok;
    ok = same(read_attr(value, r, fast, REQUIRES_GRAD), e.requires_grad.ptr());
    if (ok != 1) return ok;
    ok = equal(read_attr(value, r, fast, SHAPE), e.shape.ptr());
    if (ok != 1) return ok;
    ok = equal(read_stride(value, r, fast), e.stride.ptr());
    if (ok != 1) return ok;
    return equal(read_attr(value, r, fast, DEVICE), e.device.ptr());
}

class Checker {
  public:
    Checker(py::list specs, py::object read, py::object other, py::object first)
        : read_(std::move(read)), other_(std::move(other)), first_(std::move(first)) {
        for (py::handle item : specs) {
            py::tuple t = py::reinterpret_borrow<py::tuple>(item);
            if (t.size() != 6) throw py::value_error("a tensor spec has 6 fields");
            py::object type = t[0];
            expects_.push_back({type, t[1], t[2], t[3], t[4], t[5], resolve(type.ptr())});
        }
    }

    // The check; Exception subclasses mean "no match", BaseExceptions propagate.
    bool operator()(py::handle f_locals) const {
        int ok = run(f_locals.ptr());
        if (ok >= 0) return ok == 1;
        if (PyErr_ExceptionMatches(PyExc_Exception)) {
            PyErr_Clear();
            return false;
        }
        throw py::error_already_set();
    }

    py::object read_, other_, first_;
    std::vector<TensorExpect> expects_;

  private:
    // With first (the guards the reads depend on): first, the tensors, then
    // other. An entry compiled for other sizes then fails at its tensors in a
    // few microseconds, before other (hundreds of microseconds of Python on a
    // transformers model) runs. Without it, other before the reads.
    int run(PyObject *f_locals) const {
        if (first_.is_none()) {
            int ok = holds(other_, f_locals);
            return ok == 1 ? tensors_match(f_locals) : ok;
        }
        int ok = holds(first_, f_locals);
        if (ok == 1) ok = tensors_match(f_locals);
        if (ok == 1) ok = holds(other_, f_locals);
        return ok;
    }

    static int holds(const py::object &check, PyObject *f_locals) {
        if (check.is_none()) return 1;
        PyObject *r = PyObject_CallOneArg(check.ptr(), f_locals);
        if (r == nullptr) return -1;
        int truth = PyObject_IsTrue(r);
        Py_DECREF(r);
        return truth;
    }

    int tensors_match(PyObject *f_locals) const {
        PyObject *values = PyObject_CallOneArg(read_.ptr(), f_locals);
        if (values == nullptr) return -1;
        PyObject *seq = PySequence_Fast(values, "read() must return an iterable");
        Py_DECREF(values);
        if (seq == nullptr) return -1;
        int ok = 1;
        if (static_cast<size_t>(PySequence_Fast_GET_SIZE(seq)) != expects_.size()) {
            ok = 0;
        } else {
            PyObject **items = PySequence_Fast_ITEMS(seq);
            for (size_t i = 0; i < expects_.size() && ok == 1; ++i) {
                ok = tensor_matches(items[i], expects_[i]);
            }
        }
        Py_DECREF(seq);
        return ok;
    }
};

int traverse(PyObject *self_base, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self_base));
    if (!py::detail::is_holder_constructed(self_base)) return 0;
    auto &self = py::cast<Checker &>(py::handle(self_base));
    Py_VISIT(self.read_.ptr());
    Py_VISIT(self.other_.ptr());
    Py_VISIT(self.first_.ptr());
    return 0;
}

int clear(PyObject *self_base) {
    if (py::detail::is_holder_constructed(self_base)) {
        auto &self = py::cast<Checker &>(py::handle(self_base));
        self.read_ = py::none();
        self.other_ = py::none();
        self.first_ = py::none();
        self.expects_.clear();
    }
    return 0;
}

}  // namespace

PYBIND11_MODULE(_guards, m) {
    m.doc() = "C++ tensor guard checks for ember_runtime.guards";
    // read_, other_ and first_ may close over the compiled function's globals,
    // which can hold the checker again: take part in garbage collection to free
    // such cycles.
    py::class_<Checker>(m, "Checker", py::custom_type_setup([](PyHeapTypeObject *ht) {
                            auto *type = &ht->ht_type;
                            type->tp_flags |= Py_TPFLAGS_HAVE_GC;
                            type->tp_traverse = traverse;
                            type->tp_clear = clear;
                        }))
        .def(py::init<py::list, py::object, py::object, py::object>())
        .def("check", &Checker::operator());
}
