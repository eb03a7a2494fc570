package sample

// The sample repository: a small inventory service, written as real Python
// so that parsing, indexing and the agent see ordinary code.

const readme = `# inventory

A tiny inventory service used by the a2farm demo.
`

const setupPy = `from setuptools import find_packages, setup

setup(
    name="inventory",
    version="0.3.0",
    packages=find_packages(exclude=["tests"]),
)
`

const initPy = `"""Inventory: items, warehouses, prices and storage backends."""
from .models import Item, Warehouse
from .pricing import PriceRule, apply_tax, compute_discount

__version__ = "0.3.0"
`

const errorsPy = `"""Errors raised by the inventory package."""


class InventoryError(Exception):
    """Base class of inventory errors."""


class OutOfStock(InventoryError):
    """Raised when a removal asks for more units than are in stock."""

    def __init__(self, sku, available, requested):
        super().__init__(f"{sku}: {requested} requested, {available} available")
        self.sku = sku
        self.available = available
        self.requested = requested


class UnknownItem(InventoryError, KeyError):
    """Raised when a SKU is not stocked by a warehouse."""

    def __init__(self, sku):
        super().__init__(sku)
        self.sku = sku
`

const modelsPy = `"""Domain models for the inventory service."""
from dataclasses import dataclass

from .errors import OutOfStock, UnknownItem


@dataclass
class Item:
    """A stock-keeping unit."""

    sku: str
    name: str
    price: float
    quantity: int = 0

    def total_value(self):
        return self.price * self.quantity

    def restock(self, amount):
        if amount < 0:
            raise ValueError("amount must be positive")
        self.quantity += amount


class Warehouse:
    """Holds items by SKU."""

    def __init__(self, name):
        self.name = name
        self._items = {}

    def add_item(self, item):
        self._items[item.sku] = item

    def remove_item(self, sku, amount=1):
        item = self._items[sku]
        if item.quantity < amount:
            raise OutOfStock(sku, item.quantity, amount)
        item.quantity -= amount
        return item

    def find(self, query):
        """Return the items whose name contains query."""

        def matches(item):
            return query in item.name

        return [item for item in self._items.values() if matches(item)]

    def value(self):
        return sum(item.total_value() for item in self._items.values())
`

const pricingPy = `"""Price rules, discounts and taxes."""

DEFAULT_TAX_RATE = 0.2


class PriceRule:
    """A percentage discount for orders of at least min_quantity units."""

    def __init__(self, min_quantity, percent, priority=0):
        self.min_quantity = min_quantity
        self.percent = percent
        self.priority = priority

    def matches(self, quantity):
        return quantity > self.min_quantity

    def apply(self, price):
        return price * (1 - self.percent / 100)


def compute_discount(price, quantity, rules):
    """Return the best discounted unit price for quantity."""
    best = price
    for rule in rules:
        if rule.matches(quantity):
            best = min(best, rule.apply(price))
    return best


def apply_tax(amount, rate=DEFAULT_TAX_RATE):
    return round(amount * (1 + rate), 2)
`

const textPy = `"""Text helpers."""
import re

_SLUG_STRIP = re.compile(r"[^a-z0-9]+")


def slugify(text):
    """Lower-case text and join its words with dashes."""
    return _SLUG_STRIP.sub("-", text.lower()).strip("-")


def parse_quantity(text):
    """Parse "12", "12 units" or "1,200" into an int."""
    digits = text.split()[0].replace(",", "")
    return int(digits)
`

const legacyPy = `"""Helpers kept for the 0.2 API; superseded by inventory.utils."""


def old_slug(text):
    return text.lower().replace(" ", "_")


def old_quantity(text):
    return int(text)
`

const cliPy = `"""Command line entry point: inventory report FILE."""
import argparse
import json

from .models import Item, Warehouse
from .utils.text import parse_quantity


def build_parser():
    parser = argparse.ArgumentParser(prog="inventory")
    parser.add_argument("file")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    with open(args.file) as fh:
        rows = json.load(fh)
    warehouse = Warehouse("cli")
    for row in rows:
        warehouse.add_item(Item(row["sku"], row["name"], row["price"], parse_quantity(row["quantity"])))
    print(f"{warehouse.name}: {warehouse.value():.2f}")
`

const storageInitPy = `from .backends import JsonFileBackend, MemoryBackend
`

const backendsPy = `"""Storage backends for warehouse snapshots."""
import json


def _require_open(method):
    def wrapper(self, *args, **kwargs):
        if self.closed:
            raise RuntimeError("backend is closed")
        return method(self, *args, **kwargs)

    return wrapper


class MemoryBackend:
    """Keeps snapshots in a dict."""

    closed = False

    def __init__(self):
        self._data = {}

    @_require_open
    def save(self, key, value):
        self._data[key] = value

    @_require_open
    def load(self, key):
        return self._data[key]


class JsonFileBackend(MemoryBackend):
    """Writes snapshots to a JSON file on flush."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def flush(self):
        with open(self.path, "w") as fh:
            json.dump(self._data, fh)

    def close(self):
        self.flush()
        self.closed = True
`

const testModelsPy = `from inventory.models import Item, Warehouse


def test_value():
    w = Warehouse("w")
    w.add_item(Item("a", "apple", 2.0, 3))
    assert w.value() == 6.0


def test_remove_item():
    w = Warehouse("w")
    w.add_item(Item("a", "apple", 2.0, 3))
    assert w.remove_item("a").quantity == 2
`

const testPricingPy = `from inventory.pricing import PriceRule, compute_discount


def test_discount():
    rules = [PriceRule(10, 5)]
    assert compute_discount(100, 20, rules) == 95
`
