// A refund MCP server on the official TypeScript SDK, with no idempotency
// of its own: put `idem mcp-proxy` in front of it (docs/proxy.md).
//
//   LEDGER=/tmp/ledger.txt node server.mjs        (MCP over stdio)
//
// refund_order appends a line "KEY ORDER CENTS" to $LEDGER for every
// refund it makes, logging it and reporting progress; get_order only reads;
// confirm_order asks the client (elicitation); enable_vouchers adds a tool,
// issue_voucher, which changes the tool list. With $KILL_AT=before or acted and
// $KILL_KEY, it SIGKILLs itself once, on that key's call, before acting or
// after acting and before answering ($KILL_MARK marks it done).
import { appendFileSync, openSync, closeSync, fsyncSync, readFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const ledger = process.env.LEDGER ?? "ledger.txt";

function killHere(point, key) {
  const mark = process.env.KILL_MARK;
  if (process.env.KILL_AT !== point || process.env.KILL_KEY !== key || !mark) return;
  try {
    closeSync(openSync(mark, "wx"));
  } catch {
    return; // done before
  }
  process.kill(process.pid, "SIGKILL");
}

const server = new McpServer({ name: "ts-refunds", version: "1.0.0" }, { capabilities: { logging: {} } });

server.registerTool(
  "refund_order",
  {
    description: "Refund an order.",
    inputSchema: { order: z.string(), cents: z.number().int() },
    annotations: { destructiveHint: true },
  },
  async ({ order, cents }, extra) => {
    const key = extra._meta?.idempotencyKey ?? extra._meta?.["io.modelcontextprotocol/idempotency-key"] ??
      extra._meta?.["io.modelcontextprotocol/idempotencyKey"] ?? "";
    killHere("before", key);
    const progressToken = extra._meta?.progressToken;
    if (progressToken !== undefined) {
      await extra.sendNotification({ method: "notifications/progress", params: { progressToken, progress: 1, total: 2, message: `refunding ${order}` } });
    }
    await server.sendLoggingMessage({ level: "info", logger: "refunds", data: `refunding ${order}` });
    appendFileSync(ledger, `${key} ${order} ${cents}\n`);
    const fd = openSync(ledger, "r+");
    fsyncSync(fd);
    closeSync(fd);
    killHere("acted", key);
    const refunded = readFileSync(ledger, "utf8").split("\n").filter(Boolean).length;
    return { content: [{ type: "text", text: `refund re_${refunded} for ${order}: ${cents} cents` }] };
  },
);

server.registerTool(
  "get_order",
  {
    description: "Read an order.",
    inputSchema: { order: z.string() },
    annotations: { readOnlyHint: true },
  },
  async ({ order }) => ({ content: [{ type: "text", text: `order ${order}: paid` }] }),
);

server.registerTool(
  "confirm_order",
  {
    description: "Ask the user to confirm an order.",
    inputSchema: { order: z.string() },
    annotations: { readOnlyHint: true },
  },
  async ({ order }) => {
    const answer = await server.server.elicitInput({
      message: `Refund ${order}?`,
      requestedSchema: { type: "object", properties: { confirm: { type: "boolean" } } },
    });
    return { content: [{ type: "text", text: `${order}: ${answer.action} ${answer.content?.confirm}` }] };
  },
);

server.registerTool(
  "enable_vouchers",
  {
    description: "Offer issue_voucher from now on.",
    inputSchema: {},
    annotations: { idempotentHint: true },
  },
  async () => {
    if (!vouchers) {
      vouchers = server.registerTool(
        "issue_voucher",
        { description: "Issue a voucher.", inputSchema: { order: z.string() } },
        async ({ order }) => ({ content: [{ type: "text", text: `voucher ${++issued} for ${order}` }] }),
      );
    }
    return { content: [{ type: "text", text: "vouchers enabled" }] };
  },
);
let vouchers;
let issued = 0;

await server.connect(new StdioServerTransport());
