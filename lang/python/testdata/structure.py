"""Module docstring.

Second paragraph.
"""
from __future__ import annotations

import os, sys as system
import xml.etree.ElementTree as ET
from . import sibling
from ..core import (
    Base,  # comment inside
    Mixin as M,
)
from .util.text import *

VERSION = "1.0"
COUNT: int = 3
a, (b, c) = 1, (2, 3)
x = y = 0
print("module call"); z = 1
CONFIG = {
    "k": os.path.join("a", "b"),
}


def top(arg):
    """Top docstring."""
    import json
    helper(arg)

    def inner():
        return os.getcwd()
    # trailing comment belongs to nobody


@decorator
@app.route("/x", methods=["GET"])
class Outer(Base, mixins.Extra, metaclass=Meta):
    r'''Raw docstring\n
    with two lines
    '''

    attr = compute()

    class Inner:
        def method(self):
            return self.other()

    def __init__(self):
        super().__init__()
        from os import path

    @property
    def value(self):
        return self._value

    async def fetch(self, url):
        await get(url)

    if TYPE_CHECKING:
        def conditional(self):
            pass


async def atop():
    pass


if cond:
    def branch_if():
        pass
elif other:
    def branch_elif():
        pass
elif third:
    def branch_elif2():
        pass
else:
    def branch_else():
        pass

try:
    import fast
except ImportError:
    def fallback():
        pass
