"""How commands reach a machine: :mod:`~xpushare.transport.base` (the ``Host`` interface, ``CommandResult``),
:mod:`~xpushare.transport.local` and :mod:`~xpushare.transport.ssh` (its two implementations),
:mod:`~xpushare.transport.hosts` (``connect``: the ``Host`` of an inventory host), :mod:`~xpushare.transport.fanout`
(one operation on many hosts), :mod:`~xpushare.transport.kubectl` (the kubectl argv and its typed errors),
:mod:`~xpushare.transport.kube_objects` (Pod/Node/DaemonSet views of ``kubectl -o json``) and
:mod:`~xpushare.transport.manifest_yaml` (manifest YAML kubectl reads back with the same types) and
:mod:`~xpushare.transport.interrupt` (Ctrl-C, SIGTERM and SIGHUP that waits on commands cannot swallow).
Imports only :mod:`xpushare.inventory` and :mod:`xpushare.model`.

Nothing is imported here: callers import the submodule.
"""
