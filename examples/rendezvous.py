#!/usr/bin/env python3
"""A real rendezvous, as torchrun's static c10d store does it, with nothing but the standard library.

Every task of a gang runs this with the variables the node agent sets (docs/execution.md): rank 0 listens
on MASTER_ADDR:MASTER_PORT, every other rank connects and sends its rank, rank 0 checks that exactly the
ranks 1..WORLD_SIZE-1 came and answers each with the world it saw. Then every rank prints what it was given
(its CUDA_VISIBLE_DEVICES among them), sleeps a while (`--sleep`, seconds) and exits 0.

    python3 examples/rendezvous.py --sleep 30 [--timeout 120] [--checkpoint FILE]

Exit codes: 0 done; 2 bad environment; 3 rendezvous failed (a rank missing, a duplicate, a timeout).
SIGTERM (a cancel, preemption or time limit) writes `--checkpoint` (if given) and exits 143, as a training
job that checkpoints on SIGTERM would.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time


def log(rank: int, message: str) -> None:
    print(f"[rank {rank}] {message}", flush=True)


def serve(addr: str, port: int, world: int, timeout: float) -> list[int]:
    """Rank 0: accept world-1 ranks, answer each with the full list once everyone is in."""
    srv = socket.create_server(("", port), reuse_port=False)
    srv.settimeout(timeout)
    peers, seen = [], [0]
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < world:
            srv.settimeout(max(deadline - time.monotonic(), 0.1))
            conn, _ = srv.accept()
            rank = int(conn.makefile().readline())
            if rank in seen or not 0 < rank < world:
                conn.sendall(b"refused\n")
                raise RuntimeError(f"unexpected rank {rank} (seen {sorted(seen)})")
            seen.append(rank)
            peers.append(conn)
        answer = (json.dumps(sorted(seen)) + "\n").encode()
        for conn in peers:
            conn.sendall(answer)
            conn.close()
    finally:
        srv.close()
    return sorted(seen)


def join(addr: str, port: int, rank: int, timeout: float) -> list[int]:
    """Rank > 0: connect (retrying while rank 0 comes up), send the rank, read the world."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    conn.settimeout(max(deadline - time.monotonic(), 1))
    conn.sendall(f"{rank}\n".encode())
    line = conn.makefile().readline()
    conn.close()
    return json.loads(line)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sleep", type=float, default=30.0, help="seconds to work after the rendezvous")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the other ranks")
    parser.add_argument("--checkpoint", default="", help="file to write on SIGTERM")
    args = parser.parse_args(argv)
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    except (KeyError, ValueError) as exc:
        print(f"missing or bad rendezvous variable: {exc}", file=sys.stderr)
        return 2

    def on_term(signum, _frame):
        if args.checkpoint:
            with open(args.checkpoint, "w") as fh:
                fh.write(f"rank {rank} checkpointed at {time.time():.3f}\n")
        log(rank, f"SIGTERM: checkpoint {'written to ' + args.checkpoint if args.checkpoint else 'skipped'}")
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    log(rank, f"world {world}, master {addr}:{port}, node rank {os.environ.get('NODE_RANK')}, "
              f"local rank {os.environ.get('LOCAL_RANK')} of {os.environ.get('LOCAL_WORLD_SIZE')}")
    try:
        ranks = serve(addr, port, world, args.timeout) if rank == 0 else join(addr, port, rank, args.timeout)
    except (OSError, RuntimeError, ValueError) as exc:
        log(rank, f"rendezvous failed: {exc}")
        return 3
    if ranks != list(range(world)):
        log(rank, f"rendezvous failed: saw ranks {ranks}, expected 0..{world - 1}")
        return 3
    log(rank, f"rendezvous ok: ranks {ranks}")
    log(rank, f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}")
    log(rank, f"job {os.environ.get('GPUPLATFORM_JOB_ID')} role {os.environ.get('GPUPLATFORM_ROLE')} "
              f"task {os.environ.get('GPUPLATFORM_TASK_INDEX')} attempt {os.environ.get('GPUPLATFORM_ATTEMPT')}")
    time.sleep(args.sleep)
    log(rank, "done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
