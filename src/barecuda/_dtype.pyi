"""The dtype table (no public names; see barecuda.empty and DeviceBuffer.dtype)."""
