// A stdio MCP server (the TypeScript SDK's low-level `Server`) that declares its tools,
// resources, prompts and results exactly as written here: object keys in an order that is
// not alphabetical, the 2025-11-25 `execution` of a tool, and fields no revision of the
// spec defines (`x-vendor`, an annotation's `category`). A pool in front of it should
// pass all of it on unchanged, key order included.

import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import {
  CallToolRequestSchema, ListToolsRequestSchema, ListResourcesRequestSchema,
  ReadResourceRequestSchema, ListPromptsRequestSchema, GetPromptRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

// Keys deliberately out of alphabetical order, at every depth.
const ORDERED_SCHEMA = {
  type: 'object',
  required: ['zeta', 'alpha'],
  properties: {
    zeta: { type: 'string', description: 'Asked first on purpose' },
    alpha: { type: 'integer', minimum: 1, description: 'Then this' },
    middle: {
      type: 'object',
      properties: { yes: { type: 'boolean' }, no: { type: 'boolean' } },
    },
  },
  additionalProperties: false,
};

const TOOL = {
  name: 'ordered',
  title: 'Ordered',
  description: 'A tool declared with its keys in a chosen order',
  inputSchema: ORDERED_SCHEMA,
  outputSchema: {
    type: 'object',
    properties: { zulu: { type: 'string' }, alpha: { type: 'string' } },
    required: ['zulu', 'alpha'],
  },
  annotations: { readOnlyHint: true, category: 'navigation', conditions: ['a page is open'] },
  execution: { taskSupport: 'optional' },
  'x-vendor': { zulu: 1, alpha: 2 },
};

const server = new Server(
  { name: 'as-declared', version: '1.0.0' },
  { capabilities: { tools: {}, resources: {}, prompts: {} } },
);
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [TOOL] }));
server.setRequestHandler(CallToolRequestSchema, async (request) => ({
  content: [{ type: 'text', text: JSON.stringify(request.params.arguments) }],
  structuredContent: { zulu: 'last letter', alpha: 'first letter' },
  'x-trace': { span: 'b7', at: 2 },
}));
server.setRequestHandler(ListResourcesRequestSchema, async () => ({
  resources: [{ uri: 'note://one', name: 'one', mimeType: 'text/plain', 'x-vendor': { zulu: 1, alpha: 2 } }],
}));
server.setRequestHandler(ReadResourceRequestSchema, async (request) => ({
  contents: [{ uri: request.params.uri, mimeType: 'text/plain', text: 'one' }],
}));
server.setRequestHandler(ListPromptsRequestSchema, async () => ({
  prompts: [{ name: 'greet', description: 'Greets', 'x-vendor': { zulu: 1, alpha: 2 } }],
}));
server.setRequestHandler(GetPromptRequestSchema, async () => ({
  messages: [{ role: 'user', content: { type: 'text', text: 'hello' } }],
}));

await server.connect(new StdioServerTransport());
