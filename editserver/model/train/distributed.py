"""Data-parallel training on torch.distributed: the few helpers a training loop needs.

Design decisions:
- Launch is torchrun's job (``torchrun --nproc-per-node N -m editserver.cli train ...``): ``init_from_env``
  reads the variables it sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) and does nothing when
  they are absent, so a plain ``editserver train`` is world size 1 with no process group at all.
- Backend follows the device: gloo on CPU, nccl on CUDA (each rank on ``cuda:LOCAL_RANK``).
- ``wrap``: DDP for models that fit one device (gradients averaged across ranks in the backward), or
  FSDP2 (``torch.distributed.fsdp.fully_shard``, one unit per transformer block, then the root) for
  ones that do not. Both average, so a per-rank batch of ``global / world`` rows with the per-row-mean
  loss gives the gradient of the global batch: the batch size and learning rate mean the same thing
  at any world size (``per_rank_batch``).
- Full state dicts only: ``full_state`` gathers a plain state dict on rank 0 (FSDP2 via
  ``get_model_state_dict(full_state_dict=True)``), so a checkpoint written by any world size loads
  into any other, and into the server, unchanged.
- ``mean_over_ranks`` averages logged scalars (one all-reduce of a small float64 vector), so rank 0
  logs the global batch's loss, not its own shard's.
- ``weights_digest`` hashes a rank's parameters bit for bit; gathered by ``all_digests`` it proves the
  replicas are identical (DDP broadcasts the initial weights and all-reduces gradients, so they must be).
"""

from __future__ import annotations

import datetime
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import nn

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    """This process's place in the run: rank 0 of 1 when not started by torchrun."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: str = "cpu"

    @property
    def main(self) -> bool:
        """Rank 0 alone evaluates, logs, prints and writes checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def launched() -> bool:
    """Whether torchrun (or another launcher using its variables) started this process."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_from_env(device: str = "cpu", timeout_s: float = 1800.0) -> World:
    """Join the process group torchrun describes in the environment (no-op without it); ``device``
    cpu uses gloo, cuda uses nccl on ``cuda:LOCAL_RANK``. ``timeout_s`` bounds every collective,
    rank 0's corpus build included (the others wait for it at a barrier)."""
    if not launched():
        return World(device=device)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return World(rank, size, local, device)


def close(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def per_rank_batch(global_batch: int, world: World, what: str = "--batch-size") -> int:
    """Rows each rank takes of a global batch; the global batch must split evenly."""
    if global_batch % world.size:
        raise ValueError(f"{what} {global_batch} does not split over {world.size} processes")
    return global_batch // world.size


def shard(items: Sequence[T], world: World) -> Sequence[T]:
    """This rank's contiguous share of ``items`` (sizes differ by at most one; a slice of an array
    stays an array). Contiguous, so the shards concatenated in rank order are ``items``."""
    n = len(items)
    lo, hi = n * world.rank // world.size, n * (world.rank + 1) // world.size
    return items[lo:hi]


def wrap(model: nn.Module, world: World, fsdp: bool = False, find_unused: bool = False) -> nn.Module:
    """The module to train: ``model`` itself at world size 1, else DDP or (``fsdp``) FSDP2. The
    unwrapped ``model`` keeps its parameters (DDP) or becomes the sharded module (FSDP2 shards in place)."""
    if not world.distributed:
        return model
    if fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(world.device.split(":")[0], (world.size,))
        for block in getattr(model, "layers", []):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [world.local_rank] if world.device.startswith("cuda") else None
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module under a DDP wrapper (FSDP2 modules are their own)."""
    return getattr(model, "module", model)


def full_state(model: nn.Module, fsdp: bool = False) -> dict[str, torch.Tensor]:
    """The whole model's state dict as plain CPU tensors on rank 0 (empty on other ranks under FSDP2).
    Under FSDP2 every rank must call it: it is a collective."""
    if fsdp:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=opts)
    return {k: v.detach().cpu() for k, v in unwrap(model).state_dict().items()}


def full_optimizer_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    """FSDP2: the optimizer's state keyed by parameter names, gathered on rank 0 (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, opt, options=opts)


def load_full_optimizer_state(model: nn.Module, opt: torch.optim.Optimizer, state: dict) -> None:
    """FSDP2: restore ``full_optimizer_state``'s output on every rank (each keeps its shard)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, opt, state, options=StateDictOptions(full_state_dict=True))


def mean_over_ranks(values: dict[str, float], world: World) -> dict[str, float]:
    """Each value averaged over the ranks (every rank gets the result); identity at world size 1."""
    if not world.distributed or not values:
        return dict(values)
    keys = sorted(values)
    dev = world.device if world.device.startswith("cuda") else "cpu"
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=dev)  # [K]
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return {k: float(v) / world.size for k, v in zip(keys, t.tolist())}


def sum_over_ranks(value: int, world: World) -> int:
    """An integer count summed over the ranks (tokens seen by the whole step)."""
    if not world.distributed:
        return value
    dev = world.device if world.device.startswith("cuda") else "cpu"
    t = torch.tensor([value], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return int(t.item())


def weights_digest(model: nn.Module) -> str:
    """SHA-256 of this rank's parameters' bytes in name order (its local shard under FSDP2)."""
    h = hashlib.sha256()
    for name, p in sorted(unwrap(model).named_parameters()):
        local = p.to_local() if hasattr(p, "to_local") else p
        h.update(name.encode())
        h.update(local.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def all_digests(model: nn.Module, world: World) -> list[str]:
    """Every rank's ``weights_digest``, in rank order (on every rank)."""
    mine = weights_digest(model)
    if not world.distributed:
        return [mine]
    out: list[str] = [""] * world.size
    dist.all_gather_object(out, mine)
    return out
