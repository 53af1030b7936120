"""Planner profiles: the cost coefficients per device, read from JSON (shipped default,
user profile, ``$CEP_GPU_PROFILE`` or a given path)."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import CepError, is_finite_nonnegative

FEATURES = ("launches", "terminators", "events", "pairs", "matches", "outputs")


PROFILE_FORMAT = "cep-gpu-profile/1"


DEVICES = ("cpu", "gpu")


class ProfileError(CepError, ValueError):
    """A planner profile that cannot be used (missing file, bad JSON, missing or bad constant)."""


@dataclass(frozen=True)
class Profile:
    """Linear cost coefficients (seconds per unit of each feature) for the CPU and the GPU."""

    cpu: Mapping[str, float]
    gpu: Mapping[str, float]
    source: str = "<memory>"
    meta: Mapping[str, object] = field(default_factory=dict)

    def cost(self, device: str, features: Mapping[str, float]) -> float:
        """Estimated seconds for a batch with these feature counts on ``device``."""
        coef = self.cpu if device == "cpu" else self.gpu
        # A feature that costs nothing adds nothing, however large its count: an unbounded Kleene
        # step can expect inf sets, and 0 * inf would make the whole estimate NaN.
        return float(
            sum(c * float(features.get(f, 0.0)) for f in FEATURES if (c := coef.get(f, 0.0)) != 0.0)
        )

    def to_json(self) -> dict:
        return {
            "format": PROFILE_FORMAT,
            "cpu": dict(self.cpu),
            "gpu": dict(self.gpu),
            "meta": dict(self.meta),
        }

    @classmethod
    def from_json(cls, data: object, source: str = "<memory>") -> Profile:
        """Validate and build a profile; raises :class:`ProfileError` naming the fault."""
        if not isinstance(data, dict):
            raise ProfileError(
                f"profile {source}: expected a JSON object, got {type(data).__name__}"
            )
        fmt = data.get("format")
        if fmt != PROFILE_FORMAT:
            raise ProfileError(
                f"profile {source}: 'format' must be {PROFILE_FORMAT!r}, got {fmt!r}"
            )
        coefs = {}
        for dev in DEVICES:
            block = data.get(dev)
            if not isinstance(block, dict):
                raise ProfileError(
                    f"profile {source}: missing the {dev!r} object of cost coefficients"
                )
            unknown = sorted(set(block) - set(FEATURES))
            if unknown:
                raise ProfileError(
                    f"profile {source}: unknown {dev} coefficient(s) {unknown}; known: {list(FEATURES)}"
                )
            for k, v in block.items():
                if not is_finite_nonnegative(v):
                    raise ProfileError(
                        f"profile {source}: {dev}.{k} must be a finite number >= 0 (seconds), got {v!r}"
                    )
            coefs[dev] = {k: float(block.get(k, 0.0)) for k in FEATURES}
        meta = data.get("meta", {})
        if not isinstance(meta, dict):
            raise ProfileError(f"profile {source}: 'meta' must be an object")
        return cls(coefs["cpu"], coefs["gpu"], source, meta)

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")
        return path


def user_cache_dir() -> Path:
    """The per-user cache directory of cep-gpu (``platformdirs`` when installed)."""
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("cep-gpu"))
    except ImportError:  # fall back to the XDG convention
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "cep-gpu"


def user_profile_path() -> Path:
    """Where ``cep-gpu calibrate`` writes its profile by default."""
    return user_cache_dir() / "profile.json"


def default_profile() -> Profile:
    """The profile shipped with the package."""
    text = resources.files("cep_gpu").joinpath("profiles/default.json").read_text()
    return Profile.from_json(json.loads(text), "cep_gpu/profiles/default.json")


def read_profile(path: str | os.PathLike) -> Profile:
    """Read a profile file; :class:`ProfileError` if it is missing or malformed."""
    p = Path(path)
    if p.is_dir():
        raise ProfileError(f"profile {p}: a folder, not a profile file")
    if not p.is_file():
        raise ProfileError(
            f"profile {p}: no such file (run `cep-gpu calibrate --out {p}` to write one)"
        )
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ProfileError(
            f"profile {p}: not valid JSON ({type(exc).__name__}: {str(exc)[:120]})"
        ) from None
    try:
        return Profile.from_json(data, str(p))
    except ProfileError:
        raise
    except (
        TypeError,
        ValueError,
        OverflowError,
        RecursionError,
    ) as exc:  # (a 400-digit coefficient)
        raise ProfileError(
            f"profile {p}: malformed ({type(exc).__name__}: {str(exc)[:120]})"
        ) from None


def load_profile(path: str | os.PathLike | Profile | None = None) -> Profile:
    """The profile to plan with: ``path`` if given (errors raise), else ``$CEP_GPU_PROFILE``
    (errors raise), else the user profile (errors warn and fall back), else the default."""
    if isinstance(path, Profile):
        return path
    if path is not None:
        return read_profile(path)
    env = os.environ.get("CEP_GPU_PROFILE")
    if env:
        return read_profile(env)
    user = user_profile_path()
    if user.is_file():
        try:
            return read_profile(user)
        except ProfileError as exc:
            warnings.warn(f"{exc}; using the default profile instead", stacklevel=2)
    return default_profile()
