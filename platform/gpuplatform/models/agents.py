"""Which nodes a node-agent credential may act for (issue #12: one shared token could report any node)."""
from django.conf import settings
from django.db import models


class NodeAgentScope(models.Model):
    """The nodes a node-agent user (its API token) may register, heartbeat, read assignments of and report
    for. `nodes`: node names; "*" = every node (a fully trusted agent; discouraged). A node the scope names
    joins ready when first registered (a bootstrap token naming the nodes it may add); a node registered by
    an agent whose scope does not name it joins cordoned, awaiting an admin's acceptance (uncordon), and is
    added to that agent's scope so it can keep reporting. A node-agent user without a scope row has an
    empty scope."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_scope")
    nodes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def covers(self, name: str) -> bool:
        return "*" in self.nodes or name in self.nodes

    def __str__(self) -> str:
        return f"{self.user}: {', '.join(self.nodes) or '(no node)'}"
