"""Bundled example repositories (package data for `kernelpro demo`)."""
