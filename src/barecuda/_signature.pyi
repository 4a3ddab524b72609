"""Type stubs for barecuda._signature: parameter kinds, the PTX parser, user signatures."""
from typing import Any, Iterable, Tuple, Union

KIND_NAMES: Tuple[str, ...]
KIND_SIZES: Tuple[int, ...]
KIND_RANGES: Tuple[Tuple[int, int], ...]
PTX_KINDS: dict[str, int]

def parse_ptx_signatures(ptx: Union[str, bytes]) -> dict[str, list[Tuple[str, int, int]]]: ...
def mangled_matches(name: str, names: Iterable[str]) -> list[str]: ...
def signature_entries(signature: Any) -> list[Tuple[str, int, int, int]]: ...
