"""A module imported on first use, held in a C slot: for siblings that cimport the
caller (so the caller cannot import them at its own import) and for optional
libraries (numpy: ``import barecuda`` never imports it).
Declarations and one inline function only: no module of this name exists at run time.

    cdef PyObject *_copy_mod = NULL
    ... lazy_module(&_copy_mod, "barecuda._copy").copy_into(...)

After the first call it costs one NULL compare (inlined: no call, no dict lookup). The
slot keeps its module for the life of the process (modules are not unloaded)."""
from cpython.ref cimport PyObject, Py_INCREF
from cpython.module cimport PyImport_Import


cdef inline object lazy_module(PyObject **slot, str name):
    if slot[0] == NULL:
        m = PyImport_Import(name)
        Py_INCREF(m)
        slot[0] = <PyObject *>m
    return <object>slot[0]
