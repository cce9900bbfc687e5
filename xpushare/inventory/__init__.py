"""The inventory: :mod:`~xpushare.inventory.schema` (clusters, hosts, roles; YAML loading and validation),
:mod:`~xpushare.inventory.selection` (``--hosts``/``--role`` host selection) and :mod:`~xpushare.inventory.sut`
(the SUT's naming generations). Imports only :mod:`xpushare.model`.

Nothing is imported here: callers import the submodule.
"""
