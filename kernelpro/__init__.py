"""kernelpro: a pull-request bot that makes GPU kernels faster and proves it."""
__version__ = "0.1.0"
