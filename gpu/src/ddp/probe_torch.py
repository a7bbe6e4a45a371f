# ddpcheck: a quick look at the interpreter's torch before any torchrun launch (run with -c).
# Prints one JSON object on stdout; never raises.
import json
import sys

r = {"python": sys.executable, "python_version": sys.version.split()[0]}
try:
    import torch
except Exception as e:
    r["error"] = "torch is not installed for %s (%s: %s)" % (sys.executable, type(e).__name__, e)
else:
    r["torch"] = str(torch.__version__)
    r["cuda"] = torch.version.cuda
    try:
        r["cuda_available"] = bool(torch.cuda.is_available())
        r["device_count"] = int(torch.cuda.device_count())
    except Exception as e:
        r["cuda_available"] = False
        r["cuda_error"] = "%s: %s" % (type(e).__name__, e)
    try:
        import torch.distributed as dist
        r["nccl"] = bool(dist.is_available() and dist.is_nccl_available())
    except Exception:
        r["nccl"] = False
print(json.dumps(r))
