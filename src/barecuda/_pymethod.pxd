"""CPython's method-definition API, for installing a C function as a METH_FASTCALL |
METH_KEYWORDS method of a cdef class (``Kernel.launch``'s C entry in _launch.pyx, the
benchmark's ``LaunchFloor.launch``). Declarations only: no module at run time."""
from cpython.object cimport PyObject, PyTypeObject

cdef extern from "Python.h":
    ctypedef struct PyMethodDef:
        const char *ml_name
        void *ml_meth
        int ml_flags
        const char *ml_doc
    int METH_FASTCALL
    int METH_KEYWORDS
    object PyDescr_NewMethod(PyTypeObject *t, PyMethodDef *m)
    void PyType_Modified(PyTypeObject *t)
    ctypedef struct _TypeWithDict "PyTypeObject":
        PyObject *tp_dict
