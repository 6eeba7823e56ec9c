// A backend's MCP client library against the gateway, as a new user would use it: connect
// with the gateway token, list the tools and call one, read the first resource, get the
// first prompt, close. Prints what it saw as JSON; exits 1 on the first failure (its
// message on stderr).
//
//   node gateway_clients.mjs <ai-sdk|mastra> <gateway URL> <token> <tool> <text>
//
// Both libraries speak 2026-07-28 first (no initialize, a result type on every result).
import { createMCPClient } from '@ai-sdk/mcp';
import { MCPClient } from '@mastra/mcp';

const [library, url, token, tool, text] = process.argv.slice(2);
const headers = { Authorization: `Bearer ${token}` };

/// The text of a tool result's first content block.
const firstText = (result) => result?.content?.find((c) => c.type === 'text')?.text;

async function aiSdk() {
  const client = await createMCPClient({ transport: { type: 'http', url, headers } });
  try {
    const listed = await client.listTools();
    const called = await client.callTool({ name: tool, arguments: { text } });
    const resources = await client.listResources();
    const read = await client.readResource({ uri: resources.resources[0].uri });
    const prompts = await client.listPrompts();
    const prompt = await client.getPrompt({ name: prompts.prompts[0].name, arguments: { name: 'Ada' } });
    // The tool set an AI SDK agent hands its model, executed as the model's call would be.
    const toolSet = await client.tools();
    const executed = await toolSet[tool].execute({ text }, { toolCallId: 't1', messages: [] });
    return {
      tools: listed.tools.map((t) => t.name),
      called: firstText(called),
      executed: firstText(executed),
      resource: read.contents[0]?.text ?? null,
      prompt: prompt.messages.length,
    };
  } finally {
    await client.close();
  }
}

async function mastra() {
  const client = new MCPClient({
    id: `gateway-${Date.now()}`,
    servers: { pool: { url: new URL(url), requestInit: { headers } } },
  });
  try {
    const tools = await client.listTools();
    // mastra names a server's tools `<server>_<tool>`.
    const name = `pool_${tool}`;
    if (!tools[name]) throw new Error(`no tool ${name} among ${Object.keys(tools).join(', ')}`);
    const executed = await tools[name].execute({ text }, {});
    const resources = await client.resources.list();
    const read = await client.resources.read('pool', resources.pool[0].uri);
    const prompts = await client.prompts.list();
    const prompt = await client.prompts.get({
      serverName: 'pool',
      name: prompts.pool[0].name,
      args: { name: 'Ada' },
    });
    return {
      tools: Object.keys(tools),
      executed: firstText(executed) ?? JSON.stringify(executed),
      resource: read.contents[0]?.text ?? null,
      prompt: prompt.messages.length,
    };
  } finally {
    await client.disconnect();
  }
}

try {
  const seen = library === 'mastra' ? await mastra() : await aiSdk();
  console.log(JSON.stringify(seen));
  process.exit(0);
} catch (error) {
  console.error(error?.stack ?? String(error));
  process.exit(1);
}
