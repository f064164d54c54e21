"""Peer comparisons side by side (issue 16): Helios, Slurm and FGD on the product's own input.

    python benchmarks/peers/run.py [--full] [--only helios,slurm,fgd]      (make bench-peers)

Each peer needs something this repository does not ship; a peer whose needs are missing is skipped with
a message saying what to install or fetch (exit status 0), so this runs anywhere:

- helios: the Helios simulator's sources (S-Lab-System-Group/HeliosArtifact, fetched and written out with
  `python3 benchmarks/peers/extract_git.py <git dir> $PEERS_WORK/helios-artifact`) and pandas;
- slurm: Debian's slurmctld and slurm-client (`apt-get install -y --no-install-recommends slurmctld
  slurm-client`);
- fgd: Alibaba's FGD simulator built at $PEERS_WORK/fgd/bin/simon (hkust-adsl/kubernetes-scheduler-simulator,
  `GOFLAGS=-mod=vendor GOPROXY=off go build -o bin/simon ./cmd` there; golang-go from Debian).

PEERS_WORK defaults to `peers-work` in the system temp folder. Each script prints the load average and
compares inside one run (ratios), as benchmarks/RESULTS.md records them.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORK = Path(os.environ.get("PEERS_WORK") or Path(tempfile.gettempdir()) / "peers-work")


def missing(peer: str) -> str | None:
    """What the peer still needs on this machine, or None when it can run."""
    if peer == "helios":
        if not (WORK / "helios-artifact" / "framework" / "QSSF Service" / "utils.py").exists():
            return (f"Helios sources not found under {WORK}/helios-artifact: fetch github:S-Lab-System-Group/"
                    f"HeliosArtifact and run python3 benchmarks/peers/extract_git.py <git dir> {WORK}/helios-artifact")
        if importlib.util.find_spec("pandas") is None:
            return "pandas is not installed in this virtualenv (pip install pandas)"
        return None
    if peer == "slurm":
        if not (shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()) or not shutil.which("scontrol"):
            return "Slurm not installed: apt-get install -y --no-install-recommends slurmctld slurm-client"
        return None
    if peer == "fgd":
        if not (WORK / "fgd" / "bin" / "simon").exists():
            return (f"FGD simulator not built at {WORK}/fgd/bin/simon: fetch github:hkust-adsl/kubernetes-scheduler-"
                    f"simulator, extract it to {WORK}/fgd, apt-get install -y golang-go, then GOFLAGS=-mod=vendor "
                    f"GOPROXY=off go build -o bin/simon ./cmd there")
        return None
    raise ValueError(f"unknown peer {peer!r}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="each script's --full input")
    ap.add_argument("--only", default="helios,slurm,fgd", help="comma-separated peers (default: all three)")
    args = ap.parse_args(argv)
    status = 0
    for peer in args.only.split(","):
        need = missing(peer)
        if need is not None:
            print(f"skip {peer}: {need}", flush=True)
            continue
        cmd = [sys.executable, str(HERE / f"{peer}_vs_ours.py"), *(["--full"] if args.full else [])]
        print("$", " ".join(cmd), flush=True)
        status |= subprocess.run(cmd, cwd=ROOT).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
