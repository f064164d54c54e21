"""Template context every page needs: the cluster clock for the header, the state colors, and whether
this instance is a federation manager (the nav bar then links /federation/), and whether scheduling cycles
have stalled (a line on every page: gpuplatform.scheduling.liveness)."""
from gpuplatform import queries
from gpuplatform.federation.manager import is_manager

from .states import GPU_STATE_COLORS, STATE_COLORS


def platform(request):
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {"state_colors": STATE_COLORS, "gpu_state_colors": GPU_STATE_COLORS}
    from gpuplatform.scheduling.liveness import cycle_stall

    return {"cluster_clock": queries.cluster_clock(), "state_colors": STATE_COLORS,
            "gpu_state_colors": GPU_STATE_COLORS, "federation_manager": is_manager(), "cycle_stall": cycle_stall()}
