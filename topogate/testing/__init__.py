"""Development tooling, not part of the controller (as ``kopf.testing``): the local control
plane the tests and the demo run on, and an in-memory stand-in for the API server
(``fakekube``) for unit tests of the shells. Nothing under ``topogate`` outside this package
imports it."""
