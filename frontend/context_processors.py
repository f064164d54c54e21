"""Template context every page needs: the cluster clock for the header, and the state colors."""
from gpuplatform import queries

from .states import GPU_STATE_COLORS, STATE_COLORS


def platform(request):
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {"state_colors": STATE_COLORS, "gpu_state_colors": GPU_STATE_COLORS}
    return {"cluster_clock": queries.cluster_clock(), "state_colors": STATE_COLORS,
            "gpu_state_colors": GPU_STATE_COLORS}
