// Typed errors from broker answers (no broker needed).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { BY_CODE, APIError, ConstraintViolated, RateLimited, errorFor } from "../dist/index.js";

// The codes the contract names: the enum of the Problem schema's `code` in api/openapi.yaml.
function contractCodes() {
  const spec = readFileSync(new URL("../../../api/openapi.yaml", import.meta.url), "utf8");
  const m = spec.match(/enum: \[(invalid_token[^\]]*)\]/);
  assert.ok(m, "api/openapi.yaml names the problem codes");
  return m[1].split(",").map((c) => c.trim()).sort();
}

test("the header names the class", () => {
  const e = errorFor(429, new Headers({ "X-Airlock-Code": "rate_limited", "Retry-After": "3" }),
    '{"type":"urn:airlock:problem:rate_limited","status":429,"code":"rate_limited","detail":"slow down"}');
  assert.ok(e instanceof RateLimited);
  assert.equal(e.retryAfter, 3);
  assert.equal(e.detail, "slow down");
  assert.equal(e.name, "RateLimited");
});

test("a problem without the header, and an answer without a problem", () => {
  const e = errorFor(403, new Headers(), '{"code":"constraint_violated","param":"body.to","constraint":"pin","request_id":"req_1"}');
  assert.ok(e instanceof ConstraintViolated);
  assert.deepEqual([e.param, e.constraint, e.requestId], ["body.to", "pin", "req_1"]);
  const plain = errorFor(502, new Headers(), "Bad Gateway");
  assert.equal(plain.constructor, APIError);
  assert.equal(plain.code, undefined);
  assert.equal(plain.detail, "Bad Gateway");
});

test("class names are the codes in CamelCase", () => {
  for (const [code, cls] of Object.entries(BY_CODE)) {
    assert.equal(cls.name, code.split("_").map((w) => w[0].toUpperCase() + w.slice(1)).join(""));
  }
  assert.deepEqual(Object.keys(BY_CODE).sort(), contractCodes(), "one class per code of the contract");
});
