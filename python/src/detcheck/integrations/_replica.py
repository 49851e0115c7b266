"""The callbacks' ``replica_guard=N``: one reading of N and one way to make
the :class:`detcheck.ReplicaGuard` for both frameworks."""


def guard_every(n):
    """The guard's ``every`` for ``replica_guard=n``: None (or False) is
    off, True every step, an int >= 1 every n optimizer steps; anything else
    is refused (ValueError) when the callback is made."""
    if n is None or n is False:
        return None
    if n is True:
        return 1
    if isinstance(n, int) and n >= 1:
        return n
    raise ValueError("detcheck: replica_guard=%r: give the number of optimizer steps between checks "
                     "(an int >= 1), or None for no guard" % (n,))


def make_guard(model, optimizer, every, on_mismatch, group):
    """The guard over ``model`` and ``optimizer`` (None: parameters and
    buffers only)."""
    from .._replica import ReplicaGuard
    return ReplicaGuard(model, optimizer, group=group, every=every, on_mismatch=on_mismatch)
