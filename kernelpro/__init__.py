"""kernelpro: a pull-request bot that makes GPU kernels faster and proves it."""
# The one place the version is written: pyproject.toml reads it ([tool.setuptools.dynamic]), and a
# release is tagged `v` + this (semantic versioning, README "Versions").
__version__ = "0.1.0"
