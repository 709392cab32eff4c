"""Benchmark the checkpoint mover against `cp -r` of the same tree on the same disk.

Per round (--rounds, 5 by default), builds 10,000 checkpoint shards of 200 KiB (~2 GB: 50 runs x 10
checkpoints x 20 shards) under a temp dir, then, in this order and in the same round, times `cp -r` of the tree,
`sync` (the flush that cp leaves to the kernel but the mover must do before it deletes from hot), and the mover
moving the whole tree to a cold dir (--keep 0: every checkpoint leaves hot, and is deleted from it). The page cache
is not dropped (that needs privileges): both read a hot tree that is warm in the cache because it was just written,
and the mover's verifying re-read of cold goes to the disk (it drops cold pages first, by design).

Run from the repo root: `.venv/bin/python benchmarks/checkpoint_bench.py [--scale 0.25] [--rounds 5]`.
Target, printed and not asserted: in each round the mover (checksums, fsync, the verifying re-read and the delete
from hot included) moves at least 0.8 of the throughput of `cp -r` + `sync`.
"""

import argparse
import hashlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hosts import CHECKPOINT_MOVER

REPO = Path(__file__).resolve().parent.parent
RUNS, CHECKPOINTS, SHARDS, SHARD_BYTES = 50, 10, 20, 200 * 1024
NEEDED_FREE_FACTOR = 3.2
"""The tree, its cp copy and the cold copy, plus slack: free space needed as a multiple of the tree."""
TARGET_RATIO = 0.8
ROUNDS = 5
"""Paired runs: the ratio must hold in each, on a machine whose disk is shared with others."""


def build_tree(hot: Path, runs: int) -> tuple[int, int]:
    """Write runs x CHECKPOINTS x SHARDS shards of random-looking data; return files and bytes."""
    seed = hashlib.sha256(b"checkpoint-bench").digest()
    block = b"".join(hashlib.sha256(seed + i.to_bytes(4, "big")).digest() for i in range(SHARD_BYTES // 32))
    files = 0
    for run in range(runs):
        for step in range(CHECKPOINTS):
            checkpoint = hot / f"team-{run % 12:02d}" / f"run-{run:03d}" / f"step-{(step + 1) * 1000:06d}"
            checkpoint.mkdir(parents=True)
            for shard in range(SHARDS):
                # One differing prefix per shard, so no two files are the same.
                (checkpoint / f"shard-{shard:05d}.safetensors").write_bytes(files.to_bytes(8, "big") + block[8:])
                files += 1
            (checkpoint / "COMPLETE").touch()
    return files, files * SHARD_BYTES


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    return time.perf_counter() - start, done


def line(label: str, seconds: float, files: int, data_bytes: int) -> str:
    return f"{label:<34} {seconds:7.2f} s {files / seconds:10,.0f} files/s {data_bytes / seconds / 1e6:9.1f} MB/s"


def paired_run(base: Path, runs: int) -> float | None:
    """One round: a fresh tree, `cp -r` of it, `sync`, then the mover; the mover's throughput over cp's + sync's."""
    with tempfile.TemporaryDirectory(prefix="checkpoint-bench-", dir=base) as scratch:
        root = Path(scratch)
        hot, cold, cp_copy = root / "hot", root / "cold", root / "cp-copy"
        files, data_bytes = build_tree(hot, runs)
        subprocess.run(["sync"], check=True)
        print(f"tree: {files:,} files, {data_bytes / 1e9:.2f} GB in {runs * CHECKPOINTS} checkpoints under {root}")

        cp_s, cp = timed(["cp", "-r", str(hot), str(cp_copy)])
        sync_s, _ = timed(["sync"])
        if cp.returncode != 0:
            print(cp.stderr, file=sys.stderr)
            return None
        mover_s, mover = timed(
            [sys.executable, str(CHECKPOINT_MOVER), "--hot", str(hot), "--cold", str(cold)]
            + ["--keep", "0"]
        )
        summary = [row for row in mover.stderr.splitlines() if "summary:" in row]
        print(summary[-1] if summary else mover.stderr[-2000:])
        moved = sum(1 for _ in cold.rglob("*.safetensors"))
        if mover.returncode != 0 or moved != files:
            print(f"mover failed (exit {mover.returncode}, {moved} of {files} shards on cold)", file=sys.stderr)
            return None

        print(line("cp -r", cp_s, files, data_bytes))
        print(line("cp -r + sync", cp_s + sync_s, files, data_bytes))
        print(line("mover (copy, sha256, fsync, verify, delete)", mover_s, files, data_bytes))
        ratio = (cp_s + sync_s) / mover_s
        print(f"mover / (cp -r + sync) throughput: {ratio:.2f}; mover / cp -r alone: {cp_s / mover_s:.2f}\n")
        return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the 50 runs to build (1.0 = ~2 GB)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="paired runs, each on a fresh tree")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    runs = max(1, round(RUNS * args.scale))
    base = Path(tempfile.gettempdir())
    free = shutil.disk_usage(base).free
    needed = NEEDED_FREE_FACTOR * runs * CHECKPOINTS * SHARDS * SHARD_BYTES
    if free < needed:
        runs = max(1, int(runs * free / needed))
        print(f"only {free / 1e9:.1f} GB free under {base}: building a smaller tree of {runs} runs")
    print("order in each round: cp -r, sync, then the mover; the hot tree is warm in the page cache for both\n")
    ratios = []
    for _ in range(args.rounds):
        ratio = paired_run(base, runs)
        if ratio is None:
            return 1
        ratios.append(ratio)
    print(f"mover / (cp -r + sync) in {len(ratios)} paired runs: {' '.join(f'{r:.2f}' for r in ratios)} "
          f"(min {min(ratios):.2f}, median {statistics.median(ratios):.2f}; target >= {TARGET_RATIO} in each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
