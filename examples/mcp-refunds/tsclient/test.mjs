// Checks the mcp-refunds example with a client nobody in this project
// wrote: the official TypeScript MCP SDK, over stdio. The same
// _meta.idempotencyKey twice refunds once and replays the answer marked
// _meta.idempotentReplayed and _meta.idempotentFirstRunAt; the key with a
// changed amount is refused; every key name clients use is read, and two
// different keys in one call are refused as invalid params.
//
//   npm ci && node test.mjs   (MCP_REFUNDS_BIN names a built server; else it is built with go)
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const here = dirname(fileURLToPath(import.meta.url));
const work = mkdtempSync(join(tmpdir(), "mcp-refunds-ts-"));
let bin = process.env.MCP_REFUNDS_BIN;
if (!bin) {
  bin = join(work, "mcp-refunds");
  execFileSync("go", ["build", "-o", bin, "."], { cwd: join(here, ".."), stdio: "inherit" });
}

const transport = new StdioClientTransport({ command: bin, args: ["-dir", join(work, "data")], stderr: "inherit" });
const client = new Client({ name: "mcp-refunds-tsclient", version: "1.0.0" });
await client.connect(transport);
try {
  const caps = client.getServerCapabilities();
  assert.ok(caps?.experimental?.idempotency, "server advertises the experimental idempotency capability");
  const { tools } = await client.listTools();
  const refundTool = tools.find((t) => t.name === "refund_order");
  assert.ok(refundTool?._meta?.idempotency, "refund_order says in its _meta that it takes keys");

  const key = "tsclient:refund:o-ts-1";
  const args = { order_id: "o-ts-1", amount_cents: 1250 };
  const first = await client.callTool({ name: "refund_order", arguments: args, _meta: { idempotencyKey: key } });
  assert.equal(first.isError ?? false, false, `first call failed: ${JSON.stringify(first)}`);
  assert.notEqual(first._meta?.idempotentReplayed, true, "first call is no replay");
  assert.equal(first.structuredContent.order_id, "o-ts-1");
  assert.equal(first.structuredContent.amount_cents, 1250);

  const second = await client.callTool({ name: "refund_order", arguments: args, _meta: { idempotencyKey: key } });
  assert.equal(second._meta?.idempotentReplayed, true, `retry is marked replayed: ${JSON.stringify(second)}`);
  assert.deepEqual(second.structuredContent, first.structuredContent, "retry replays the first refund");

  // The SEP-3182 shape, the key at the top of params, names the same call.
  const topLevel = await client.request(
    { method: "tools/call", params: { name: "refund_order", arguments: args, idempotencyKey: key } },
    CallToolResultSchema,
  );
  assert.equal(topLevel._meta?.idempotentReplayed, true, `top-level key replays: ${JSON.stringify(topLevel)}`);

  const changed = await client.callTool({
    name: "refund_order",
    arguments: { ...args, amount_cents: 9999 },
    _meta: { idempotencyKey: key },
  });
  assert.equal(changed.isError, true, "a changed amount under the same key is refused");
  assert.equal(changed._meta?.idempotencyStatus, "mismatch");
  assert.match(changed.content[0].text, new RegExp(key));

  const noKey = await client.callTool({ name: "refund_order", arguments: args });
  assert.equal(noKey.isError, true, "a write call without a key is refused");
  assert.equal(noKey._meta?.idempotencyStatus, "missing_key");

  // MCP names no key: each name clients use is read, and one key under
  // another name is the same call. A replay says when the first call ran,
  // and its content is the first answer's, byte for byte.
  const names = ["idempotencyKey", "io.modelcontextprotocol/idempotency-key", "io.modelcontextprotocol/idempotencyKey"];
  for (const [i, name] of names.entries()) {
    const order = { order_id: `o-name-${i}`, amount_cents: 100 + i };
    const nameKey = `tsclient:refund:name-${i}`;
    const before = Date.now();
    const ran = await client.callTool({ name: "refund_order", arguments: order, _meta: { [name]: nameKey } });
    const after = Date.now();
    assert.equal(ran.isError ?? false, false, `key in _meta[${name}] ran: ${JSON.stringify(ran)}`);
    assert.equal(ran._meta?.idempotentReplayed, undefined, "a first answer is no replay");
    assert.equal(ran._meta?.idempotentFirstRunAt, undefined, "a first answer has no first-run time");
    const other = names[(i + 1) % names.length];
    const again = await client.callTool({ name: "refund_order", arguments: order, _meta: { [other]: nameKey } });
    assert.equal(again._meta?.idempotentReplayed, true, `the key under ${other} replays the call under ${name}`);
    const at = again._meta?.idempotentFirstRunAt;
    assert.match(at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, `idempotentFirstRunAt is RFC 3339 UTC: ${at}`);
    assert.ok(Date.parse(at) >= before - 1000 && Date.parse(at) <= after, `first run at ${at}, the call ran in [${before}, ${after}]`);
    assert.equal(JSON.stringify(again.content), JSON.stringify(ran.content), "replayed content is the first content");
    assert.deepEqual(again.structuredContent, ran.structuredContent);
  }

  // The same key under two names is one key; two different keys are
  // invalid params, and nothing runs.
  const both = await client.callTool({
    name: "refund_order",
    arguments: args,
    _meta: { idempotencyKey: key, "io.modelcontextprotocol/idempotency-key": key },
  });
  assert.equal(both._meta?.idempotentReplayed, true, "one key under two names replays");
  await assert.rejects(
    client.callTool({
      name: "refund_order",
      arguments: { order_id: "o-two-keys", amount_cents: 1 },
      _meta: { idempotencyKey: "tsclient:a", "io.modelcontextprotocol/idempotencyKey": "tsclient:b" },
    }),
    (err) => err.code === -32602 && /two different idempotency keys/.test(err.message),
    "two different keys are an invalid-params error",
  );

  const list = await client.callTool({ name: "list_refunds", arguments: {} });
  assert.equal(list.structuredContent.refunds.length, 1 + names.length, `one refund per key: ${JSON.stringify(list.structuredContent)}`);
  console.log("tsclient: one refund per key under every key name; replay marked with its first-run time; two keys, changed amount and missing key refused");
} finally {
  await client.close();
  rmSync(work, { recursive: true, force: true });
}
