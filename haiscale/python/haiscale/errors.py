"""The errors of haiscale's C++ side, as exception classes chosen by error code and reason.

Callers decide by class (or ``.code`` / ``.reason``), never by the message's text::

    try:
        q = _C.join_quorum(...)
    except QuorumTooSmall as e:       # too few replica groups asked in time: final
        print(e.details["asked"], "of", e.details["needed"])
    except HaiScaleError:             # anything else (the service failing over...): try again

- ``HaiScaleError`` (a ``RuntimeError``): every error; ``.code`` ("DeadlineExceeded"),
  ``.reason`` ("" or e.g. "QUORUM_TOO_SMALL") and ``.details`` (a dict) say which.
- ``HaiScaleTimeout`` (also a ``TimeoutError``): it did not complete in time.
- ``HaiScaleUnavailable`` (also a ``ConnectionError``): the service could not be reached.
- ``QuorumTooSmall`` (a ``HaiScaleTimeout``): fewer than min_replicas groups asked in time.
"""

from haiscale._backend import _C

HaiScaleError = _C.HaiScaleError
HaiScaleTimeout = _C.HaiScaleTimeout
HaiScaleUnavailable = _C.HaiScaleUnavailable
QuorumTooSmall = _C.QuorumTooSmall

__all__ = ["HaiScaleError", "HaiScaleTimeout", "HaiScaleUnavailable", "QuorumTooSmall"]
