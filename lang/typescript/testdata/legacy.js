"use strict";
const path = require("path");

class Store extends Map {
  constructor(name) {
    super();
    this.name = name;
  }

  get size2() { return this.size * 2; }

  load = async () => {
    return import("./lazy.mjs");
  };

  static from(entries) { return new Store(entries); }
}

function helper(a, b) {
  return a + b;
}

var old = function () {
  return helper(1, 2);
};

const arrow = async (x) => {
  await x;
};

module.exports = { Store, helper };
