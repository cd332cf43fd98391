"""One registry for every swappable component (attention modes, decoders, encoders), so an
unknown name fails the same way everywhere: a ValueError that names the config key and lists
the valid names (never a KeyError or an `assert`, which `python -O` strips)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """name -> entry (a class, a builder or a spec record). `key` is the config key users set
    (e.g. 'attention' for `attention=<name>`): it goes into the error message."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.key} '{name}' is registered twice")
        self._entries[name] = entry
        return entry

    def register(self, name: str, **defaults) -> Callable:
        """Class decorator: `@REG.register("scaled_dot", scaled=True)` registers the class with
        `defaults` fixed (a functools.partial: callers' keywords still win)."""

        def wrap(cls):
            self.add(name, functools.partial(cls, **defaults) if defaults else cls)
            return cls

        return wrap

    def __getitem__(self, name: str) -> T:
        if name not in self._entries:
            raise ValueError(f"unknown {self.key} '{name}'; valid: {', '.join(self.names())}")
        return self._entries[name]

    def target(self, name: str):
        """The class (or function) behind a name, without the keywords a variant fixes: what
        declares a component's needs and whose signature its settings come from."""
        entry = self[name]
        return entry.func if isinstance(entry, functools.partial) else entry

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return sorted(self._entries)
