"""GPU acceptance benchmark: ResNet-50 synthetic training throughput, as in the seeds'
tf_cnn_benchmarks runs (batch 256 per GPU, mixed precision), against the building
block's expected figure.

    .venv/bin/python bench/gpu_acceptance.py --block dgx2            # every GPU
    .venv/bin/python bench/gpu_acceptance.py --block dgx-h100 --gpus 1

On a machine without nvidia-smi it prints "no GPU here" and exits 0 (nothing to
accept). With GPUs it needs PyTorch with torchvision; exit 0 when the measured
throughput reaches the expected figure less the tolerance, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

PER_GPU_IMG_S = {
    "V100": (1250, "seed: 1 V100 ~1,250 img/s, ResNet-50 batch 256, tf_cnn_benchmarks"),
    "H100": (3000, "estimate: ~2.4x a V100 with mixed precision, PyTorch eager, no DALI"),
}
BLOCK_IMG_S = {
    "dgx2": (12000, "seed: DGX-2 (16x V100) > 12k img/s"),
    "dgx1": (7000, "estimate: 8x V100 at the DGX-2's per-GPU scaling (75 %)"),
    "dgx-h100": (20000, "estimate: 8x H100 at ~83 % scaling"),
}


@dataclass(frozen=True)
class Expected:
    img_s: float
    source: str


def block_gpus(block: str) -> tuple[int, str]:
    """(GPU count, model family) of a catalog block, e.g. (16, 'V100')."""
    data = yaml.safe_load((REPO / "topologies" / "blocks" / f"{block}.yaml").read_text(encoding="utf-8"))
    gpus = data["node"]["gpus"]
    return int(gpus["count"]), str(gpus["model"]).split("-")[0]


def expected_img_s(block: str, gpus_used: int) -> Expected:
    """One GPU: the per-GPU figure. Several: the block's figure, pro rata to the GPUs used."""
    count, family = block_gpus(block)
    per_gpu, per_gpu_source = PER_GPU_IMG_S[family]
    if gpus_used == 1 or block not in BLOCK_IMG_S:
        return Expected(per_gpu * gpus_used, per_gpu_source)
    figure, source = BLOCK_IMG_S[block]
    return Expected(figure * gpus_used / count, source)


def _worker(rank: int, batch: int, steps: int, warmup: int, results) -> None:  # pragma: no cover (GPU only)
    import torch
    import torchvision

    device = torch.device("cuda", rank)
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().to(device).to(memory_format=torch.channels_last)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    images = torch.randn(batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(warmup + steps):
        if step == warmup:
            torch.cuda.synchronize(device)
            start = time.perf_counter()
        optimiser.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimiser)
        scaler.update()
    torch.cuda.synchronize(device)
    results[rank] = batch * steps / (time.perf_counter() - start)


def measure_img_s(gpus: int, batch: int, steps: int, warmup: int) -> float:  # pragma: no cover (GPU only)
    """Independent data-parallel workers, one per GPU (no gradient all-reduce: an upper bound)."""
    import torch.multiprocessing as mp

    results = mp.Manager().dict()
    mp.spawn(_worker, args=(batch, steps, warmup, results), nprocs=gpus, join=True)
    return float(sum(results.values()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", default="dgx-h100", help="catalog block name (topologies/blocks/NAME.yaml)")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs to use (default: all visible)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--tolerance", type=float, default=0.10, help="accepted shortfall (fraction)")
    args = parser.parse_args(argv)
    if shutil.which("nvidia-smi") is None:
        print("no GPU here: nvidia-smi not found; ResNet-50 acceptance benchmark skipped")
        return 0
    try:
        import torch
    except ImportError:
        print("GPUs present but PyTorch is not installed: pip install torch torchvision", file=sys.stderr)
        return 2
    visible = torch.cuda.device_count()
    if visible == 0:
        print("no GPU here: nvidia-smi found but CUDA sees no device; ResNet-50 acceptance benchmark skipped")
        return 0
    gpus = args.gpus or visible
    expected = expected_img_s(args.block, gpus)
    measured = measure_img_s(gpus, args.batch, args.steps, args.warmup)
    passed = measured >= expected.img_s * (1 - args.tolerance)
    print(json.dumps({"block": args.block, "gpus": gpus, "batch": args.batch, "measured_img_s": round(measured, 1),
                      "expected_img_s": round(expected.img_s, 1), "expected_source": expected.source,
                      "gpu": torch.cuda.get_device_name(0), "passed": passed}))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
