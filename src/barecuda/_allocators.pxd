"""The default allocator of each device (get_allocator / set_allocator's registry)."""

# The allocator alloc/empty/zeros/to_device use on device `ordinal` (a barecuda
# Allocator; created on first use). No lock on the read once it exists.
cdef object default_allocator(int ordinal)
