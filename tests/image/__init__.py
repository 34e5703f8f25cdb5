"""Image tests: a package, so that its conftest does not shadow tests/cri/conftest.py
(both would otherwise be imported as the module `conftest`)."""
