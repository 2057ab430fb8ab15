"""The target registry: a target's name (``Options.target``) -> its Target object.

Place in the pipeline: looked up wherever a stage does something target-specific
(scheduler/passes.py, polycomp/driver.py, polycomp/build.py, polycomp/runtime.py), and by
Options to check the name. A factory is called once, on the first lookup, so that
registering a target imports nothing heavy (polycomp/targets/__init__.py registers the
built-in ones; options.py imports this module).
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from polycomp.errors import UnknownTargetError

if TYPE_CHECKING:
    from .base import Target

_FACTORIES: dict[str, Callable[[], Target]] = {}
_TARGETS: dict[str, Target] = {}
_LOCK = threading.Lock()


def register_target(name: str, factory: Callable[[], Target]) -> None:
    """Make ``name`` a target: ``factory()`` (a Target subclass, or a function returning
    an instance) builds its object on first use. Registering a name again replaces it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a target's name is a non-empty string, not {name!r}")
    with _LOCK:
        _FACTORIES[name] = factory
        _TARGETS.pop(name, None)


def unregister_target(name: str) -> None:
    """Forget ``name`` (tests that register a target of their own)."""
    with _LOCK:
        _FACTORIES.pop(name, None)
        _TARGETS.pop(name, None)


def target_names() -> tuple[str, ...]:
    """The registered targets' names, in registration order."""
    return tuple(_FACTORIES)


def check_target_name(name: object) -> None:
    """UnknownTargetError unless ``name`` is a registered target; the hint lists them."""
    if isinstance(name, str) and name in _FACTORIES:
        return
    known = target_names()
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = (f"did you mean '{close[0]}'? " if close else "") + f"known targets: {', '.join(known)}"
    raise UnknownTargetError(f"option 'target' cannot be {name!r}: no such target", hint=hint)


def get_target(name: str) -> Target:
    """The Target object registered as ``name`` (built on first use)."""
    target = _TARGETS.get(name)
    if target is not None:
        return target
    check_target_name(name)
    with _LOCK:
        target = _TARGETS.get(name)
        if target is None:
            target = _FACTORIES[name]()
            if getattr(target, "name", None) != name:
                raise ValueError(f"the target registered as '{name}' calls itself "
                                 f"{getattr(target, 'name', None)!r}")
            _TARGETS[name] = target
    return target
