"""Colors that mean the same on every page: job states, task states, and the chart series.

Defined once here; badges get their CSS from STATE_COLORS (see the base template) and charts take
their line colors from the same dict, so "running" is the same green in a badge and in a plot.
"""
from __future__ import annotations

STATE_COLORS: dict[str, str] = {
    "pending": "#b7791f",     # amber: waiting for capacity
    "admitted": "#3182ce",    # blue: bound, not yet reported running
    "running": "#2f855a",     # green
    "preempting": "#c05621",  # orange: evicted, in its grace period
    "succeeded": "#4a5568",   # slate: done
    "failed": "#c53030",      # red
    "cancelled": "#718096",   # grey
    # task states that have no job counterpart
    "bound": "#3182ce",
    "released": "#a0aec0",
}

# Series of the cluster charts (not states, but colored once here too).
SERIES_COLORS: dict[str, str] = {
    "allocation_rate": "#2b6cb0",
    "fragmentation_rate": "#c05621",
    "used": STATE_COLORS["running"],
    "pending_demand": STATE_COLORS["pending"],
    "quota": "#1a202c",
    "guarantee": "#718096",
    "limit": "#c53030",
}

# A stable palette for per-queue / per-team lines (teams are many; states are few).
PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
)


def state_color(state: str) -> str:
    return STATE_COLORS.get(state, "#718096")

# What one GPU is doing, on the topology map (frontend/topology.py defines how a GPU gets its state).
GPU_STATE_COLORS: dict[str, str] = {
    "free": "#90cdf4",                          # light blue: healthy, on a ready node, unallocated
    "running": STATE_COLORS["running"],         # held by a job within its queue's quota
    "borrowed": "#805ad5",                      # purple: held by a job above its queue's quota
    "preempting": STATE_COLORS["preempting"],   # held by a job in its eviction grace period
    "held": "#319795",                          # teal: reserved for a job that has not started (not free)
    "unhealthy": STATE_COLORS["failed"],        # GPU unhealthy (XID/ECC) or node not ready
    "cordoned": "#4a5568",                      # free GPU on a cordoned or draining node
}

# Series of the watermark and fragmentation charts.
SERIES_COLORS.update({
    "borrowed": GPU_STATE_COLORS["borrowed"],
    "fair_share": "#2b6cb0",
    "held": GPU_STATE_COLORS["held"],  # teal: reserved for the queue's jobs that have not started
    "free_gpus": GPU_STATE_COLORS["free"],
    "domain_completeness": "#2f855a",
})
