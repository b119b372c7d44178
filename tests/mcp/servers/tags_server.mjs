#!/usr/bin/env node
// A small MCP server on the official TypeScript SDK, for the proxy tests (issue 23):
// a server we did not write in Python, which knows nothing about quotas.
//
//   node tests/mcp/servers/tags_server.mjs --record deletions.jsonl           # stdio
//   node tests/mcp/servers/tags_server.mjs --record deletions.jsonl --port 9100 # HTTP /mcp
//
// Tools: delete_tag (destructiveHint) deletes a tag and appends one JSON line to the
// record file; delete_tags deletes a list of tags (a bulk tool, weighed by
// units_from); list_deletions (readOnlyHint) returns the record. The tag "protected"
// is refused by the tool itself (an isError result), so the proxy's pass-through of
// upstream errors can be seen. Resource tags://deletions and prompt tag_report show
// that resources and prompts pass through too. Over HTTP, GET /health answers 200
// and each recorded deletion notes the Authorization header the server received and
// the TCP connection it came on (the client's port).

import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { parseArgs } from "node:util";

import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

const { values } = parseArgs({
  options: {
    record: { type: "string" },
    port: { type: "string" },
    host: { type: "string", default: "127.0.0.1" },
    name: { type: "string", default: "tags" },
  },
});
if (!values.record) {
  console.error("tags_server: --record FILE is required");
  process.exit(2);
}
const recordFile = values.record;

function deletions() {
  if (!existsSync(recordFile)) return [];
  return readFileSync(recordFile, "utf8")
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line));
}

function buildServer(authorization, connection) {
  const server = new McpServer({ name: values.name, version: "1.0.0" });

  server.registerTool(
    "delete_tag",
    {
      title: "Delete a tag",
      description: "Delete a tag from every article. Destructive.",
      inputSchema: { tag: z.string() },
      annotations: { destructiveHint: true, readOnlyHint: false },
    },
    async ({ tag }) => {
      if (tag === "protected") {
        return {
          isError: true,
          content: [{ type: "text", text: "tag 'protected' cannot be deleted" }],
        };
      }
      const entry = {
        tag,
        pid: process.pid,
        authorization: authorization ?? null,
        connection: connection ?? null,
      };
      appendFileSync(recordFile, `${JSON.stringify(entry)}\n`);
      return {
        content: [{ type: "text", text: `deleted tag '${tag}'` }],
        structuredContent: { deleted: tag },
      };
    },
  );

  server.registerTool(
    "delete_tags",
    {
      title: "Delete tags",
      description: "Delete several tags at once. Destructive.",
      inputSchema: { tags: z.array(z.string()) },
      annotations: { destructiveHint: true, readOnlyHint: false },
    },
    async ({ tags }) => {
      for (const tag of tags) {
        const entry = { tag, pid: process.pid, authorization: authorization ?? null };
        appendFileSync(recordFile, `${JSON.stringify({ ...entry, connection: connection ?? null })}\n`);
      }
      return { content: [{ type: "text", text: `deleted ${tags.length} tags` }] };
    },
  );

  server.registerTool(
    "list_deletions",
    {
      title: "List deletions",
      description: "Every tag this server has deleted, oldest first.",
      inputSchema: {},
      annotations: { readOnlyHint: true },
    },
    async () => {
      const tags = deletions().map((entry) => entry.tag);
      return {
        content: [{ type: "text", text: JSON.stringify(tags) }],
        structuredContent: { count: tags.length, tags },
      };
    },
  );

  server.registerResource(
    "deletions",
    "tags://deletions",
    { mimeType: "application/json", description: "The deletion record." },
    async (uri) => ({
      contents: [{ uri: uri.href, mimeType: "application/json", text: JSON.stringify(deletions()) }],
    }),
  );

  server.registerPrompt(
    "tag_report",
    { description: "Ask for a report on one tag.", argsSchema: { tag: z.string() } },
    ({ tag }) => ({
      messages: [{ role: "user", content: { type: "text", text: `Report on tag '${tag}'.` } }],
    }),
  );
  return server;
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString("utf8");
  return text.length > 0 ? JSON.parse(text) : undefined;
}

if (values.port === undefined) {
  await buildServer(undefined).connect(new StdioServerTransport());
} else {
  // Stateless streamable HTTP: a server and a transport per request, the SDK's own
  // pattern for a server that keeps no per-session state.
  const http = createServer(async (req, res) => {
    const url = new URL(req.url ?? "/", "http://localhost");
    if (url.pathname === "/health") {
      res.writeHead(200, { "Content-Type": "application/json" }).end('{"ok":true}');
      return;
    }
    if (url.pathname !== "/mcp") {
      res.writeHead(404).end();
      return;
    }
    if (req.method !== "POST") {
      res.writeHead(405, { Allow: "POST" }).end();
      return;
    }
    const server = buildServer(req.headers.authorization, req.socket.remotePort);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on("close", () => {
      transport.close();
      server.close();
    });
    try {
      await server.connect(transport);
      await transport.handleRequest(req, res, await readBody(req));
    } catch (error) {
      console.error("tags_server:", error);
      if (!res.headersSent) res.writeHead(500).end();
    }
  });
  http.listen(Number(values.port), values.host);
}
