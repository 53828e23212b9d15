#!/usr/bin/env python3
"""Record small, real PyTorch profiler traces on a GPU for the gate's calibration and tests.

Why: the gate must be judged on real run-to-run drift and real regressions, which only a GPU can
produce. This script trains ResNet18 (a host-bound job) or a small transformer LM (a GPU-bound job)
on synthetic data (each item costs a fixed amount of CPU work, like decoding an image, so host-side
wait exists as in real jobs) and writes one Kineto trace per rank with ``torch.profiler`` (CPU +
CUDA, ``profile_memory=True``, ``record_shapes=False``, ``with_stack=False``, schedule wait=1
warmup=1 active=N).

Two ways to call it::

    python scripts/record_traces.py one --out DIR [--workers 0] [--sync] ...   # one recording
    python scripts/record_traces.py all --out ROOT [--only PREFIX ...]        # the whole plan

``all`` runs every entry of ``PLAN`` as its own process (repeats must be separate processes to show
between-run drift), one after the other, and writes ``ROOT/<case>/<run>/rank<R>.pt.trace.json.gz``
plus one entry per recording in ``ROOT/recordings.json`` (settings, torch, GPU, wall time; kept
out of the run folders, where every ``*.json`` is read as a rank file). A recording that fails or
hangs is logged and skipped. Needs torch + torchvision and one CUDA GPU; ranks of world size 2 share that GPU.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# The base configuration every known-effect change is measured against.
BASE = ["--workers", "4", "--batch", "32", "--image", "128", "--item-us", "500", "--active", "8"]

# The GPU-bound transformer job: 8 x 1024 tokens per step, item cost small, loss.item() each step
# (logging the loss, as most training loops do; it also makes the host step time the GPU step time).
GPU_BOUND = ["--model", "transformer", "--batch", "8", "--item-us", "100", "--active", "6", "--item"]

# (case, run, extra arguments). Repeats are the same settings in separate processes.
PLAN: list[tuple[str, str, list[str]]] = [
    # A host-bound job (ResNet18, 32 x 128 px, the GPU busy ~10 % of the step): drift between runs
    # is host-side wait. Changes with a known effect against it:
    *[("repeat_base", f"run{i}", []) for i in range(1, 5)],
    *[("workers0", f"run{i}", ["--workers", "0"]) for i in (1, 2)],  # ≈ +12 ms/step of host wait
    ("sync_each_step", "run1", ["--sync"]),               # one cudaDeviceSynchronize per step
    ("loss_item_each_step", "run1", ["--item"]),          # one D2H copy + sync per step
    ("fp32_no_amp", "run1", ["--precision", "fp32"]),     # other (fp32/TF32 cuDNN) kernels
    ("no_channels_last", "run1", ["--no-channels-last"]), # NCHW kernels + layout copies
    # A GPU-bound job (GPU busy ~95 %): a transformer LM whose matmuls dominate. Changes:
    # +12.5 % tokens per sequence (about +12 % GPU work) and fp32/TF32 instead of bf16 autocast.
    *[("gpu_bound_repeat", f"run{i}", GPU_BOUND) for i in range(1, 4)],
    ("gpu_bound_seq1152", "run1", [*GPU_BOUND, "--seq", "1152"]),
    ("gpu_bound_tf32_no_amp", "run1", [*GPU_BOUND, "--precision", "tf32"]),
    # Setups for the multi-setup report: the same model and batch per rank; channels_last off because
    # FSDP2 (fully_shard) does not shard non-contiguous parameters. Two ranks share the one GPU over
    # gloo: NCCL refuses two ranks on one device ("Duplicate GPU detected").
    *[("setups", run, ["--no-channels-last", "--active", "5", *extra]) for run, extra in [
        ("single_w1", []),
        ("ddp_w1_nccl", ["--mode", "ddp", "--world", "1", "--backend", "nccl"]),
        ("fsdp_full_w1_nccl", ["--mode", "fsdp_full", "--world", "1", "--backend", "nccl"]),
        ("fsdp_gradop_w1_nccl", ["--mode", "fsdp_gradop", "--world", "1", "--backend", "nccl"]),
        ("ddp_w2_gloo", ["--mode", "ddp", "--world", "2", "--backend", "gloo"]),
        ("fsdp_full_w2_gloo", ["--mode", "fsdp_full", "--world", "2", "--backend", "gloo"]),
    ]],
    # One profiler step per rank, as many real multi-rank jobs record; two runs = a repeat pair.
    *[("short_multirank", f"ddp_w2_gloo_1step_run{i}", ["--mode", "ddp", "--world", "2",
                                                        "--backend", "gloo", "--active", "1"]) for i in (1, 2)],
]


# --------------------------------------------------------------------------------------------
# One recording (runs inside each rank's process)
# --------------------------------------------------------------------------------------------

class SyntheticImages:
    """A map-style dataset of uint8 images whose items each cost ``item_us`` µs of CPU.

    The fixed cost stands in for JPEG decoding and augmentation: with too few DataLoader workers
    the GPU waits for it, which is the host-side wait real jobs show.
    """

    def __init__(self, image: int, item_us: int, classes: int = 1000, length: int = 1_000_000):
        self.image, self.item_us, self.classes, self.length = image, item_us, classes, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        import numpy as np
        import torch

        start = time.perf_counter()
        rng = np.random.default_rng(index)
        img = rng.integers(0, 256, size=(3, self.image, self.image), dtype=np.uint8)
        label = int(rng.integers(0, self.classes))
        deadline = start + self.item_us / 1e6
        while time.perf_counter() < deadline:  # the rest of the per-item CPU work
            pass
        return torch.from_numpy(img), label


class SyntheticTokens:
    """Token sequences (next-token targets) for the GPU-bound transformer; ``item_us`` CPU each."""

    def __init__(self, seq: int, item_us: int, vocab: int, length: int = 1_000_000):
        self.seq, self.item_us, self.vocab, self.length = seq, item_us, vocab, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        import numpy as np
        import torch

        start = time.perf_counter()
        tokens = np.random.default_rng(index).integers(0, self.vocab, size=self.seq + 1, dtype=np.int64)
        while time.perf_counter() < start + self.item_us / 1e6:
            pass
        return torch.from_numpy(tokens)


def _transformer(args):
    """A pre-norm transformer language model sized so that GPU work dominates the step."""
    import torch.nn as nn

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(args.vocab, args.d_model)
            layer = nn.TransformerEncoderLayer(args.d_model, args.d_model // 128, 4 * args.d_model,
                                               dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False)
            self.head = nn.Linear(args.d_model, args.vocab)

        def forward(self, tokens):
            return self.head(self.blocks(self.embed(tokens), is_causal=False))

    return TinyLM()


def _wrap_model(model, args, rank: int):
    """Wrap for the requested setup: plain, DDP, or FSDP (full shard / shard grad-op)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    if args.mode == "single":
        return model
    if args.mode == "ddp":
        return DDP(model, device_ids=[0], bucket_cap_mb=args.bucket_mb)
    from torchvision.models.resnet import BasicBlock
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    strategy = ShardingStrategy.FULL_SHARD if args.mode == "fsdp_full" else ShardingStrategy.SHARD_GRAD_OP
    if args.world == 1 or args.fsdp_api == 2:
        # FSDP1 silently falls back to NO_SHARD at world size 1; FSDP2 (fully_shard) shards anyway,
        # so a one-GPU FSDP trace still shows the all-gathers and reduce-scatters.
        from torch.distributed.fsdp import fully_shard

        reshard = args.mode == "fsdp_full"
        for module in model.modules():
            if isinstance(module, BasicBlock):
                fully_shard(module, reshard_after_forward=reshard)
        fully_shard(model, reshard_after_forward=reshard)
        return model
    return FSDP(model, sharding_strategy=strategy, device_id=torch.device("cuda", 0),
                auto_wrap_policy=ModuleWrapPolicy({BasicBlock}), use_orig_params=True)


def record_rank(rank: int, args) -> None:
    """Train ``warm + wait + warmup + active`` steps and export this rank's trace."""
    import torch
    import torch.nn.functional as F
    import torchvision
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    # A bounded intra-op pool: with one thread per core, the main process's collate (workers=0)
    # spins against the DataLoader workers and the step time swings by 10x between runs.
    torch.set_num_threads(args.threads)
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    if args.world:
        import torch.distributed as dist

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        dist.init_process_group(args.backend, rank=rank, world_size=args.world,
                                device_id=dev if args.backend == "nccl" else None)
    torch.backends.cudnn.benchmark = True
    # "tf32": fp32 weights and activations with TF32 tensor-core matmuls, as many fp32 jobs run.
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision != "fp32"

    lm = args.model == "transformer"
    if lm:
        model, dataset = _transformer(args).to(dev), SyntheticTokens(args.seq, args.item_us, args.vocab)
        memory_format = torch.contiguous_format
    else:
        model, dataset = torchvision.models.resnet18(num_classes=1000).to(dev), SyntheticImages(args.image, args.item_us)
        memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        model = model.to(memory_format=memory_format)
    model = _wrap_model(model, args, rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch, shuffle=False,
        num_workers=args.workers, pin_memory=True, persistent_workers=args.workers > 0,
        prefetch_factor=2 if args.workers > 0 else None, drop_last=True)
    batches = iter(loader)
    amp = args.precision == "bf16"

    def forward_loss():
        if lm:
            tokens = next(batches).to(dev, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                logits = model(tokens[:, :-1])
                return F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
        images, labels = next(batches)
        images = images.to(dev, non_blocking=True).float().div_(255)
        images = images.contiguous(memory_format=memory_format)
        labels = labels.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            return F.cross_entropy(model(images), labels)

    def train_step() -> None:
        loss = forward_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.sync:
            torch.cuda.synchronize()
        if args.item:
            float(loss.item())

    for _ in range(args.warm):  # cuDNN autotuning, allocator growth, worker start-up: untraced
        train_step()
    torch.cuda.synchronize()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"rank{rank}.pt.trace.json.gz"
    sched = schedule(wait=1, warmup=1, active=args.active, repeat=1)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched,
                 record_shapes=False, profile_memory=True, with_stack=False,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(2 + args.active):
            train_step()
            prof.step()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if rank == 0:
        meta = {
            "argv": sys.argv[1:], "settings": vars(args), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "gpu": torch.cuda.get_device_name(0), "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            "profiled_wall_s": round(wall, 4), "steps_in_schedule": 2 + args.active,
        }
        (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    if args.world:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    print(f"rank {rank}: {path} {path.stat().st_size / 1e6:.2f} MB, profiled window {wall:.2f} s",
          flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cmd_one(args) -> None:
    if args.world and args.world > 1:
        import torch.multiprocessing as mp

        args.port = _free_port()
        mp.spawn(record_rank, args=(args,), nprocs=args.world, join=True)
    else:
        if args.world:
            args.port = _free_port()
        record_rank(0, args)


# --------------------------------------------------------------------------------------------
# The whole plan, one process per recording
# --------------------------------------------------------------------------------------------

def collect_meta(root: Path) -> None:
    """Move each run's ``meta.json`` into ``root/recordings.json`` (keyed ``case/run``)."""
    index_path = root / "recordings.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    for meta_path in sorted(root.glob("*/*/meta.json")):
        meta = json.loads(meta_path.read_text())
        for key in ("out", "cmd"):
            meta["settings"].pop(key, None)
        meta.pop("argv", None)
        index[meta_path.parent.relative_to(root).as_posix()] = meta
        meta_path.unlink()
    if index:
        index_path.write_text(json.dumps(dict(sorted(index.items())), indent=1) + "\n")


def cmd_all(args) -> int:
    root = Path(args.out)
    failures = 0
    for case, run, extra in PLAN:
        name = f"{case}/{run}"
        if args.only and not any(name.startswith(p) for p in args.only):
            continue
        argv = [sys.executable, __file__, "one", "--out", str(root / case / run), *BASE, *extra,
                *args.extra]
        print(f"== {name}: {shlex.join(argv[2:])}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, start_new_session=True)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout"
        print(f"== {name}: rc={rc} in {time.perf_counter() - t0:.1f} s", flush=True)
        collect_meta(root)
        if rc != 0:
            failures += 1
    print(f"== done: {failures} failed", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("one", help="record one configuration")
    one.add_argument("--out", required=True)
    one.add_argument("--workers", type=int, default=4, help="DataLoader num_workers")
    one.add_argument("--batch", type=int, default=32)
    one.add_argument("--image", type=int, default=128, help="image side in pixels")
    one.add_argument("--item-us", type=int, default=500, help="CPU µs per dataset item")
    one.add_argument("--precision", choices=["bf16", "fp32", "tf32"], default="bf16",
                     help="bf16 = autocast; tf32 = fp32 with TF32 matmuls")
    one.add_argument("--model", choices=["resnet18", "transformer"], default="resnet18")
    one.add_argument("--seq", type=int, default=1024, help="transformer: tokens per sequence")
    one.add_argument("--d-model", type=int, default=2048, help="transformer: width")
    one.add_argument("--layers", type=int, default=4, help="transformer: encoder layers")
    one.add_argument("--vocab", type=int, default=8192, help="transformer: vocabulary size")
    one.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    one.add_argument("--sync", action="store_true", help="torch.cuda.synchronize() every step")
    one.add_argument("--item", action="store_true", help="loss.item() every step (D2H copy + sync)")
    one.add_argument("--mode", choices=["single", "ddp", "fsdp_full", "fsdp_gradop"], default="single")
    one.add_argument("--world", type=int, default=0, help="0 = no process group")
    one.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    one.add_argument("--fsdp-api", type=int, choices=[1, 2], default=2,
                     help="FSDP2 (fully_shard) or FSDP1 (FullyShardedDataParallel; world 1 always uses 2)")
    one.add_argument("--threads", type=int, default=4, help="torch intra-op threads per process")
    one.add_argument("--bucket-mb", type=int, default=25)
    one.add_argument("--warm", type=int, default=4, help="untraced steps before the profiler starts")
    one.add_argument("--active", type=int, default=8, help="profiled steps")
    every = sub.add_parser("all", help="record the whole plan")
    every.add_argument("--out", required=True)
    every.add_argument("--only", nargs="*", default=[], help="case/run prefixes to record")
    every.add_argument("--timeout", type=float, default=150, help="seconds per recording")
    every.add_argument("extra", nargs="*", help="arguments appended to every recording (after --)")
    args = parser.parse_args(argv)
    if args.cmd == "one":
        cmd_one(args)
        return 0
    return cmd_all(args)


if __name__ == "__main__":
    sys.exit(main())
