// Drives `space mcp` with the official MCP TypeScript SDK's client, over
// stdio and over streamable HTTP, against a real spaced. Run by
// e2e/mcp_test.go with SPACE_URL, SPACE_API_KEY, SPACE_BIN (the space CLI)
// and SPACE_MCP_HTTP_URL (a running `space mcp --http`). Exits non-zero on
// the first failed check; prints "ok: all checks passed" at the end.
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const { SPACE_URL, SPACE_API_KEY, SPACE_BIN, SPACE_MCP_HTTP_URL } = process.env;
for (const [k, v] of Object.entries({ SPACE_URL, SPACE_API_KEY, SPACE_BIN, SPACE_MCP_HTTP_URL })) {
  if (!v) throw new Error(`${k} is not set`);
}

// VMs boot slowly without KVM: a lifecycle tool may take minutes.
const slow = { timeout: 600_000 };

const TOOLS = [
  "branch_sandbox", "checkpoint_sandbox", "create_sandbox", "delete_sandbox", "get_preview_url", "list_files",
  "list_ports", "list_sandboxes", "pause_sandbox", "read_command_output", "read_file", "restore_sandbox", "run_command", "start_command",
  "suspend_sandbox", "wake_sandbox", "write_file",
];

async function call(client, name, args) {
  const res = await client.callTool({ name, arguments: args }, undefined, slow);
  if (res.isError) throw new Error(`${name}(${JSON.stringify(args)}) failed: ${res.content.map((c) => c.text).join("")}`);
  assert.ok(res.structuredContent, `${name}: no structured content`);
  return res.structuredContent;
}

async function callError(client, name, args, want) {
  const res = await client.callTool({ name, arguments: args }, undefined, slow);
  assert.equal(res.isError, true, `${name}(${JSON.stringify(args)}) did not fail`);
  const text = res.content.map((c) => c.text).join("");
  assert.ok(text.includes(want), `${name} error ${JSON.stringify(text)} lacks ${JSON.stringify(want)}`);
}

async function scenario(label, client) {
  const info = client.getServerVersion();
  assert.equal(info?.name, "space", `${label}: server info ${JSON.stringify(info)}`);
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
  for (const t of tools) {
    assert.ok(t.description, `${t.name}: no description`);
    assert.equal(t.inputSchema.type, "object", `${t.name}: input schema`);
    assert.ok(t.outputSchema, `${t.name}: no output schema`);
    assert.ok(t.annotations, `${t.name}: no annotations`);
  }
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.equal(byName.delete_sandbox.annotations.destructiveHint, true);
  assert.equal(byName.read_file.annotations.readOnlyHint, true);

  const network = { egress: { default: "deny", allow: ["example.com"] } };
  const sb = await call(client, "create_sandbox", { template: "base", timeout_seconds: 1800, memory_mib: 256, network });
  assert.match(sb.id, /^sbx_/);
  assert.equal(sb.state, "running");
  assert.equal(sb.memory_mib, 256);
  assert.deepEqual(sb.network?.egress?.allow, ["example.com"]);
  try {
    const listed = await call(client, "list_sandboxes", {});
    assert.ok(listed.sandboxes.some((s) => s.id === sb.id), "list_sandboxes lacks the new sandbox");

    const run = await call(client, "run_command", { sandbox_id: sb.id, command: "echo ts-$((6*7)); echo e >&2; exit 2" });
    assert.equal(run.stdout, "ts-42\n");
    assert.equal(run.stderr, "e\n");
    assert.equal(run.exit_code, 2);
    assert.equal(run.reason, "exited");
    const argv = await call(client, "run_command", { sandbox_id: sb.id, argv: ["printf", "%s", "a b"] });
    assert.equal(argv.stdout, "a b");

    await call(client, "write_file", { sandbox_id: sb.id, path: "/root/ts/note.md", content: "# from TypeScript\n" });
    const read = await call(client, "read_file", { sandbox_id: sb.id, path: "/root/ts/note.md" });
    assert.equal(read.content, "# from TypeScript\n");
    const bin = Buffer.from([0, 1, 255, 128]);
    await call(client, "write_file", { sandbox_id: sb.id, path: "/root/ts/b", content_base64: bin.toString("base64") });
    const rb = await call(client, "read_file", { sandbox_id: sb.id, path: "/root/ts/b" });
    assert.deepEqual(Buffer.from(rb.content_base64, "base64"), bin);
    const ls = await call(client, "list_files", { sandbox_id: sb.id, path: "/root/ts" });
    assert.deepEqual(ls.entries.map((e) => e.name).sort(), ["b", "note.md"]);

    const started = await call(client, "start_command", { sandbox_id: sb.id, command: "echo one; sleep 2; echo two" });
    let after = 0;
    let out = "";
    for (let i = 0; ; i++) {
      assert.ok(i < 60, "the started command never exited");
      const r = await call(client, "read_command_output", { sandbox_id: sb.id, command_id: started.command_id, after });
      out += r.stdout;
      after = r.next_after;
      if (r.exited) {
        assert.equal(r.exit_code, 0);
        break;
      }
    }
    assert.equal(out, "one\ntwo\n");

    const susp = await call(client, "suspend_sandbox", { sandbox_id: sb.id });
    assert.equal(susp.state, "suspended");
    await callError(client, "read_file", { sandbox_id: sb.id, path: "/root/ts/note.md" }, "conflict");
    const woke = await call(client, "wake_sandbox", { sandbox_id: sb.id });
    assert.equal(woke.state, "running");
    const again = await call(client, "read_file", { sandbox_id: sb.id, path: "/root/ts/note.md" });
    assert.equal(again.content, "# from TypeScript\n");

    await callError(client, "run_command", { sandbox_id: "sbx_nosuch", command: "true" }, "not_found");
    await callError(client, "write_file", { sandbox_id: sb.id, path: "rel/x", content: "x" }, "absolute");
    await callError(client, "branch_sandbox", { checkpoint_id: "ckpt_nosuch" }, "not_found");
    await callError(client, "write_file", { sandbox_id: sb.id, path: "/root/x" }, "exactly one");
  } finally {
    const del = await call(client, "delete_sandbox", { sandbox_id: sb.id });
    assert.equal(del.deleted, true);
  }
  const after = await call(client, "list_sandboxes", {});
  assert.ok(!after.sandboxes.some((s) => s.id === sb.id), "the deleted sandbox is still listed");
  console.log(`ok: ${label}`);
}

async function main() {
  const stdio = new Client({ name: "space-e2e-ts", version: "1.0.0" });
  const env = { ...process.env, SPACE_URL, SPACE_API_KEY };
  await stdio.connect(new StdioClientTransport({ command: SPACE_BIN, args: ["mcp"], env, stderr: "inherit" }));
  try {
    await scenario("stdio", stdio);
  } finally {
    await stdio.close();
  }

  const http = new Client({ name: "space-e2e-ts-http", version: "1.0.0" });
  await http.connect(new StreamableHTTPClientTransport(new URL(SPACE_MCP_HTTP_URL), {
    requestInit: { headers: { Authorization: `Bearer ${SPACE_API_KEY}` } },
  }));
  try {
    await scenario("streamable http", http);
  } finally {
    await http.close();
  }
  console.log("ok: all checks passed");
}

const deadline = setTimeout(() => {
  console.error("client.mjs: deadline passed");
  process.exit(3);
}, 20 * 60_000);
deadline.unref();

main().then(() => process.exit(0), (err) => {
  console.error(err);
  process.exit(1);
});
