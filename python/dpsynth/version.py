"""The package version, in a module of its own so that any module can read it without importing
the package (which imports most of them: :mod:`dpsynth.persist` writes it into saved files)."""
__version__ = "0.1.0"
