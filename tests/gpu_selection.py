"""A pytest plugin for tests/test_gpu_tiers.py (``-p gpu_selection``): once collection is final, it
prints one line, ``KERNELPRO_SELECTION {json}``, mapping each collected test's node id to its markers
and to the indices of the ``-k`` expressions in KERNELPRO_SELECT (a JSON list) that select it, as
pytest's own ``-k`` would. One collection answers every split of the GPU tier, where one collection
per expression took 76 s of the CPU suite."""

from __future__ import annotations

import json
import os

import pytest
from _pytest.mark import KeywordMatcher
from _pytest.mark.expression import Expression


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    compiled = [Expression.compile(e) for e in json.loads(os.environ.get("KERNELPRO_SELECT", "[]"))]
    found = {}
    for item in items:
        matcher = KeywordMatcher.from_item(item)
        found[item.nodeid] = {"marks": sorted({m.name for m in item.iter_markers()}),
                              "k": [i for i, c in enumerate(compiled) if c.evaluate(matcher)]}
    print("KERNELPRO_SELECTION " + json.dumps(found))
