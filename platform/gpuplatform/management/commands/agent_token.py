"""`manage.py agent_token NODE [NODE ...] [--user NAME]`: print a node-agent API token scoped to the named
nodes (one node per token is the rule; several = a bootstrap token for nodes still to join, which then
join ready). "*" = every node (a fully trusted agent). The user is a node agent's own: a new one, or one already in
the node-agents group (a person's account is refused). Replaces (revokes) the user's previous tokens. The token
is printed once: only its hash is stored (services/tokens.py); it expires after AGENT_TOKEN_TTL_DAYS."""
from django.core.management.base import CommandError

from gpuplatform import services
from gpuplatform.management.base import DatabaseCommand


class Command(DatabaseCommand):
    help = __doc__

    def add_arguments(self, parser):
        parser.add_argument("nodes", nargs="+", help="node names the token may act for")
        parser.add_argument("--user", help="the agent user's name (default agent-<first node>)")

    def handle(self, *args, **opts):
        try:
            self.stdout.write(services.issue_node_agent_token(opts["nodes"], username=opts["user"]))
        except services.ValidationError as exc:
            raise CommandError(str(exc.errors)) from None
