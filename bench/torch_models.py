"""PyTorch eager on the GPU, the reference for kiln's GPU speed on the full-size models.

Times each model of bench/export_full_models.py (same construction, same seeded weights) in
CUDA fp32 eager with TF32 off and in fp16 eager (`.half()`), as users run it: the input copied
from the host, the output copied back, `torch.no_grad()`. Median of RUNS after WARM warm-up runs
(the GPU warmed well past 60 ms before timing), in milliseconds; one JSON line per model and
precision on stdout.

    python3 bench/torch_models.py [RUNS] [WARM]
"""
import json
import statistics
import sys
import time

import torch

from export_full_models import full_models


def timed(model, inputs, runs, warm):
    model = model.cuda()
    times = []
    with torch.no_grad():
        for i in range(warm + runs):
            t0 = time.perf_counter()
            out = model(*[x.cuda() for x in inputs])
            out.cpu()
            torch.cuda.synchronize()
            if i >= warm:
                times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times)


def main(runs, warm):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for name, model, inputs, _ in full_models():
        for precision in ("fp32", "fp16"):
            m = model if precision == "fp32" else model.half()
            xs = [x.half() if x.is_floating_point() and precision == "fp16" else x for x in inputs]
            median, best = timed(m, xs, runs, warm)
            print(json.dumps({"model": name, "precision": precision, "medianMs": round(median, 3),
                              "minMs": round(best, 3), "torch": torch.__version__,
                              "gpu": torch.cuda.get_device_name()}), flush=True)
            model = model.float()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20, int(sys.argv[2]) if len(sys.argv) > 2 else 10)
