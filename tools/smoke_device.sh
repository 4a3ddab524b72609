set -x
mkdir -p /tmp/b/src/barecuda && cp -r include setup.py pyproject.toml /tmp/b/ && cp src/barecuda/_abi.pxd src/barecuda/_errors.p* src/barecuda/_loader.p* src/barecuda/_device.p* src/barecuda/_stream.p* src/barecuda/_buffer.pxd src/barecuda/_dtype.pxd src/barecuda/_dlpack.pxd src/barecuda/_interop.pxd src/barecuda/_host.pxd /tmp/b/src/barecuda/
cd /tmp/b && printf 'from barecuda._loader import *\nfrom barecuda._device import *\nfrom barecuda._stream import *\n' > src/barecuda/__init__.py && python3 setup.py build_ext --inplace -q 2>&1 | tail -5
cd /tmp/b && PYTHONPATH=src python3 /tmp/smoke_device.py
