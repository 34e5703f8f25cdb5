# A package, so that this directory's conftest is imported as `net.conftest`
# and never shadows another directory's `conftest` module.
