"""The planner: ``backend="auto"`` hands each batch of terminators to the CPU or the GPU kernels.

Files: :mod:`.profile` (profiles), :mod:`.work` (work estimates), :mod:`.batches` (decisions and
batches), :mod:`.explain` (explain text), :mod:`.auto` (the auto backend). This package exports
the planner's API below.

Cost model
----------
Before a batch of terminators runs, the host knows each terminator's window range in every
column (binary search over the time-sorted columns). From those ranges the planner derives the
*work* of the batch as a few counts (:data:`FEATURES`):

``launches``     1 per batch (one launch of the combination kernels);
``terminators``  terminators in the batch;
``events``       column events the batch reads (what a GPU would have to hold);
``pairs``        partial sequences x window candidates, summed over the steps (what a scan of the
                 window touches: the GPU's threads);
``matches``      the pairs that are expected to pass the step's conditions (what a kernel that
                 finds candidates through the parameter index touches);
``outputs``      composite events expected (what goes back to the host).

The estimated cost on a device is the dot product of those counts with that device's
coefficients (seconds per unit), read from a :class:`Profile`. ``auto`` takes the cheaper device,
the CPU on ties, and never the GPU when no GPU is usable. Decisions are made per rule and per
batch of terminators, never per candidate.

Profiles
--------
JSON files (format :data:`PROFILE_FORMAT`). The package ships ``profiles/default.json`` (CPU and
GPU coefficients both measured by ``cep-gpu calibrate`` on one machine with an NVIDIA H200 and 16
CPU cores, where the CPU was ahead on seq3 at every window: docs/performance.md). ``cep-gpu calibrate``
writes a profile measured on the current machine to :func:`user_profile_path`. Lookup order of
:func:`load_profile`: an explicit path, ``$CEP_GPU_PROFILE``, the user profile, the default. An
explicit path that is missing or malformed raises :class:`ProfileError`; a malformed *user*
profile (not asked for by name) is skipped with a warning and the default is used.
"""

from ..backends import gpu_usable
from .auto import AutoBackend, BackendStats, backend_for
from .batches import Decision, check_max_batch_latency, decide, plan_batches
from .explain import explain_plan
from .profile import (
    DEVICES,
    FEATURES,
    PROFILE_FORMAT,
    Profile,
    ProfileError,
    default_profile,
    load_profile,
    read_profile,
    user_cache_dir,
    user_profile_path,
)
from .work import RuleWork, StepEstimate, average_launch, estimate_work

__all__ = [
    "DEVICES",
    "FEATURES",
    "PROFILE_FORMAT",
    "AutoBackend",
    "BackendStats",
    "Decision",
    "Profile",
    "ProfileError",
    "RuleWork",
    "StepEstimate",
    "average_launch",
    "backend_for",
    "check_max_batch_latency",
    "decide",
    "default_profile",
    "estimate_work",
    "explain_plan",
    "gpu_usable",
    "load_profile",
    "plan_batches",
    "read_profile",
    "user_cache_dir",
    "user_profile_path",
]
