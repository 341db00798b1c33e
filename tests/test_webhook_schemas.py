"""``validate_webhook``: real payloads against ``@octokit/webhooks-schemas`` (same release as the
examples), and broken ones rejected with the JSON path of what is wrong.

Skipped, with the command to run, only when the pinned packages are not cached and npm is missing.
"""

from __future__ import annotations

from pathlib import Path

import github_spec
import pytest
from github_spec import (
    SCHEMAS_MEMBER,
    SCHEMAS_PACKAGE,
    SpecUnavailable,
    valid_webhook_example,
    validate_webhook,
    webhook_examples,
)


def test_schemas_pinned_to_the_examples_release() -> None:
    assert SCHEMAS_PACKAGE.rpartition("@")[2] == github_spec.WEBHOOKS_PACKAGE.rpartition("@")[2]


def test_every_real_labeled_example_is_valid() -> None:
    examples = webhook_examples("pull_request", "labeled")
    assert examples
    for i, payload in enumerate(examples):
        assert validate_webhook("pull_request", "labeled", payload) == [], f"example {i}"


# issue_comment.created example 0 of @octokit/webhooks-examples@7.6.1 is older than the 7.6.1
# schema: it lacks fields the schema has since made required. Pinned exactly, so an upstream fix
# (or a new gap) shows up here; the other examples, and every payload the tests build, are valid.
STALE_COMMENT_EXAMPLE_ERRORS = [
    "$.comment: 'performed_via_github_app' is a required property",
    "$.comment: 'reactions' is a required property",
    "$.issue: 'active_lock_reason' is a required property",
    "$.issue: 'reactions' is a required property",
    "$.issue.labels[0]: 'description' is a required property",
    "$.repository: 'is_template' is a required property",
    "$.repository: 'web_commit_signoff_required' is a required property",
    "$.repository: 'topics' is a required property",
    "$.repository: 'visibility' is a required property",
    "$.repository: 'custom_properties' is a required property",
]


def test_every_real_comment_example_is_valid_but_the_stale_first() -> None:
    examples = webhook_examples("issue_comment", "created")
    assert len(examples) >= 2
    assert validate_webhook("issue_comment", "created", examples[0]) == STALE_COMMENT_EXAMPLE_ERRORS
    for i, payload in enumerate(examples[1:], start=1):
        assert validate_webhook("issue_comment", "created", payload) == [], f"example {i}"


def test_missing_required_field_is_named() -> None:
    payload = valid_webhook_example("issue_comment", "created")
    del payload["comment"]["user"]
    assert validate_webhook("issue_comment", "created", payload) == [
        "$.comment: 'user' is a required property"
    ]
    payload = valid_webhook_example("pull_request", "labeled")
    del payload["pull_request"]["head"]["sha"]
    assert validate_webhook("pull_request", "labeled", payload) == [
        "$.pull_request.head: 'sha' is a required property"
    ]


def test_wrong_type_is_named() -> None:
    payload = valid_webhook_example("issue_comment", "created")
    payload["issue"]["number"] = "1"
    assert validate_webhook("issue_comment", "created", payload) == [
        "$.issue.number: '1' is not of type 'integer'"
    ]
    payload = valid_webhook_example("pull_request", "labeled")
    payload["number"] = None
    assert validate_webhook("pull_request", "labeled", payload) == [
        "$.number: None is not of type 'integer'"
    ]


def test_oneof_and_extra_keys_are_named() -> None:
    payload = valid_webhook_example("issue_comment", "created")
    payload["issue"]["assignee"] = 3  # a user or null
    payload["issue"]["pull_request"] = {"url": "https://api.github.com/x", "number": 1}
    errors = validate_webhook("issue_comment", "created", payload)
    assert len(errors) == 2
    assert errors[0].startswith("$.issue.assignee: 3 is not valid under any of the given schemas")
    assert errors[1] == (
        "$.issue.pull_request: Additional properties are not allowed ('number' was unexpected)"
    )


def test_wrong_action_and_unknown_event() -> None:
    payload = valid_webhook_example("pull_request", "labeled")
    assert "$.action: 'labeled' is not one of ['unlabeled']" in validate_webhook(
        "pull_request", "unlabeled", payload
    )
    # without an action: the event's whole schema, any of its actions
    assert validate_webhook("pull_request", None, payload) == []
    with pytest.raises(KeyError, match="no webhook schema 'pull_request\\$nope'"):
        validate_webhook("pull_request", "nope", payload)


def test_without_npm_or_cache_it_says_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELPRO_GITHUB_SPECS", str(tmp_path))
    monkeypatch.setattr(github_spec.shutil, "which", lambda _name: None)
    with pytest.raises(SpecUnavailable, match="npm is not installed") as info:
        github_spec.ensure(SCHEMAS_PACKAGE, SCHEMAS_MEMBER)
    assert "python tests/github_spec.py" in str(info.value)
