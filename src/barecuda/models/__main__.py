"""``python -m barecuda.models generate|bench ...``: the same as ``python -m barecuda.models.llama``."""
import sys

from barecuda.models.llama import main

if __name__ == "__main__":
    sys.exit(main())
