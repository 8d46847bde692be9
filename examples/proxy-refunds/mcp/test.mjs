// Checks idem mcp-proxy with a server and a client nobody in this project
// wrote the SDK of: server.mjs on the official TypeScript MCP SDK behind
// `idem mcp-proxy`, called by the official TypeScript client over stdio.
// The proxy offers the server's tools and annotations; a key runs once
// under every key name and replays marked with its first run's time; a
// read-only tool passes through; and the server SIGKILLed after acting
// leaves one refund, the call held until the resolver finds it. What the
// proxy passes through arrives: the server's progress and log messages, its
// elicitation request (answered by this client), and its tools/list_changed
// (the new tool listed, and guarded).
//
//   npm ci && IDEM_BIN=/path/to/idem node test.mjs   (else idem is built with go)
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  ElicitRequestSchema,
  LoggingMessageNotificationSchema,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const here = dirname(fileURLToPath(import.meta.url));
const work = mkdtempSync(join(tmpdir(), "proxy-refunds-ts-"));
let bin = process.env.IDEM_BIN;
if (!bin) {
  bin = join(work, "idem");
  execFileSync("go", ["build", "-o", bin, "./cmd/idem"], { cwd: join(here, "..", "..", ".."), stdio: "inherit" });
}
const ledger = join(work, "ledger.txt");
const lines = () => {
  try {
    return readFileSync(ledger, "utf8").split("\n").filter(Boolean);
  } catch {
    return [];
  }
};

// The resolver: a ledger line with the key is committed, with the answer.
const resolver = createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    const { key } = JSON.parse(body);
    const at = lines().findIndex((l) => l.startsWith(key + " "));
    const [, order, cents] = at >= 0 ? lines()[at].split(" ") : [];
    const answer = at >= 0
      ? { verdict: "committed", body: JSON.stringify({ content: [{ type: "text", text: `refund re_${at + 1} for ${order}: ${cents} cents` }] }) }
      : { verdict: "not_committed" };
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify(answer));
  });
});
await new Promise((ok) => resolver.listen(0, "127.0.0.1", ok));
const resolverURL = `http://127.0.0.1:${resolver.address().port}/resolve`;

const transport = new StdioClientTransport({
  command: bin,
  // A short recovery grace: the resolver is asked 300 ms after a call is
  // held (the default, the lease, is 30 s).
  args: ["mcp-proxy", join(work, "store"), "-resolver", resolverURL, "-recovery-grace", "300ms", "--",
    process.execPath, join(here, "server.mjs")],
  env: { ...process.env, LEDGER: ledger, KILL_AT: "acted", KILL_KEY: "ts:killed", KILL_MARK: join(work, "killed") },
  stderr: "inherit",
});
const client = new Client({ name: "proxy-refunds-ts", version: "1.0.0" }, { capabilities: { elicitation: {} } });
const logs = [];
let listChanged;
const toolsChanged = new Promise((ok) => (listChanged = ok));
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params.data));
client.setNotificationHandler(ToolListChangedNotificationSchema, () => listChanged());
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  assert.match(req.params.message, /Refund o-ts-1\?/);
  return { action: "accept", content: { confirm: true } };
});
await client.connect(transport);
try {
  assert.equal(client.getServerVersion()?.name, "ts-refunds", "the proxy introduces itself as the upstream");
  const { tools } = await client.listTools();
  const refund = tools.find((t) => t.name === "refund_order");
  const get = tools.find((t) => t.name === "get_order");
  assert.equal(refund?.annotations?.destructiveHint, true, "refund_order keeps its annotations");
  assert.equal(get?.annotations?.readOnlyHint, true, "get_order keeps its annotations");
  assert.deepEqual(Object.keys(refund.inputSchema.properties ?? {}).sort(), ["cents", "order"], "the schema is the upstream's");

  await client.setLoggingLevel("info");
  const args = { order: "o-ts-1", cents: 1250 };
  const progress = [];
  const first = await client.callTool({ name: "refund_order", arguments: args, _meta: { idempotencyKey: "ts:1" } },
    undefined, { onprogress: (p) => progress.push(p.message) });
  assert.equal(first.isError ?? false, false, `first call: ${JSON.stringify(first)}`);
  assert.deepEqual(progress, ["refunding o-ts-1"], "the server's progress reaches the client");
  for (let i = 0; i < 100 && logs.length === 0; i++) await client.ping(); // the log may trail the answer
  assert.deepEqual(logs, ["refunding o-ts-1"], "the server's log message reaches the client");
  assert.notEqual(first._meta?.idempotentReplayed, true);
  for (const name of ["idempotencyKey", "io.modelcontextprotocol/idempotency-key", "io.modelcontextprotocol/idempotencyKey"]) {
    const again = await client.callTool({ name: "refund_order", arguments: args, _meta: { [name]: "ts:1" } });
    assert.equal(again._meta?.idempotentReplayed, true, `${name}: ${JSON.stringify(again)}`);
    assert.ok(again._meta?.idempotentFirstRunAt, "a replay carries its first run's time");
    assert.deepEqual(again.content, first.content, "the first answer, replayed");
  }
  const changed = await client.callTool({ name: "refund_order", arguments: { ...args, cents: 9999 }, _meta: { idempotencyKey: "ts:1" } });
  assert.equal(changed._meta?.idempotencyStatus, "mismatch", `changed amount: ${JSON.stringify(changed)}`);
  for (let i = 0; i < 2; i++) {
    const read = await client.callTool({ name: "get_order", arguments: { order: "o-ts-1" } });
    assert.equal(read.isError ?? false, false);
    assert.notEqual(read._meta?.idempotentReplayed, true, "read-only tools pass through");
  }

  // The server asks the client; the client answers.
  const confirmed = await client.callTool({ name: "confirm_order", arguments: { order: "o-ts-1" } });
  assert.equal(confirmed.content[0].text, "o-ts-1: accept true", `elicitation: ${JSON.stringify(confirmed)}`);

  // The server's tool list changes: the client is told and lists the new
  // tool, which the proxy guards.
  await client.callTool({ name: "enable_vouchers", arguments: {} });
  await toolsChanged;
  const voucher = (await client.listTools()).tools.find((t) => t.name === "issue_voucher");
  assert.ok(voucher, "the new tool is listed");
  const v1 = await client.callTool({ name: "issue_voucher", arguments: { order: "o-ts-1" }, _meta: { idempotencyKey: "ts:v" } });
  const v2 = await client.callTool({ name: "issue_voucher", arguments: { order: "o-ts-1" }, _meta: { idempotencyKey: "ts:v" } });
  assert.equal(v2._meta?.idempotentReplayed, true, `the new tool is guarded: ${JSON.stringify(v2)}`);
  assert.deepEqual(v2.content, v1.content);

  // The server dies after acting: the call is held, not run again, and
  // once the grace is over the resolver finds the refund.
  const killedArgs = { order: "o-ts-2", cents: 700 };
  const held = await client.callTool({ name: "refund_order", arguments: killedArgs, _meta: { idempotencyKey: "ts:killed" } });
  assert.equal(held._meta?.idempotencyStatus, "outcome_unknown", `killed after acting: ${JSON.stringify(held)}`);
  let settled;
  for (let attempt = 0; attempt < 50; attempt++) {
    settled = await client.callTool({ name: "refund_order", arguments: killedArgs, _meta: { idempotencyKey: "ts:killed" } });
    if (settled._meta?.idempotencyStatus !== "outcome_unknown") break;
    await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.equal(settled._meta?.idempotentReplayed, true, `after the resolver: ${JSON.stringify(settled)}`);
  assert.match(settled.content[0].text, /o-ts-2/);

  const per = {};
  for (const l of lines()) per[l.split(" ")[0]] = (per[l.split(" ")[0]] ?? 0) + 1;
  assert.deepEqual(per, { "ts:1": 1, "ts:killed": 1 }, "one refund per key");
  console.log("ok: idem mcp-proxy in front of the TypeScript SDK's server, called by its client");
} finally {
  await client.close();
  resolver.close();
  rmSync(work, { recursive: true, force: true });
}
