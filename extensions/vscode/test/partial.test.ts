/** Partial accept slicing (accept next word / next line). */

import { test } from "node:test";
import assert from "node:assert/strict";
import { nextLineSlice, nextWordSlice, partialSlice } from "../src/logic/partial";

test("a word is leading whitespace plus one run of word characters", () => {
  assert.equal(nextWordSlice("return a + b"), "return");
  assert.equal(nextWordSlice(" a + b"), " a");
  assert.equal(nextWordSlice("snake_case2(x)"), "snake_case2");
});

test("punctuation runs are their own word", () => {
  assert.equal(nextWordSlice("(a, b):"), "(");
  assert.equal(nextWordSlice(" += 1"), " +=");
  assert.equal(nextWordSlice("):\n    pass"), "):");
});

test("a word can cross a line break with the indentation", () => {
  assert.equal(nextWordSlice("\n    return x"), "\n    return");
});

test("unicode letters are word characters", () => {
  assert.equal(nextWordSlice("größe = 1"), "größe");
});

test("whitespace-only text is taken whole; empty stays empty", () => {
  assert.equal(nextWordSlice("  \n"), "  \n");
  assert.equal(nextWordSlice(""), "");
});

test("a line stops before the line break", () => {
  assert.equal(nextLineSlice("a + b\n    return c\n"), "a + b");
  assert.equal(nextLineSlice("single"), "single");
});

test("a suggestion starting with a line break takes the break and the next line", () => {
  assert.equal(nextLineSlice("\n    return c\nmore"), "\n    return c");
  assert.equal(nextLineSlice("\r\n  x\r\n"), "\r\n  x");
});

test("accepting repeatedly walks through the whole suggestion", () => {
  for (const kind of ["word", "line"] as const) {
    const text = "def f(x):\n    return x * 2\n";
    let rest = text;
    let built = "";
    for (let i = 0; i < 50 && rest; i++) {
      const slice = partialSlice(rest, kind);
      assert.ok(slice.length > 0, `${kind} accept made no progress at ${JSON.stringify(rest)}`);
      built += slice;
      rest = rest.slice(slice.length);
    }
    assert.equal(built, text);
  }
});
