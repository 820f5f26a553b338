"""How fast NVML shows a killed GPU process gone (the assumption of lab/engine/gpumem.py's wait).

Run on a GPU node with PyTorch and nvidia-ml-py: ``python benchmarks/nvml_memory_release.py``.
Three times: a child allocates 40 GiB on GPU 0, is SIGKILLed, and the script times until its
pid leaves ``nvmlDeviceGetComputeRunningProcesses`` and used memory is back within 1 GiB of
the baseline. Also prints the driver version and whether it is R580+. Prints JSON.
The code below is byte-for-byte what ran (kept compact to fit the device runner's command).
"""
import subprocess,sys,time,json,pynvml as n
n.nvmlInit();h=n.nvmlDeviceGetHandleByIndex(0)
v=n.nvmlSystemGetDriverVersion();v=v.decode() if isinstance(v,bytes) else v
used=lambda:n.nvmlDeviceGetMemoryInfo(h).used
pids=lambda:{p.pid for p in n.nvmlDeviceGetComputeRunningProcesses(h)}
b=used()
H="import torch,time;x=torch.empty(40*2**30,dtype=torch.uint8,device='cuda');x.fill_(1);torch.cuda.synchronize();print('held',flush=True);time.sleep(600)"
r={"driver":v,"driver_major_ge_580":int(v.split('.')[0])>=580,"base_gib":round(b/2**30,2)}
for trial in range(3):
  p=subprocess.Popen([sys.executable,"-c",H],stdout=subprocess.PIPE,text=True);p.stdout.readline()
  r[f"t{trial}_held_gib"]=round(used()/2**30,2);r[f"t{trial}_pid_seen"]=p.pid in pids()
  p.kill();t=time.monotonic();tp=tm=None
  while time.monotonic()-t<60 and (tp is None or tm is None):
    if tp is None and p.pid not in pids(): tp=time.monotonic()-t
    if tm is None and used()<=b+2**30: tm=time.monotonic()-t
    time.sleep(0.005)
  p.wait();r[f"t{trial}_pid_gone_s"]=round(tp,3);r[f"t{trial}_mem_freed_s"]=round(tm,3)
print(json.dumps(r,indent=0))
