"""The fake GitHub itself: PyGithub reaches it, it checks requests against GitHub's OpenAPI
description, paginates like GitHub, and injected errors reach PyGithub as GitHub's would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_github import FakeGitHub
from github import Github, GithubException, RateLimitExceededException

HEAD = "b" * 40
BASE = "a" * 40


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub.running() as f:
        f.add_repo("o/r", sha=BASE)
        f.add_pull("o/r", head_ref="feat", head_sha=HEAD, labels=("optimize-kernels",))
        yield f


@pytest.fixture
def gh(fake: FakeGitHub) -> Github:
    return fake.client(per_page=2)


def test_pull_request_shape_and_urls_stay_local(fake: FakeGitHub, gh: Github) -> None:
    pull = gh.get_repo("o/r").get_pull(1)
    assert (pull.head.sha, pull.head.ref, pull.base.sha, pull.base.ref) == (
        HEAD,
        "feat",
        BASE,
        "main",
    )
    assert pull.head.repo.full_name == "o/r" and not pull.head.repo.fork
    assert pull.issue_url.startswith(fake.base_url)
    assert [label.name for label in pull.labels] == ["optimize-kernels"]
    assert all(r.template for r in fake.requests)


def test_fork_pull_request(fake: FakeGitHub, gh: Github) -> None:
    fake.add_pull("o/r", head_ref="main", head_sha="c" * 40, head_repo="mallory/r")
    pull = gh.get_repo("o/r").get_pull(2)
    assert pull.head.repo.full_name == "mallory/r"
    assert pull.head.repo.fork and pull.head.label == "mallory:main"


def test_bad_request_body_is_caught(fake: FakeGitHub, gh: Github) -> None:
    requester = gh.requester
    with pytest.raises(GithubException) as info:
        requester.requestJsonAndCheck("POST", "/repos/o/r/issues/1/comments", input={"bodyy": "x"})
    assert info.value.status == 422
    errors = fake.take_errors()
    assert any("'body' is a required property" in e for e in errors), errors
    assert fake.comments == {}


def test_unknown_route_and_query_parameter_are_caught(fake: FakeGitHub, gh: Github) -> None:
    with pytest.raises(GithubException) as info:
        gh.requester.requestJsonAndCheck("GET", "/repos/o/r/kernels")
    assert info.value.status == 404
    with pytest.raises(GithubException):
        gh.requester.requestJsonAndCheck("GET", "/repos/o/r/pulls", parameters={"colour": "red"})
    with pytest.raises(GithubException):
        gh.requester.requestJsonAndCheck("GET", "/repos/o/r/pulls", parameters={"state": "merged"})
    errors = fake.take_errors()
    assert len(errors) == 3, errors
    assert "no such path" in errors[0]
    assert "unknown query parameter 'colour'" in errors[1]
    assert "state" in errors[2]
    with pytest.raises(AssertionError):
        fake.errors.append("x")
        fake.check()
    fake.take_errors()


def test_comment_pagination_over_three_pages(fake: FakeGitHub, gh: Github) -> None:
    for i in range(5):
        fake.add_comment("o/r", 1, f"comment {i}", user="alice")
    pull = gh.get_repo("o/r").get_pull(1)
    bodies = [c.body for c in pull.get_issue_comments()]
    assert bodies == [f"comment {i}" for i in range(5)]
    pages = [r for r in fake.requests if r.path == "/repos/o/r/issues/1/comments"]
    assert [r.query.get("page", ["1"])[0] for r in pages] == ["1", "2", "3"]


def test_comments_reactions_and_edit(fake: FakeGitHub, gh: Github) -> None:
    fake.add_comment("o/r", 1, "/kernelpro retry", user="alice")
    issue = gh.get_repo("o/r").get_issue(1)
    assert issue.pull_request is not None
    mine = issue.create_comment("<!-- kernelpro -->\nqueued")
    assert mine.user.login == "github-actions[bot]"
    mine.edit("<!-- kernelpro -->\ndone")
    theirs = next(c for c in issue.get_comments() if c.user.login == "alice")
    theirs.create_reaction("eyes")
    theirs.create_reaction("eyes")  # GitHub answers 200 with the existing reaction
    assert [r.content for r in theirs.get_reactions()] == ["eyes"]
    assert fake.comments[mine.id].body.endswith("done")


def test_pulls_refs_create_find_update(fake: FakeGitHub, gh: Github) -> None:
    repo = gh.get_repo("o/r")
    repo.create_git_ref("refs/heads/kernelpro/pr-1", "d" * 40)
    ref = repo.get_git_ref("heads/kernelpro/pr-1")
    ref.edit("e" * 40, force=True)
    assert fake.repos["o/r"].refs["heads/kernelpro/pr-1"] == "e" * 40
    created = repo.create_pull(base="feat", head="kernelpro/pr-1", title="t", body="b")
    with pytest.raises(GithubException) as dup:
        repo.create_pull(base="feat", head="kernelpro/pr-1", title="t", body="b")
    assert dup.value.status == 422
    found = list(repo.get_pulls(state="open", head="o:kernelpro/pr-1"))
    assert [p.number for p in found] == [created.number]
    found[0].edit(body="updated")
    assert repo.get_pull(created.number).body == "updated"
    assert list(repo.get_pulls(state="open", head="o:nothing")) == []
    ref.delete()
    assert "heads/kernelpro/pr-1" not in fake.repos["o/r"].refs


def test_pygithub_add_to_labels_bare_array_is_flagged(fake: FakeGitHub, gh: Github) -> None:
    """GitHub's description only allows {"labels": [...]}; PyGithub sends a bare array."""
    pull = gh.get_repo("o/r").get_pull(1)
    with pytest.raises(GithubException):
        pull.add_to_labels("x")
    assert fake.take_errors()
    gh.requester.requestJsonAndCheck(
        "POST", "/repos/o/r/issues/1/labels", input={"labels": ["kernelpro"]}
    )
    pull.remove_from_labels("optimize-kernels")
    assert fake.repos["o/r"].issues[1].labels == ["kernelpro"]


@pytest.mark.parametrize("status", [403, 404, 422, 500])
def test_error_injection(fake: FakeGitHub, gh: Github, status: int) -> None:
    fake.fail_next("POST", r"/issues/1/comments$", status)
    issue = gh.get_repo("o/r").get_issue(1)
    with pytest.raises(GithubException) as info:
        issue.create_comment("hello")
    assert info.value.status == status
    issue.create_comment("hello again")  # times=1: the next one goes through
    assert [c.body for c in fake.comments.values()] == ["hello again"]


def test_rate_limit_injection(fake: FakeGitHub, gh: Github) -> None:
    fake.fail_next("GET", r"/permission$", "rate-limit", times=2)
    repo = gh.get_repo("o/r")
    for _ in range(2):
        with pytest.raises(RateLimitExceededException) as info:
            repo.get_collaborator_permission("alice")
        assert info.value.status == 403
        assert info.value.headers is not None
        assert info.value.headers.get("x-ratelimit-remaining") == "0"
        assert info.value.headers.get("retry-after") == "60"
    with pytest.raises(GithubException) as missing:
        repo.get_collaborator_permission("alice")
    assert missing.value.status == 404


def test_workflow_run_jobs_and_artifacts(fake: FakeGitHub, gh: Github, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import io
    import zipfile

    import requests

    run = fake.add_run("o/r", head_sha=HEAD, head_branch="feat", run_id=99)
    jobs = [fake.add_job(99, f"optimize k{i}") for i in range(3)]
    fake.set_job(jobs[0], "completed", "success")
    (tmp_path / "k0").mkdir()
    (tmp_path / "k0" / "result.json").write_text("{}")
    art = fake.upload_artifact(99, "kernelpro-result-0", tmp_path)
    wr = gh.get_repo("o/r").get_workflow_run(99)
    assert (wr.id, wr.head_sha, wr.status) == (run.id, HEAD, "in_progress")
    listed = list(wr.jobs("latest"))  # per_page=2: two pages
    assert [(j.name, j.status, j.conclusion) for j in listed] == [
        ("optimize k0", "completed", "success"), ("optimize k1", "queued", None),
        ("optimize k2", "queued", None)]
    (a,) = list(wr.get_artifacts())
    assert (a.id, a.name, a.expired) == (art.id, "kernelpro-result-0", False)
    # The download: a 302 to the storage host, which needs no token.
    r = requests.get(f"{fake.base_url}/repos/o/r/actions/artifacts/{a.id}/zip",
                     headers={"Authorization": "Bearer t"}, allow_redirects=False, timeout=5)
    assert r.status_code == 302 and r.headers["Location"].startswith(fake.blob_url)
    blob = requests.get(r.headers["Location"], timeout=5)
    assert zipfile.ZipFile(io.BytesIO(blob.content)).namelist() == ["k0/result.json"]
    # Following the redirect with requests drops the token on the way (another port is another host).
    assert requests.get(r.url, headers={"Authorization": "Bearer t"}, timeout=5).status_code == 200
    assert all("authorization" not in h for _, h in fake.blob_requests)
    bad = requests.get(f"{fake.base_url}/repos/o/r/actions/artifacts/{a.id}/tar", timeout=5)
    assert bad.status_code == 404
