// Checks examples/downstream-refunds with the official TypeScript MCP SDK:
// refund_order pays through a payment API that deduplicates by the
// Idempotency-Key the tool derives from its claim. The tool server is
// killed with SIGKILL after the payment and before the outcome was
// recorded; the retry, to a restarted server, runs the refund again with
// the same downstream key, and the payment API holds one payment.
//
//   npm ci && node downstream.mjs   (DOWNSTREAM_REFUNDS_BIN names a built binary; else it is built with go)
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const here = dirname(fileURLToPath(import.meta.url));
const work = mkdtempSync(join(tmpdir(), "downstream-refunds-ts-"));
let bin = process.env.DOWNSTREAM_REFUNDS_BIN;
if (!bin) {
  bin = join(work, "downstream-refunds");
  execFileSync("go", ["build", "-o", bin, "."], { cwd: join(here, "..", "..", "downstream-refunds"), stdio: "inherit" });
}

// waitFor resolves with the first match of re in a stream's text.
function waitFor(stream, re) {
  return new Promise((resolve, reject) => {
    let seen = "";
    const onData = (chunk) => {
      seen += chunk;
      const m = seen.match(re);
      if (m) {
        stream.off("data", onData);
        resolve(m);
      }
    };
    stream.setEncoding("utf8");
    stream.on("data", onData);
    stream.on("end", () => reject(new Error(`stream ended before ${re}: ${seen}`)));
  });
}

const payments = spawn(bin, ["payments", "-addr", "127.0.0.1:0", "-ledger", join(work, "payments.jsonl")], {
  stdio: ["ignore", "inherit", "pipe"],
});
const [, api] = await waitFor(payments.stderr, /payment API on (http:\/\/\S+)/);

async function toolServer(block) {
  const args = ["serve", "-dir", join(work, "tool"), "-payments", api];
  if (block) args.push("-test-block", block);
  const transport = new StdioClientTransport({ command: bin, args, stderr: "pipe" });
  const client = new Client({ name: "downstream-refunds-tsclient", version: "1.0.0" });
  const blocked = waitFor(transport.stderr, /blocked (\S+)/);
  blocked.catch(() => {}); // a server that never blocks ends without it
  await client.connect(transport);
  return { client, transport, blocked };
}

const call = { name: "refund_order", arguments: { order_id: "o-ts-7", amount_cents: 700 }, _meta: { idempotencyKey: "tsclient:refund:o-ts-7" } };
try {
  const victim = await toolServer("after-payment");
  const lost = victim.client.callTool(call).then(
    () => assert.fail("a call to a killed server answered"),
    () => "lost",
  );
  await victim.blocked; // paid, the outcome not recorded yet
  process.kill(victim.transport.pid, "SIGKILL");
  assert.equal(await lost, "lost");
  await victim.client.close().catch(() => {});

  const { client } = await toolServer("");
  const retried = await client.callTool(call);
  assert.equal(retried.isError ?? false, false, `retry failed: ${JSON.stringify(retried)}`);
  assert.notEqual(retried._meta?.idempotentReplayed, true, "recovery answered not committed: the refund ran again");
  assert.equal(retried.structuredContent.payment_id, "py_1", "the payment API answered with the first payment");
  assert.match(retried.structuredContent.downstream_key, /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$/);

  const replay = await client.callTool(call);
  assert.equal(replay._meta?.idempotentReplayed, true, "a further retry is replayed");
  assert.ok(replay._meta?.idempotentFirstRunAt, "with the time its first run began");
  await client.close();

  const { refunds } = await (await fetch(`${api}/v1/refunds`)).json();
  assert.equal(refunds.length, 1, `one payment: ${JSON.stringify(refunds)}`);
  console.log("downstream: SIGKILL after the payment, retry ran the refund again, the payment API holds one payment");
} finally {
  payments.kill();
  rmSync(work, { recursive: true, force: true });
}
