"""Type stubs for barecuda._occupancy: function attributes and occupancy (C-level API)."""
from typing import Dict

FUNC_ATTRIBUTES: Dict[str, int]
