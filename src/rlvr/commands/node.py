"""`rlvr node start`: a Ray worker node that drains on SIGTERM (rlvr.scale.node), for preemptible machines."""
from __future__ import annotations

from typing import Annotated

import typer

node_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                       help="Ray worker nodes that drain before they are taken away.")


@node_app.command("start", context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def start(ctx: typer.Context,
          address: Annotated[str, typer.Option("--address", help="The Ray head to join (host:port).")],
          grace_s: Annotated[float,
                             typer.Option("--grace-s", help="Seconds between the notice (SIGTERM) and the "
                                                 "kill: the node drains within them.")] = 120.0,
          warm_image: Annotated[list[str] | None, typer.Option(
              "--warm-image", help="A task image to build or pull and unpack before joining (repeatable): "
                                   "dockerfile:DIR, docker-archive:FILE, oci:DIR, NAME.")] = None,
          image_cache: Annotated[str | None, typer.Option(
              "--image-cache", help="The image cache (default $RLVR_IMAGE_CACHE, else ~/.cache/rlvr/images); "
                                    "pool actors must use the same ([sandbox] image_cache).")] = None,
          ) -> None:
    """Join the cluster as a worker node (`ray start --block`; arguments after `--` go to it, e.g. `--
    --num-cpus 4`). On SIGTERM the node drains: nothing new goes there, rlvr's fleets finish or hand back its
    work within the grace period, and the node stops. --warm-image prepares task images first."""
    from rlvr.scale.node import NodeAgent

    agent = NodeAgent(address, grace_s=grace_s, ray_args=list(ctx.args), warm_images=warm_image or (),
                      image_cache=image_cache)
    raise typer.Exit(agent.run())
