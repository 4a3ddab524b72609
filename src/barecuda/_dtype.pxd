"""The dtype table (see _dtype.pyx)."""
cdef object np_module()                          # numpy, imported on first need
cdef tuple resolve_dtype(object dtype)           # (key, itemsize): canonical name or numpy typestr
cdef object typestr_of(object key)               # __array_interface__ typestr
cdef object public_dtype(object key)             # numpy.dtype when numpy is installed, else key
cdef tuple normalize_shape(object shape)
cdef size_t nbytes_of(tuple shape, size_t itemsize) except? 0
cdef object dtype_info(object key)               # (itemsize, typestr, DLPack code) or None
cdef object dtype_from_dlpack(int code, int bits, int lanes)   # canonical name, or None
cdef tuple dlpack_dtype(object key)              # (code, bits, lanes), or None
