"""Scripted registry client and clock for reconciler unit tests (no network)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

import pytest

from stockade.images.reference import ImageReference
from stockade.images.registry import RegistryError
from stockade.reflector.repository import RegistryAccess
from stockade.reflector.store import TagStore

START = datetime.datetime(2025, 5, 27, 12, 0, 0, tzinfo=datetime.timezone.utc)


@dataclass
class Clock:
    now: datetime.datetime = START

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


@dataclass
class FakeRegistry:
    """Tags and digests per repository path; records every call and the access settings used."""

    tags: dict[str, list[str]] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)  # "path:tag" -> digest
    fail_with: Exception | None = None
    list_calls: list[str] = field(default_factory=list)
    digest_calls: list[str] = field(default_factory=list)
    accesses: list[RegistryAccess] = field(default_factory=list)

    def factory(self, access: RegistryAccess) -> "FakeRegistry":
        self.accesses.append(access)
        return self

    def list_tags(self, repo_ref: ImageReference, page_size: int | None = None) -> list[str]:
        self.list_calls.append(repo_ref.path)
        if self.fail_with is not None:
            raise self.fail_with
        if repo_ref.path not in self.tags:
            raise RegistryError(f"list tags of {repo_ref.name()}: HTTP 404", status=404)
        return list(self.tags[repo_ref.path])

    def resolve_digest(self, ref: ImageReference) -> str:
        self.digest_calls.append(f"{ref.path}:{ref.tag}")
        if self.fail_with is not None:
            raise self.fail_with
        return self.digests[f"{ref.path}:{ref.tag}"]

    def push(self, path: str, tag: str, digest: str) -> None:
        self.tags.setdefault(path, [])
        if tag not in self.tags[path]:
            self.tags[path].append(tag)
        self.digests[f"{path}:{tag}"] = digest


@pytest.fixture()
def clock() -> Clock:
    return Clock()


@pytest.fixture()
def registry() -> FakeRegistry:
    return FakeRegistry()


@pytest.fixture()
def store(tmp_path) -> TagStore:  # type: ignore[no-untyped-def]
    return TagStore(tmp_path / "store")
