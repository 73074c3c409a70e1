"""Optional imports (torch, torchvision, numpy) and the CUDA state, each looked
up once.  Nothing here raises on a bare python3: callers get a reason string."""

from __future__ import annotations

import warnings
from typing import Any

_cache: dict[str, Any] = {}


class Missing(Exception):
    """An optional package is not importable; str() is the reason."""


def _load(name):
    if name in _cache:
        return _cache[name]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = __import__(name)
        value: tuple[Any, str | None] = (module, None)
    except ImportError as exc:
        value = (None, "%s not installed (%s)" % (name, exc))
    except Exception as exc:  # a broken install: report it, do not crash
        value = (None, "%s failed to import: %s: %s" % (name, type(exc).__name__, exc))
    _cache[name] = value
    return value


def get(name):
    module, reason = _load(name)
    if module is None:
        raise Missing(reason)
    return module


def torch():
    return get("torch")


def torchvision():
    get("torch")
    return get("torchvision")


def version_of(name):
    module, _ = _load(name)
    return getattr(module, "__version__", None) if module is not None else None


def first_sentence(text):
    """'Found no NVIDIA driver on your system. Please check ...' -> the first
    sentence, without the trailing full stop."""
    text = " ".join(text.strip().split())
    head = text.split(". ")[0]
    return head.rstrip(".")


def cuda_state():
    """{"available", "count", "reason", "build_cuda"}; never raises."""
    if "cuda" in _cache:
        return _cache["cuda"]
    state: dict[str, Any] = {"available": False, "count": 0, "reason": None, "build_cuda": None}
    torch_mod, reason = _load("torch")
    if torch_mod is None:
        state["reason"] = reason
        _cache["cuda"] = state
        return state
    state["build_cuda"] = getattr(torch_mod.version, "cuda", None)
    if state["build_cuda"] is None:
        state["reason"] = "torch %s is a CPU-only build (torch.version.cuda is None)" % torch_mod.__version__
    else:
        try:
            available = torch_mod.cuda.is_available()
        except Exception as exc:
            available = False
            state["reason"] = "torch.cuda.is_available() raised %s: %s" % (type(exc).__name__, exc)
        if available:
            state["available"] = True
            state["count"] = torch_mod.cuda.device_count()
        elif state["reason"] is None:
            # is_available() is False: ask CUDA initialisation for the reason
            try:
                torch_mod.cuda.init()
                state["reason"] = "torch.cuda.is_available() is False"
            except Exception as exc:
                state["reason"] = first_sentence(str(exc)) or type(exc).__name__
    _cache["cuda"] = state
    return state
