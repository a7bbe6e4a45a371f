"""Failures as one line: the expected ones (`Fatal`, with their kind) and user code that raised."""

import os
import re
import traceback

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class Fatal(Exception):
    """An expected failure with a ready one-line message; kind is unavailable, invalid or error."""

    def __init__(self, message, kind="error"):
        Exception.__init__(self, message)
        self.kind = kind


def one_line(exc):
    """`Type: first line of the message`, bounded: what a person needs to see first."""
    if isinstance(exc, Fatal):
        text = str(exc)
    else:
        first = ""
        for line in str(exc).strip().splitlines():
            if line.strip():
                first = line.strip()
                break
        text = type(exc).__name__ + (": " + first if first else "")
    return " ".join(text.split())[:600]


def in_package(filename):
    """Whether a traceback frame's file is one of this package's modules."""
    return os.path.dirname(os.path.abspath(filename)) == PACKAGE_DIR


def where(exc):
    """` (at FILE:LINE)` of the innermost frame of exc's traceback outside torch and this package
    (the user's line rather than torch's), else of the innermost one outside this package; ""
    without one: the package is written out for each launch and gone after it, so a line of its
    own helps nobody."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    theirs = [f for f in frames if not in_package(f.filename)]
    outside = [f for f in theirs if os.sep + "torch" + os.sep not in f.filename]
    if not theirs:
        return ""
    f = (outside or theirs)[-1]
    return " (at %s:%d)" % (f.filename, f.lineno)


def raised(what, exc):
    """A Fatal for user code that raised: `WHAT raised Type: message (at FILE:LINE)`."""
    if isinstance(exc, Fatal):
        return exc
    return Fatal("%s raised %s%s" % (what, one_line(exc), where(exc)), "invalid")


def unused_parameters_hint(exc):
    """DDP's stop mid-run over parameters without a gradient (its message is a paragraph that
    names torch's keyword) as one whole line naming ddpcheck's flag; other errors unchanged."""
    text = str(exc)
    if isinstance(exc, Fatal) or "find_unused_parameters" not in text:
        return exc
    indices = ""
    m = re.search(r"did not receive grad for rank \d+:\s*([\d ]+)", text)
    if m:
        indices = " (DDP's parameter positions %s)" % ", ".join(m.group(1).split())
    return Fatal("DDP stopped: some trainable parameters got no gradient in a step%s; pass "
                 "--find-unused-parameters, or remove those parameters from the model" % indices, "invalid")
