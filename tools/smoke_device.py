import barecuda as bc, time
print("avail", bc.is_available(), bc.driver_version(), bc.driver_path())
from barecuda import _loader
syms=_loader.symbols(); print("missing:", [k for k,v in syms.items() if not v[2]])
print("count", bc.device_count())
d=bc.Device(0); print(d, d.compute_capability, d.total_memory, d.uuid, d.pci_bus_id, d.attribute("multiprocessor_count"), d.mem_info())
print(len(d.attributes()), "attrs")
s=bc.Stream(priority=-1); print(s, s.priority, s.non_blocking, s.query()); s.synchronize()
e1=bc.Event(); e2=bc.Event(); e1.record(s); e2.record(s); e2.synchronize(); print("elapsed", e2.elapsed_ms(e1))
print(d.stream_priority_range())
import torch; print("torch", torch.__version__, torch.cuda.is_available())
x=torch.ones(3,device="cuda"); print(bc.Device()); 
import cupy; print("cupy", cupy.__version__)
import cuda.core; print("cuda.core", cuda.core.__version__)
import cuda.bindings; print("bindings", cuda.bindings.__version__)
