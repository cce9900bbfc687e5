"""Test lab: real daemons (OpenSSH ``sshd``) on loopback addresses for the test suite and benchmarks.

See ``tests/lab/README.md``; the SSH lab lives in :mod:`tests.lab.sshd`.
"""
